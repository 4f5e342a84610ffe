"""``python -m laminar.cli``: the ``laminar`` command (a public path since ``laminar.cli`` was a
module; the package keeps it working)."""

import sys

from laminar.cli import main

sys.exit(main(sys.argv[1:]))
