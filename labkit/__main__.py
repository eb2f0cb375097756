"""``python -m labkit ...``: see :mod:`labkit.cli`."""
import sys

from labkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
