"""Screenshots of issue #32's pages over the demo, in English and Chinese, at 1440 and 390 px:
``python scripts/screenshots.py`` (with the test settings: ``DATABASE_URL`` of a PostgreSQL
the tests may create a database on, ``REDIS_URL``; Chromium and Playwright from
requirements-dev.txt, as for the browser tests).

It runs ``tests/app/browser/shots_issue32.py`` with pytest -- a throwaway test database, the
live server, the named users of tests/support/world.py -- so it never touches a real gpuobs
database. The captures go to ``var/screenshots/issue32/`` (git-ignored), their paths printed.
Extra arguments are passed on to pytest (e.g. ``-s`` to see the paths as they are written).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "tests" / "app" / "browser" / "shots_issue32.py"


def main(argv: list[str]) -> int:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", str(SHOTS)]
    return subprocess.call([*command, *argv], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
