"""``python -m drkernel.train``: an alias of ``drkernel train --backend verl`` (the verl trainer).

    python -m drkernel.train [--config-name drkernel_trainer] [key=value ...]
    python -m drkernel.train --dry-run [key=value ...]     # print the composed config, exit 0

is the same as ``drkernel train --backend verl [...]``: same arguments, same exit codes and error
lines (:mod:`drkernel.cli.common`; without the ``train`` extra it exits 2 naming
``pip install -e '.[train]'``). The work is in :mod:`drkernel.verl.launch` (composing the Hydra config
``drkernel/config/drkernel_trainer.yaml``, drkernel's checks, saving the resolved config, verl's
``run_ppo``); its functions are re-exported here for code that imported them from this module.

This module is an entry point, like ``drkernel/__main__.py``: the only module outside
``drkernel.cli`` that calls into it.
"""

from __future__ import annotations

import sys
from typing import Sequence

from drkernel.verl.launch import DEFAULT_CONFIG, check_config, compose, dry_run, run, save_resolved_config


def main(argv: Sequence[str] | None = None) -> int:
    """``drkernel train --backend verl`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    from drkernel.cli.app import main as drkernel_main

    argv = list(sys.argv[1:] if argv is None else argv)
    return drkernel_main(["train", "--backend", "verl", *argv])


__all__ = ["DEFAULT_CONFIG", "compose", "check_config", "save_resolved_config", "dry_run", "run", "main"]

if __name__ == "__main__":
    sys.exit(main())
