"""The verl stage's reports (tests/gpu/verl/summary.py, scaling.py) on hand-made inputs: the
start-up read from a stamped log, steady-state means, peak memory, and speedups worked by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

STAGE = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "verl"
sys.path.insert(0, str(STAGE))
import scaling  # noqa: E402
import summary  # noqa: E402

sys.path.remove(str(STAGE))


def _row(step, **d):
    return {"step": step, "data": d}


def test_startup_is_the_step_1_line_less_step_1s_own_time() -> None:
    log = "\n".join(["[    0.5] drkernel: resolved config saved to x", "[    3.0] INFO -- Started a local Ray instance.",
                     "[   40.0] (vLLMHttpServer pid=3612) ['serve',", "[   95.5] step:1 - timing_s/step:20.5",
                     "[  110.0] step:2 - timing_s/step:14.0", "no stamp here"])
    s = summary.startup(log, step1_s=20.5)
    assert s["startup_s"] == 75.0 and s["step1_end_s"] == 95.5
    assert s["milestones"]["ray up"] == 3.0 and s["milestones"]["vLLM server actor"] == 40.0
    assert summary.startup("", 10.0)["startup_s"] is None


def test_headline_means_the_steps_after_the_first_and_peaks_memory() -> None:
    rows = [_row(1, **{"timing_s/step": 90.0, "timing_s/gen": 60.0, "perf/total_num_tokens": 9000,
                       "drkernel/rollout/evaluations": 12, "actor/perf/max_memory_allocated_gb": 30.0}),
            _row(2, **{"timing_s/step": 20.0, "timing_s/gen": 10.0, "perf/total_num_tokens": 8000,
                       "drkernel/rollout/evaluations": 12, "actor/perf/max_memory_allocated_gb": 25.0,
                       "drkernel/rollout/grade_s/sum": 60.0, "drkernel/rollout/grade_stage_s/process_start": 30.0,
                       "drkernel/rollout/warm_process_frac": 0.5}),
            _row(3, **{"timing_s/step": 30.0, "timing_s/gen": 12.0, "perf/total_num_tokens": 12000,
                       "drkernel/rollout/evaluations": 6, "actor/perf/max_memory_allocated_gb": 26.0,
                       "drkernel/rollout/grade_s/sum": 24.0, "drkernel/rollout/grade_stage_s/process_start": 0.0,
                       "drkernel/rollout/warm_process_frac": 1.0})]
    h = summary.headline(rows, gpus=2)
    assert h["steady_steps"] == 2 and h["step_s"] == 25.0
    assert h["tokens_per_s"] == (400.0 + 400.0) / 2 and h["evals_per_s"] == (1.2 + 0.5) / 2
    assert h["mem_alloc_gb"] == 30.0 and h["gpus"] == 2
    assert h["grade_s_per_eval"] == (5.0 + 4.0) / 2 and h["process_start_share"] == 0.25
    assert h["warm_process_frac"] == 0.75
    assert summary.headline(rows[:1])["step_s"] == 90.0  # one step: itself


def test_gpu_memory_peaks_per_index() -> None:
    samples = "0, 1024\n1, 512\n0, 3072\ngarbage\n1, 2048\n"
    assert summary.gpu_memory_peaks(samples) == {"0": 3.0, "1": 2.0}


def test_speedups_are_against_the_one_gpu_run_of_the_same_model_and_tp_1() -> None:
    runs = [{"label": "a", "preset": "1.5b", "gpus": 1, "tp": 1, "tokens_per_s": 1000.0, "evals_per_s": 1.0},
            {"label": "b", "preset": "1.5b", "gpus": 2, "tp": 1, "tokens_per_s": 1800.0, "evals_per_s": 1.6},
            {"label": "c", "preset": "1.5b", "gpus": 4, "tp": 1, "tokens_per_s": 3000.0, "evals_per_s": 3.6},
            {"label": "d", "preset": "tiny", "gpus": 2, "tp": 1, "tokens_per_s": 50.0}]
    by = {r["label"]: r for r in scaling.speedups(runs)}
    assert by["b"]["tok_speedup"] == 1.8 and by["b"]["tok_efficiency"] == 0.9 and by["b"]["eval_speedup"] == 1.6
    assert by["c"]["tok_efficiency"] == 0.75 and by["c"]["eval_speedup"] == 3.6
    assert "tok_speedup" not in by["d"]  # no one-GPU run of that model
    text = scaling.table(runs)
    assert "1.80x (90%) ok" in text and "1.60x (80%) < 1.7" in text and "3.00x (75%) < 3.2" in text
    runs[2].update(grade_s_per_eval=12.25, process_start_share=0.4, warm_process_frac=0.75)
    assert "| a | 12.2 | 40% | 75% |" in scaling.table(runs)


def test_the_baseline_is_the_one_gpu_run_with_the_same_grading_settings() -> None:
    """scaling.sh's labels carry the grading settings after -gN-tpN: a 4-GPU run with node graders,
    16 spares and one queue is measured against the one-GPU run with those settings, not against
    one graded differently; without such a run, against the preset's first one-GPU run."""
    assert scaling.settings("scale-1.5b-g4-tp1-node-s16-conn1") == "node-s16-conn1"
    assert scaling.settings("scale-1.5b-g1-tp1") == "" and scaling.settings("g1") == ""
    runs = [{"label": "g1", "preset": "1.5b", "gpus": 1, "tp": 1, "tokens_per_s": 1330.0, "evals_per_s": 0.8},
            {"label": "scale-1.5b-g1-tp1-node-s16-conn1", "preset": "1.5b", "gpus": 1, "tp": 1,
             "tokens_per_s": 900.0, "evals_per_s": 0.5},
            {"label": "scale-1.5b-g4-tp1-node-s16-conn1", "preset": "1.5b", "gpus": 4, "tp": 1,
             "tokens_per_s": 3150.0, "evals_per_s": 1.8},
            {"label": "scale-1.5b-g4-tp1-node", "preset": "1.5b", "gpus": 4, "tp": 1, "tokens_per_s": 2660.0}]
    by = {r["label"]: r for r in scaling.speedups(runs)}
    c1 = by["scale-1.5b-g4-tp1-node-s16-conn1"]
    assert c1["baseline"] == "scale-1.5b-g1-tp1-node-s16-conn1" and c1["tok_speedup"] == 3.5 and c1["eval_speedup"] == 3.6
    assert by["scale-1.5b-g4-tp1-node"]["baseline"] == "g1 (other settings)"
    assert by["scale-1.5b-g4-tp1-node"]["tok_speedup"] == 2.0
    assert by["g1"]["baseline"] == "g1" and by["g1"]["tok_speedup"] == 1.0
    assert "3.50x (88%) ok | 1.8 | 0.45 | 3.60x (90%) ok | scale-1.5b-g1-tp1-node-s16-conn1 |" in scaling.table(runs)
    # the order of the summaries does not choose the baseline; a run whose settings no one-GPU run
    # has is measured against the default-settings one, and says so
    assert scaling.settings("scale-1.5b-g4-tp1node") == ""
    runs.append({"label": "scale-1.5b-g4-tp1-local-s8", "preset": "1.5b", "gpus": 4, "tp": 1, "tokens_per_s": 2660.0})
    for order in (runs, runs[::-1]):
        by = {r["label"]: r for r in scaling.speedups(order)}
        assert by["scale-1.5b-g4-tp1-node"]["baseline"] == "g1 (other settings)"
        assert by["scale-1.5b-g4-tp1-local-s8"]["tok_speedup"] == 2.0
        assert by["scale-1.5b-g4-tp1-node-s16-conn1"]["baseline"] == "scale-1.5b-g1-tp1-node-s16-conn1"


def test_scaling_main_reads_summaries_and_fails_with_none(tmp_path, capsys) -> None:
    p = tmp_path / "summary.json"
    p.write_text(json.dumps({"label": "a", "preset": "tiny", "gpus": 1, "tp": 1, "tokens_per_s": 10.0}))
    assert scaling.main([str(p), str(tmp_path / "missing.json")]) == 0
    assert "| a | tiny | 1 | 1 |" in capsys.readouterr().out
    assert scaling.main([str(tmp_path / "missing.json")]) == 1
