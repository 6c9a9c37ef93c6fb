"""``manage.py check`` (and start-up) warns when the fairness PDF's font is missing: without it
Chinese and Σ print as boxes (diagnosis/reports/pdf.py), which a server log line alone hides."""

from __future__ import annotations

import os
from typing import Any

from django.core import checks

from diagnosis.reports import pdf


@checks.register()
def pdf_font_is_installed(app_configs: Any = None, **kwargs: Any) -> list[checks.Warning]:
    if os.path.isfile(pdf.CJK_FONT_FILE):
        return []
    return [
        checks.Warning(
            f"{pdf.CJK_FONT_FILE} is missing: the fairness PDF prints Chinese and Σ as boxes",
            hint=f"apt-get install {pdf.CJK_FONT_PACKAGE} (no restart needed)",
            id="gpuobs.W041",
        )
    ]
