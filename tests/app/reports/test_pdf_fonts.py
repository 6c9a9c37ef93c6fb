"""The fairness PDF embeds a font with CJK and math glyphs (diagnosis/reports/pdf.py): a Chinese
tenant name and the Σ of Jain's index come back when the PDF's text is read (pypdf), instead of
boxes. The font is WenQuanYi Micro Hei from Debian's ``fonts-wqy-microhei`` (.ci/run installs
it); without it the test fails under CI=true and skips elsewhere."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pypdf
import pytest
from django.core.checks import run_checks

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster
from diagnosis.reports import checks as font_check
from diagnosis.reports import pdf
from tests.conftest import running_in_ci
from tests.support.builders import SnapshotBuilder

pytestmark = pytest.mark.django_db

TENANT = "训练组"  # "the training group"
START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
PERIOD = "from=2026-11-29T07:00:00Z&to=2026-11-29T08:03:00Z"


@pytest.fixture
def cjk_font() -> str:
    if not Path(pdf.CJK_FONT_FILE).is_file():
        message = f"{pdf.CJK_FONT_FILE} is missing: apt-get install {pdf.CJK_FONT_PACKAGE}"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return pdf.CJK_FONT_FILE


def chinese_tenant_cluster() -> Cluster:
    cluster = Cluster.objects.create(name="beijing", enabled=False)
    for minute in range(3):
        snapshot = (
            SnapshotBuilder(as_of=START + timedelta(minutes=minute), window_s=60, cluster="beijing")
            .pool("a100", nodes=1, gpus=8)
            .queue(TENANT, deserved_gpus=8)
            .job("train-1", tenant=TENANT, gpus_per_pod=8, node="a100-000", ran="1h", util=0.8)
            .build()
        )
        record_cycle(cluster, snapshot)
    return cluster


def pdf_text(content: bytes) -> str:
    reader = pypdf.PdfReader(io.BytesIO(content))
    return "\n".join(page.extract_text() for page in reader.pages)


def test_the_pdf_prints_a_chinese_tenant_name_and_sigma(cjk_font: str, alice_client) -> None:
    chinese_tenant_cluster()

    response = alice_client.get(f"/clusters/beijing/fairness.pdf?{PERIOD}")

    assert response.status_code == 200
    text = pdf_text(response.content)
    assert TENANT in text
    assert "Σ" in text


def test_the_pdf_embeds_wenquanyi_micro_hei_as_a_subset(cjk_font: str, alice_client) -> None:
    chinese_tenant_cluster()

    content = alice_client.get(f"/clusters/beijing/fairness.pdf?{PERIOD}").content

    fonts = {
        str(font["/BaseFont"])
        for page in pypdf.PdfReader(io.BytesIO(content)).pages
        for font in page["/Resources"]["/Font"].values()
    }
    assert any(name.endswith("+WenQuanYiMicroHei-0") for name in fonts), fonts
    assert b"/FontFile2" in content  # the TrueType program itself is in the file


def test_a_chinese_reader_gets_the_pdf_in_chinese(cjk_font: str, alice_client) -> None:
    chinese_tenant_cluster()

    response = alice_client.get(
        f"/clusters/beijing/fairness.pdf?{PERIOD}", HTTP_ACCEPT_LANGUAGE="zh-CN"
    )

    text = pdf_text(response.content)
    assert "租户公平性报告" in text  # "Tenant fairness report"
    assert "Jain 指数：" in text  # the definitions, with their Σ
    assert "Σ" in text


def test_the_pdf_in_chinese_embeds_the_cjk_font_and_prints_chinese(
    cjk_font: str, alice_client
) -> None:
    chinese_tenant_cluster()

    content = alice_client.get(
        f"/clusters/beijing/fairness.pdf?{PERIOD}", HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).content

    fonts = {
        str(font["/BaseFont"])
        for page in pypdf.PdfReader(io.BytesIO(content)).pages
        for font in page["/Resources"]["/Font"].values()
    }
    assert any(name.endswith("+WenQuanYiMicroHei-0") for name in fonts), fonts
    text = pdf_text(content)
    assert "租户公平性报告" in text  # the title, in Chinese glyphs read back
    assert "Σ" in text


def test_the_pdf_has_the_productive_section_and_the_period_once(alice_client) -> None:
    chinese_tenant_cluster()

    text = pdf_text(alice_client.get(f"/clusters/beijing/fairness.pdf?{PERIOD}").content)

    assert "Allocated and productive shares" in text
    assert "Useful GPU-h" in text.replace("\n", " ")
    assert text.count("2026-11-29 07:00 UTC") == 1  # a custom range, not repeated as its label


def test_a_missing_font_warns_in_manage_py_check_and_is_looked_for_again(
    cjk_font: str, monkeypatch, tmp_path
) -> None:
    monkeypatch.setattr(pdf, "_registered", [])
    monkeypatch.setattr(pdf, "CJK_FONT_FILE", str(tmp_path / "missing.ttc"))
    monkeypatch.setattr(font_check, "CJK_FONT_FILE", str(tmp_path / "missing.ttc"))
    warnings = [m for m in run_checks() if m.id == "gpuobs.W041"]
    assert [pdf.CJK_FONT_PACKAGE in m.hint for m in warnings] == [True]
    assert pdf._register_fonts().endswith("Vera.ttf")

    monkeypatch.setattr(pdf, "CJK_FONT_FILE", cjk_font)  # the package installed, no restart
    monkeypatch.setattr(font_check, "CJK_FONT_FILE", cjk_font)
    assert pdf._register_fonts() == cjk_font
    assert [m for m in run_checks() if m.id == "gpuobs.W041"] == []
