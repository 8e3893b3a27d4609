"""``drkernel train --local`` flags and exit codes."""

import argparse

import pytest

from drkernel.local import cli


def _parse(argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_flags_cover_the_config_and_parse_types():
    args = _parse(["--local", "--suite", "envs/single_ops", "--max-steps", "3", "--device", "cpu", "--out", "x",
                   "--lr", "1e-4", "--no-mrs", "--lora", "--target-groups", "none", "--grade-profile", "true"])
    assert args.local and args.suite == "envs/single_ops" and args.max_steps == 3 and args.lr == 1e-4
    assert args.mrs is False and args.lora is True and args.target_groups is None and args.grade_profile is True


def test_help_text_comes_from_the_field_docstrings(capsys):
    with pytest.raises(SystemExit):
        _parse(["--help"])
    out = capsys.readouterr().out
    assert "--max-steps N" in out and "Advantage estimator by registry name" in out


def test_without_local_or_with_bad_values_exit_2(capsys, tmp_path):
    assert cli.main(_parse(["--max-steps", "1"])) == 2
    assert "python -m drkernel.train" in capsys.readouterr().err
    assert cli.main(_parse(["--local", "--estimator", "nope", "--out", str(tmp_path)])) == 2
    assert "unknown advantage estimator" in capsys.readouterr().err
