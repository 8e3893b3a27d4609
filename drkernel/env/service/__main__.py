"""``python -m drkernel.env.service [serve options]``: the same server as ``drkernel serve``."""
import sys

from drkernel.env.service.cli import run

sys.exit(run())
