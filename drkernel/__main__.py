"""``python -m drkernel``: the ``drkernel`` command."""

import sys

from drkernel.cli.app import main

sys.exit(main())
