"""New-user trips, each fixed: what a first run with a small mistake prints and leaves behind.

(``drkernel train``'s trips are in test_train.py, ``drkernel serve``'s open-server notice in
tests/service/test_cli.py.)
"""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from drkernel.cli.app import main

ROOT = Path(__file__).resolve().parents[2]


def _dead_url() -> str:
    """An http URL on localhost where nothing listens (a port just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_refine_against_a_dead_endpoint_exits_3_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    url = _dead_url()
    out = tmp_path / "run"
    code = main(["refine", "--base-url", url, "--model", "m", "--suite", "envs/single_ops", "--tasks", "01_relu",
                 "--device", "cpu", "--no-progress", "--out", str(out), "--max-retries", "0"])
    captured = capsys.readouterr()
    assert code == 3
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("drkernel refine: error: ") and url in lines[0], captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""  # no empty table, no "results in ..."
    assert not out.exists()  # no empty run directory, summary files or summary.png


def test_refine_probe_accepts_any_http_answer():
    """A server that answers at all (even 404 on /models) counts as up; nothing answering raises."""
    pytest.importorskip("openai")
    from drkernel.agent.openai_backend import EndpointUnavailable, OpenAIGenerate
    from tests.agent.scripted_server import ScriptedServer

    with ScriptedServer([]) as server:
        assert OpenAIGenerate(server.url, "m").probe(timeout=5) >= 200
    with pytest.raises(EndpointUnavailable) as exc:
        OpenAIGenerate(_dead_url(), "m").probe(timeout=5)
    assert "127.0.0.1" in str(exc.value)


@pytest.mark.parametrize("make_out, words", [
    (lambda tmp: tmp / "a_file" / "train.parquet", "is a file, not a directory"),
    (lambda tmp: tmp / "a_file" / "deeper" / "train.jsonl", "is a file, not a directory"),
    (lambda tmp: tmp / "a_dir.parquet", "is a directory"),
])
def test_data_build_to_a_bad_output_path_exits_2_with_one_line(make_out, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "a_dir.parquet").mkdir()
    out = make_out(tmp_path)
    assert main(["data", "build", "--suite", "envs/single_ops", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("drkernel data: error: --out ") and words in err, err
    assert "Traceback" not in err and "pyarrow" not in err


def test_learning_curve_help_describes_every_argument(monkeypatch):
    p = subprocess.run([sys.executable, str(ROOT / "examples/learning_curve.py"), "--help"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("learning_curve", ROOT / "examples/learning_curve.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "learning_curve", module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    captured = {}
    real_parse = argparse.ArgumentParser.parse_args

    def spy(self, args=None, namespace=None):
        captured["parser"] = self
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = spy
    try:
        with pytest.raises(SystemExit):
            module.main([])
    finally:
        argparse.ArgumentParser.parse_args = real_parse
    actions = [a for a in captured["parser"]._actions if a.dest != "help"]
    assert actions and all(a.help and a.help.strip() for a in actions), [a.dest for a in actions if not a.help]
    for a in actions:
        assert a.option_strings[0] in p.stdout


def test_readme_documents_the_evaluate_body_and_the_exit_codes():
    """Every field of the /v1/evaluate request model is named in the README's table of them."""
    pytest.importorskip("fastapi")
    from drkernel.serve import app

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("/v1/evaluate` request body"):]
    section = section[:section.index("\n#")]
    for name in app.EvaluateRequest.model_fields:
        assert f"`{name}`" in section, name
    assert "Exit codes" in readme and "DRKERNEL_DEBUG=1" in readme
