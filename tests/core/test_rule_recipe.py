"""docs/adding-a-rule.md is complete: followed to the letter in a copy of the repository, it adds
a rule that the suite's rule, docs and i18n checks accept, and it changes exactly the files the
page lists; left out one step, the same checks fail.

The page's fenced blocks marked ``recipe-files``, ``recipe-commands`` and ``recipe-checks`` are
read here and run as they stand, so the page and this test cannot drift apart. The one step no
command does, translating the new catalogue entries, is done the way a translator would leave it:
every new or fuzzy entry gets a msgstr (here the English text itself) and no fuzzy flag.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import REPO_ROOT
from tests.support.commands import embedded_env

DOC = REPO_ROOT / "docs" / "adding-a-rule.md"
RULE_ID = "straggler-rank"  # the page's example
PO = Path("locale/zh_Hans/LC_MESSAGES/django.po")
# one worker takes both tests: they share the module's copy and its test database
pytestmark = pytest.mark.xdist_group("rule-recipe")

RULE_MODULE = '''"""``straggler-rank``: the recipe test's rule (tests/core/test_rule_recipe.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    jobs = snapshot.jobs
    wide = jobs[(jobs["state"] == "running") & (jobs["pods"] >= thresholds["min_pods"])]
    findings = [
        RULE.finding(f"job:{job_id}", f"job {job_id} runs {pods} pods", {"pods": int(pods)})
        for job_id, pods in zip(wide.index.tolist(), wide["pods"].tolist(), strict=True)
    ]
    return Judgement(findings, {})


RULE = Rule(
    id="straggler-rank",
    title="Recipe test: a running job with many pods",
    severity="info",
    subject_kind="job:",
    thresholds=(Threshold("min_pods", 1000, "fires when a running job has this many pods"),),
    doc=RuleDoc(
        detects="Recipe test: a running job with at least `min_pods` pods.",
        why="Recipe test: it proves docs/adding-a-rule.md lists every step.",
        fix="Recipe test: nothing to fix.",
        evidence="`pods`.",
        references=("docs/adding-a-rule.md",),
    ),
    evaluate=evaluate,
    for_s=0,
    keep_firing_for_s=0,
)
'''

RULE_TEST = '''"""The recipe test's ``straggler-rank`` rule."""

from diagnosis.core.rules.builtin.straggler_rank import RULE
from diagnosis.core.rules.facts import SnapshotFacts
from tests.support.builders import SnapshotBuilder


def test_a_small_job_is_no_hit():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j", node="a100-000").build()
    assert RULE.evaluate(snap, RULE.resolve({}), SnapshotFacts(snap)).findings == []
'''


def fenced_block(marker: str) -> list[str]:
    """The lines of the fenced block that follows ``<!-- marker`` in the page."""
    text = DOC.read_text()
    match = re.search(rf"<!-- {re.escape(marker)}\b[^>]*-->\s*```[^\n]*\n(.*?)\n\s*```", text, re.S)
    assert match, f"docs/adding-a-rule.md has no fenced block marked {marker!r}"
    return [line.strip() for line in match.group(1).splitlines() if line.strip()]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def git(copy: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=recipe", "-c", "user.email=recipe@localhost", *args],
        cwd=copy,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def add_the_rule(copy: Path) -> None:
    """Steps 1-8 of the page: the files a person writes or edits by hand."""
    (copy / "diagnosis/core/rules/builtin/straggler_rank.py").write_text(RULE_MODULE)
    (copy / "tests/core/test_rule_straggler_rank.py").write_text(RULE_TEST)
    builders = copy / "tests/support/builders.py"
    text = builders.read_text()
    last = '    "preemption-thrash",\n)'
    assert last in text, "BUILTIN_RULE_IDS moved: update this test"
    builders.write_text(text.replace(last, f'    "preemption-thrash",\n    "{RULE_ID}",\n)'))
    scenarios = copy / "diagnosis/core/simulate/scenarios.py"
    text = scenarios.read_text()
    anchor = "NOT_SIMULATED: dict[str, str] = {\n"
    assert anchor in text, "NOT_SIMULATED moved: update this test"
    scenarios.write_text(
        text.replace(anchor, f'{anchor}    "{RULE_ID}": "the recipe test\'s rule",\n')
    )


def translate_new_entries(po: Path) -> None:
    """The translator's step: every empty or fuzzy msgstr filled, no fuzzy flag left."""
    blocks = po.read_text().split("\n\n")
    for i, block in enumerate(blocks):
        lines = block.splitlines()
        fuzzy = any(line.startswith("#,") and "fuzzy" in line for line in lines)
        msgid = [n for n, line in enumerate(lines) if line.startswith("msgid ")]
        msgstr = [n for n, line in enumerate(lines) if line.startswith("msgstr ")]
        header = bool(msgid) and lines[msgid[0]] == 'msgid ""' and msgstr == [msgid[0] + 1]
        if not msgid or not msgstr or header:
            continue  # no entry, or the header (msgid "" directly followed by msgstr)
        empty = lines[msgstr[0]] == 'msgstr ""' and msgstr[0] == len(lines) - 1
        if not (fuzzy or empty):
            continue
        english = lines[msgid[0] : msgstr[0]]
        kept = [
            re.sub(r",\s*fuzzy", "", line) if line.startswith("#,") else line
            for line in lines[: msgid[0]]
            if not line.startswith("#|")
        ]
        kept = [line for line in kept if line.strip() != "#,"]
        blocks[i] = "\n".join(
            [*kept, *english, "msgstr " + english[0].removeprefix("msgid "), *english[1:]]
        )
    po.write_text("\n\n".join(blocks))


def follow_the_commands(copy: Path, *, skip: str | None = None) -> None:
    """Step 9 as the page writes it: its commands in order (``skip``: one left out)."""
    commands = fenced_block("recipe-commands")
    assert skip is None or skip in commands
    for command in commands:
        if command.startswith("#"):
            assert "translate" in command
            translate_new_entries(copy / PO)
            continue
        if command == skip:
            continue
        words = command.split()
        assert words[:2] == ["python", "manage.py"], command
        result = run([sys.executable, *words[1:]], copy, embedded_env())
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"


def run_the_checks(copy: Path) -> subprocess.CompletedProcess:
    """Step 10's checks, in the copy, on a test database of their own."""
    (command,) = fenced_block("recipe-checks")
    words = command.split()
    assert words[0] == "pytest"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    if env.get("DATABASE_URL"):
        # a database of each run's own: the previous run's may still be held for a moment by
        # a process it started, and a second run would fail to recreate it (exit 2)
        url = urlsplit(env["DATABASE_URL"])
        own = f"{url.path.rstrip('/')}_recipe_{uuid.uuid4().hex[:8]}"
        env["DATABASE_URL"] = urlunsplit(url._replace(path=own))
    return run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *words[1:]], copy, env
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The tracked files of this checkout, with steps 1-8 done and committed as the base."""
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout (the copy is made from `git ls-files`)")
    if shutil.which("xgettext") is None:
        pytest.skip("makemessages needs gettext: apt-get install gettext")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    copy = tmp_path_factory.mktemp("recipe") / "repo"
    for name in filter(None, listed.decode().split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "commit", "-qm", "the checkout")
    git(copy, "tag", "checkout")
    add_the_rule(copy)
    git(copy, "add", "-A")
    git(copy, "commit", "-qm", "steps 1-8")
    git(copy, "tag", "edited")
    return copy


def reset(copy: Path) -> None:
    git(copy, "reset", "-q", "--hard", "edited")
    git(copy, "clean", "-qfdx")


def test_the_recipe_followed_to_the_letter_passes_the_checks(copy: Path) -> None:
    reset(copy)
    follow_the_commands(copy)

    changed = set(git(copy, "diff", "--name-only", "checkout").split())
    changed |= set(git(copy, "ls-files", "--others", "--exclude-standard").split())
    listed = {line.split()[0] for line in fenced_block("recipe-files")}
    assert changed == listed
    result = run_the_checks(copy)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_without_regenerating_the_rule_catalogue_the_checks_fail(copy: Path) -> None:
    reset(copy)
    follow_the_commands(copy, skip="python manage.py rule_catalog")

    result = run_the_checks(copy)
    assert result.returncode == 1, result.stdout[-6000:] + result.stderr[-2000:]
    assert "FAILED tests/app/pages/test_i18n.py::test_the_rule_catalog_is_up_to_date" in (
        result.stdout
    )
