"""``python -m gpuobs_cli``: the same as the ``gpuobs`` console script."""

from gpuobs_cli.main import main

raise SystemExit(main())
