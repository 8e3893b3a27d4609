"""``drkernel serve``'s argument handling and the lazy imports of the service package."""

import argparse
import subprocess
import sys

import pytest

from drkernel.cli import serve as cli


def _args(*argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_parse():
    args = _args()
    assert (args.host, args.port, args.device, args.workers, args.queue_size) == ("127.0.0.1", 8000, "cpu", None, 256)


@pytest.mark.parametrize("argv, words", [
    (["--eval-options", "[1]"], "JSON object"),
    (["--eval-options", "{\"atoll\": 1}"], "unknown EvalConfig field"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--gpus", "0"], "--gpus needs --device cuda"),
    (["--grader", "nomodule"], "MODULE:FACTORY"),
    (["--grader", "drkernel.cli.serve:no_such"], "no_such"),
])
def test_unusable_arguments_exit_2_with_one_line(argv, words, capsys, tmp_path):
    pytest.importorskip("uvicorn", reason="needs the 'serve' extra")
    from drkernel.cli.app import main

    assert main(["serve", "--state-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_without_a_device_is_an_environment_failure_exit_3(tmp_path):
    pytest.importorskip("uvicorn", reason="needs the 'serve' extra")
    r = subprocess.run([sys.executable, "-m", "drkernel", "serve", "--device", "cuda", "--state-dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "no CUDA device" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_build_service_reads_token_from_the_environment(monkeypatch, tmp_path):
    pytest.importorskip("fastapi", reason="needs the 'serve' extra")
    monkeypatch.setenv(cli.TOKEN_ENV, "from-env")
    service = cli.build_service(_args("--state-dir", str(tmp_path), "--cpu-fast", "--queue-size", "7"))
    assert service.settings.token == "from-env" and service.settings.max_queue == 7
    assert service.base_config.timing_trials == 3  # cpu_fast
    assert (tmp_path / "jobs.sqlite").exists() and (tmp_path / "cache.sqlite").exists()


def test_state_flags_reach_the_stores_and_clear_cache_exits(tmp_path, capsys):
    pytest.importorskip("fastapi", reason="needs the 'serve' extra")
    from drkernel.cli.app import main

    service = cli.build_service(_args("--state-dir", str(tmp_path), "--cache-max-entries", "7", "--max-jobs", "9",
                                      "--transient-retries", "2"))
    assert (service.cache.max_entries, service.store.max_answered, service.settings.transient_retries) == (7, 9, 2)
    assert cli.build_service(_args("--state-dir", str(tmp_path), "--cache-size", "5")).cache.max_entries == 5
    assert cli.build_service(_args("--state-dir", str(tmp_path / "n"), "--no-cache")).cache is None
    service.cache.put("k", {"passed": True})
    assert main(["serve", "--state-dir", str(tmp_path), "--clear-cache"]) == 0
    assert "deleted 1 cached verdict(s)" in capsys.readouterr().out and len(service.cache) == 0
    assert main(["serve", "--state-dir", str(tmp_path / "none"), "--clear-cache"]) == 0
    assert "no result cache" in capsys.readouterr().out


def test_importing_the_package_pulls_in_no_server_or_cluster_library():
    code = ("import sys, drkernel, drkernel.env, drkernel.serve, drkernel.cli.serve; "
            "heavy = {'fastapi', 'uvicorn', 'httpx', 'ray', 'prometheus_client', 'torch'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_serve_without_a_token_says_it_runs_open(monkeypatch, tmp_path, capsys):
    """New-user trip: an open server is announced on stderr, with how to set a token; with a token, silence."""
    uvicorn = pytest.importorskip("uvicorn", reason="needs the 'serve' extra")
    from drkernel.cli.app import main

    ran = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.append(kw))
    monkeypatch.delenv(cli.TOKEN_ENV, raising=False)
    assert main(["serve", "--state-dir", str(tmp_path), "--no-warmup", "--port", "8123"]) == 0
    err = capsys.readouterr().err
    assert ran and ran[0]["port"] == 8123
    lines = [line for line in err.splitlines() if line.startswith("drkernel serve: note:")]
    assert len(lines) == 1 and "runs open (no auth)" in lines[0]
    assert cli.TOKEN_ENV in lines[0] and "--token" in lines[0]
    monkeypatch.setenv(cli.TOKEN_ENV, "secret")
    assert main(["serve", "--state-dir", str(tmp_path), "--no-warmup"]) == 0
    assert "runs open" not in capsys.readouterr().err


def test_the_service_lives_in_drkernel_serve_only():
    """The grader package does not import upwards: the service is ``drkernel.serve``, and the old
    name ``drkernel.env.service`` is gone."""
    import importlib.util

    import drkernel.serve as serve

    assert importlib.util.find_spec("drkernel.env.service") is None
    assert {"RemoteGrader", "RayGrader"} <= set(serve.__all__)
