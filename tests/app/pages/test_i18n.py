"""Chinese (zh-Hans) beside English (docs/ui.md "Language"): Accept-Language and the header's
language switch (set_language) choose it; every template loads i18n; the zh-Hans catalog
(locale/zh_Hans/LC_MESSAGES/django.po) translates every msgid and its compiled .mo is the one
committed; rule titles and docs are translated at the Django layer (diagnosis/rule_catalog.py)."""

from __future__ import annotations

import gettext
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.test import Client
from django.utils import translation

from diagnosis.core.rules.registry import all_rules
from diagnosis.rule_text import render_rule_catalog, render_xid_catalog, xid_texts
from tests.conftest import REPO_ROOT, running_in_ci
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

LOCALE = REPO_ROOT / "locale" / "zh_Hans" / "LC_MESSAGES"
TEMPLATES = REPO_ROOT / "templates"


@pytest.fixture
def overview(make_cluster):
    """A cluster with no cycle yet: its overview still has headings, hints and the menu."""
    return make_cluster("shanghai")


def test_accept_language_zh_hans_gives_the_overview_in_chinese(overview, bob) -> None:
    client = logged_in_client(bob)

    html = client.get("/clusters/shanghai/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content
    text = html.decode()

    assert '<html lang="zh-hans">' in text
    assert "该集群还没有成功的诊断周期。" in text  # "No diagnosis cycle ... has succeeded yet."
    assert "未关闭的发现" in text  # "Open findings"
    assert ">发现</a>" in text  # the menu's "Findings"


def test_without_accept_language_the_overview_is_english(overview, bob) -> None:
    text = logged_in_client(bob).get("/clusters/shanghai/").content.decode()

    assert "No diagnosis cycle of this cluster has succeeded yet." in text
    assert "该集群" not in text


def test_the_language_switch_keeps_chinese_for_the_next_pages(overview, bob) -> None:
    client = logged_in_client(bob)

    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/clusters/shanghai/"})

    assert response.status_code == 302
    assert response["Location"] == "/clusters/shanghai/"
    text = client.get("/clusters/shanghai/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "该集群还没有成功的诊断周期。" in text


def test_the_login_page_offers_the_switch_before_logging_in() -> None:
    text = Client().get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()

    assert 'action="/i18n/setlang/"' in text
    assert "用户名" in text  # "User name"


def test_rule_titles_and_docs_are_shown_in_chinese() -> None:
    rule = all_rules()["fragmentation"]
    with translation.override("zh-hans"):
        from diagnosis.templatetags.core_text import core_text  # noqa: PLC0415

        assert core_text(rule.title) == "空闲 GPU 过于分散，无法放置等待中的作业"
        assert core_text(rule.doc.fix) != rule.doc.fix


def test_every_template_loads_i18n() -> None:
    missing = [
        str(path.relative_to(TEMPLATES))
        for path in sorted(TEMPLATES.rglob("*"))
        if path.suffix in {".html", ".txt"}
        and not re.search(r"\{%\s*load\s[^%]*\bi18n\b", path.read_text())
    ]

    assert missing == []


def po_entries(path: Path) -> list[tuple[str, str]]:
    """(msgid, msgstr) of each entry of a .po file (plural forms: the first msgstr)."""
    entries, key, current = [], None, {}
    for line in [*path.read_text().splitlines(), ""]:
        if line.startswith("#"):
            continue
        match = re.match(r'^(msgid|msgid_plural|msgstr|msgstr\[0\]|msgstr\[\d+\]) "(.*)"$', line)
        if match:
            key = match.group(1)
            current[key] = match.group(2)
        elif line.startswith('"') and key:
            current[key] += line[1:-1]
        elif not line.strip() and current:
            msgstr = current.get("msgstr", current.get("msgstr[0]", ""))
            entries.append((current.get("msgid", ""), msgstr))
            current, key = {}, None
    return [(msgid, msgstr) for msgid, msgstr in entries if msgid]  # the header has msgid ""


def test_the_chinese_catalog_leaves_no_msgid_untranslated() -> None:
    entries = po_entries(LOCALE / "django.po")

    assert len(entries) > 500
    assert [msgid for msgid, msgstr in entries if not msgstr] == []
    assert "#, fuzzy\nmsgid" not in (LOCALE / "django.po").read_text()


def test_the_committed_mo_is_compiled_from_the_po(tmp_path) -> None:
    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        message = "msgfmt is missing: apt-get install gettext"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    fresh = tmp_path / "django.mo"
    subprocess.run(
        [msgfmt, "--check-format", "-o", str(fresh), str(LOCALE / "django.po")], check=True
    )
    committed = gettext.GNUTranslations((LOCALE / "django.mo").open("rb"))._catalog
    compiled = gettext.GNUTranslations(fresh.open("rb"))._catalog

    assert committed == compiled


def test_the_rule_catalog_is_up_to_date() -> None:
    """diagnosis/rule_catalog.py is generated: `python manage.py rule_catalog` after a rule's
    text changes, then makemessages and translate the new entries."""
    current = (REPO_ROOT / "diagnosis" / "rule_catalog.py").read_text()

    assert current == render_rule_catalog(all_rules())


def test_the_xid_text_is_up_to_date_and_every_meaning_and_action_is_translated() -> None:
    """Issue #32 item 12: the Xid's meaning and action, on-call's most important text, were
    English on a Chinese page. diagnosis/xid_text.py is generated with the rule catalog."""
    current = (REPO_ROOT / "diagnosis" / "xid_text.py").read_text()

    assert current == render_xid_catalog()
    with translation.override("zh-hans"):
        untranslated = [text for text in xid_texts() if translation.gettext(text) == text]
    assert untranslated == []
    assert len(xid_texts()) > 100


def test_the_xid_79_incident_reads_in_chinese(make_cluster, erin) -> None:
    from diagnosis.models import Incident  # noqa: PLC0415

    cluster = make_cluster("shanghai")
    incident = Incident.objects.create(
        cluster=cluster,
        node="gpu-100",
        gpu_index=3,
        xid_code=79,
        fingerprint="xid-79",
        source="rule:xid",
        summary="Xid 79 on gpu-100 GPU 3: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: GPU has "
        "fallen off the bus.",
    )
    client = logged_in_client(erin)

    text = client.get(
        f"/clusters/shanghai/incidents/{incident.pk}/", HTTP_ACCEPT_LANGUAGE="zh-Hans"
    ).content.decode()

    assert "GPU 已从总线上掉线。" in text  # the meaning, in the summary and under What broke
    assert "排空该节点并重启（整机冷重启）" in text  # the action
    assert "gpu-100 的 GPU 3 上发生 Xid 79" in text
    assert "GPU has fallen off the bus" not in text
