"""``python -m gridify.cli``: the ``gridify`` command (:func:`gridify.cli.main`)."""

import sys

from . import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
