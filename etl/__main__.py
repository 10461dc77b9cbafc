"""``python -m etl``: the ``etl`` command."""

from etl.entrypoints.cli import main

raise SystemExit(main())
