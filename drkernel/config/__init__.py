"""Hydra configs of drkernel's verl training (``drkernel_trainer.yaml``, ``drkernel_sft.yaml``).

They extend verl's own configs through Hydra's search path (``pkg://verl.trainer.config``) and add
one ``drkernel:`` node; ``python -m drkernel.train`` composes them. :data:`CONFIG_DIR` is this folder.
"""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
"""Folder holding the YAML files (pass it as ``--config-path``)."""

__all__ = ["CONFIG_DIR"]
