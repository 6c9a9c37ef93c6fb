#!/usr/bin/env python
"""Django's command-line utility for gpuobs."""

import gc
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
    from django.core.management import execute_from_command_line  # noqa: PLC0415 -- after the env

    try:
        execute_from_command_line(sys.argv)
    finally:
        # the interpreter's exit collects the whole heap several times as it clears the
        # modules (~0.3 s of CPU after Django and pandas); frozen objects are not scanned
        gc.freeze()


if __name__ == "__main__":
    main()
