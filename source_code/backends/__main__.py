"""``python -m source_code.backends [--json]``: what this machine can run."""
from source_code.backends.registry import main

raise SystemExit(main())
