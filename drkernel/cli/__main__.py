"""``python -m drkernel.cli``: the ``drkernel`` command."""

import sys

from drkernel.cli.app import main

sys.exit(main())
