"""``manage.py check`` (and start-up) warns when the fairness PDF's font is missing: without it
Chinese and Σ print as boxes (diagnosis/reports/pdf.py), which a server log line alone hides."""

from __future__ import annotations

import os
from typing import Any

from django.core import checks

# fonts-wqy-microhei: TrueType outlines (ReportLab embeds no CFF/OpenType-PS font such as Noto CJK).
# Here, not in pdf.py: this check runs at every start, and pdf.py loads ReportLab.
CJK_FONT_FILE = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
CJK_FONT_PACKAGE = "fonts-wqy-microhei"


@checks.register()
def pdf_font_is_installed(app_configs: Any = None, **kwargs: Any) -> list[checks.Warning]:
    if os.path.isfile(CJK_FONT_FILE):
        return []
    return [
        checks.Warning(
            f"{CJK_FONT_FILE} is missing: the fairness PDF prints Chinese and Σ as boxes",
            hint=f"apt-get install {CJK_FONT_PACKAGE} (no restart needed)",
            id="gpuobs.W041",
        )
    ]
