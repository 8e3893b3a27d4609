"""The command layer is on top: no module under drkernel/ outside drkernel/cli imports drkernel.cli.

The entry points are the exceptions: ``drkernel/__main__.py`` (``python -m drkernel``) and
``drkernel/train.py`` (``python -m drkernel.train``, the alias of ``drkernel train --backend verl``).
"""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "drkernel"
ENTRY_POINTS = {"__main__.py", "train.py"}  # relative to drkernel/


def _imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            found.add(str(node.args[0].value))
    return found


def _is_cli(name: str) -> bool:
    return name == "drkernel.cli" or name.startswith("drkernel.cli.")


def test_no_layer_below_imports_the_command_layer():
    offenders = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "cli" or str(rel) in ENTRY_POINTS:
            continue
        bad = sorted(n for n in _imports_of(path) if _is_cli(n))
        if bad:
            offenders[str(rel)] = bad
    assert not offenders, f"layers below drkernel.cli import it: {offenders}"


def test_the_scan_sees_imports(tmp_path):
    probe = tmp_path / "m.py"
    probe.write_text("def f():\n    from drkernel.cli.common import UsageError\n"
                     "import importlib\nimportlib.import_module('drkernel.cli.app')\nfrom drkernel import cli\n")
    names = _imports_of(probe)
    assert {"drkernel.cli.common", "drkernel.cli.app", "drkernel.cli"} <= names


def test_every_command_module_lives_in_drkernel_cli():
    from drkernel.cli.app import COMMANDS

    for cmd in COMMANDS:
        assert cmd.module.startswith("drkernel.cli."), cmd
        assert (PKG / "cli" / (cmd.module.rsplit(".", 1)[1] + ".py")).is_file(), cmd
    for old in ("local/cli.py", "agent/cli.py", "env/service/cli.py"):
        assert not (PKG / old).exists(), old
