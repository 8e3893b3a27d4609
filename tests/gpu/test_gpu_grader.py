"""GPU-only behaviour of the grader: timing, profiling coverage, streams, TF32, CUDA faults, L2.

Run on a CUDA machine through tests/gpu/run.sh (skipped elsewhere).
"""

from pathlib import Path

import pytest
import torch

from drkernel.env.config import EvalConfig
from drkernel.env.evaluation import evaluate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

HERE = Path(__file__).parent
TASKS, CANDS = HERE / "tasks", HERE / "candidates"
CFG = EvalConfig(device="cuda", timing_trials=30, warmup=3)


def run(task: str, cand: str, **overrides):
    return evaluate(TASKS / task, CANDS / cand, seed=1234, config=CFG.with_overrides(**overrides))


def test_honest_matmul_passes_with_timing_and_coverage():
    r = run("matmul_2k.py", "matmul_honest.py")
    assert r.passed, r.feedback
    assert r.kernel_ms > 0 and r.reference_ms > 0 and r.speedup > 0
    assert r.coverage is not None and r.coverage > 0.9, r.details.get("profile")
    assert r.details["timing"]["persisting_l2_reset"] is True
    budget = r.details["timing"]["launch_budget"]
    assert budget["verified"] and budget["ms"] == 1.0, budget
    assert 300 < budget["sm_clock_mhz"] < 4000, budget  # the timed calls' holds measured the SM clock
    top = r.details["profile"]["top"]
    assert any(t["own"] and t["name"] == "matmul_kernel" for t in top), top  # suffix stripped for display
    assert r.details["isolation"].get("writes") == "work directory only", r.details["isolation"]
    assert r.details["timing"]["method"] == "device records between fences"


def test_cuda_workers_are_forked_from_a_zygote_that_never_touched_cuda():
    """The zygote imports torch and triton without initialising CUDA (it refuses to serve if an
    import opened a GPU device file); each forked worker makes its own CUDA context."""
    import time

    from drkernel.env.process.sandbox import CandidateProcess

    starts, parts = [], []
    for _ in range(3):
        t0 = time.monotonic()
        with CandidateProcess("cuda:0", start="zygote") as p:
            p.wait_ready(300)
            starts.append(round(time.monotonic() - t0, 2))
            parts.append(p.hello.start_parts)
            assert p.start_method == "zygote" and p.hello.device == "cuda", p.start_method
            assert {"cuda_context", "fences", "cupti"} <= set(p.hello.start_parts), p.hello.start_parts
    print(f"zygote worker starts on CUDA: {starts} s; in the worker: {parts}")
    with CandidateProcess("cuda:0", start="exec") as p:
        t0 = time.monotonic()
        p.wait_ready(300)
        print(f"exec worker start on CUDA: {time.monotonic() - t0:.2f} s")


def test_honest_relu_coverage_counts_only_own_kernels():
    r = run("relu_big.py", "relu_honest.py")
    assert r.passed, r.feedback
    assert r.coverage > 0.9
    t = r.details["timing"]
    print(f"relu: {r.kernel_ms:.4f} ms vs {r.reference_ms:.4f} ms, speedup {r.speedup:.2f}, coverage {r.coverage:.3f}, "
          f"host {t['host_ms']['median']:.4f} ms, launch {t['launch_ms']['median']:.4f} ms, budget {t['launch_budget']}, "
          f"reference {t['reference']}")


def test_side_stream_is_caught_at_runtime_and_statically():
    r = run("matmul_2k.py", "matmul_side_stream.py", time_hacked=True)
    assert r.hacked and "cuda_stream" in r.hack_reasons
    assert "side_stream" in r.hack_reasons, r.details.get("timing")


def test_the_launch_budget_hold_leaves_no_room_for_another_stream():
    """A kernel put on a side stream while the hold runs finishes after the hold, not beside it."""
    from drkernel.env.measure.budget import LaunchBudget

    budget = LaunchBudget.build(torch, "cuda")
    assert budget.verified, budget
    x = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()
    hold_end, side_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gaps = []
    for _ in range(5):
        torch.cuda.synchronize()
        budget.hold(1.0)
        hold_end.record()
        with torch.cuda.stream(side):
            torch.relu(x)  # ~50 us of work: it would fit twenty times beside a one-thread sleep
            side_end.record(side)
        torch.cuda.synchronize()
        gaps.append(hold_end.elapsed_time(side_end))
    print(f"side-stream ReLU ends {min(gaps):.3f}-{max(gaps):.3f} ms after the hold; {budget.describe(1.0)}")
    assert min(gaps) > 0.0
    mhz = budget.clock_mhz()  # the holds' effective SM clock, measured in the kernel
    print(f"effective SM clock over the holds: {mhz} MHz")
    assert mhz is not None and 300 < mhz < 4000


def test_every_evaluation_under_the_graders_load_times_with_the_hold():
    """Workers load beside other evaluations' kernels (the GPU gate's shared section), and another
    process's kernels time-slicing the GPU can let a probe kernel start beside a hold that fills it
    (tests/benchmarks/diagnostics/hold_probe_under_load.py). When each worker probed for itself, 5-16
    of 32 evaluations at capacity 8 timed without the hold. The grader now probes once per device in
    its exclusive section and every worker adopts that answer: under load, every evaluation is timed
    with the hold, verified by the grader."""
    from concurrent.futures import ThreadPoolExecutor

    from drkernel.env.grader import LocalGrader
    from drkernel.env.tasks.task import Task

    task = Task.from_file(TASKS / "matmul_2k.py")
    src = (CANDS / "matmul_honest.py").read_text()
    with LocalGrader(CFG, capacity=4) as g, ThreadPoolExecutor(max_workers=4) as pool:
        rs = list(pool.map(lambda k: g.grade(task, src, seed=k), range(12)))
    budgets = [r.details["timing"]["launch_budget"] for r in rs]
    assert all(r.passed for r in rs), [r.feedback for r in rs if not r.passed]
    assert all(b["verified"] and b["verified_by"] == "grader" for b in budgets), budgets
    refs = [r.details["timing"]["reference"]["hold"] for r in rs]  # the reference, timed once, alike
    assert all(h["verified"] and h["verified_by"] == "grader" for h in refs), refs
    print(f"12 evaluations at capacity 4, all with the hold; kernel ms "
          f"{sorted(round(r.kernel_ms, 4) for r in rs)}")


def test_side_stream_work_cannot_hide_beside_the_launch_budget():
    honest = run("relu_big.py", "relu_honest.py")
    hack = run("relu_big.py", "relu_side_stream_early.py", time_hacked=True)
    assert "cuda_stream" in hack.hack_reasons  # statically
    assert hack.details["timing"]["launch_budget"]["verified"]
    print(f"relu honest {honest.kernel_ms:.4f} ms, side stream {hack.kernel_ms:.4f} ms, {hack.hack_reasons}")
    # the side-stream work is inside the call's window: flagged, and counted in the reported time
    assert "side_stream" in hack.hack_reasons and hack.kernel_ms >= 0.5 * honest.kernel_ms


def test_torch_doing_the_work_is_not_correct():
    """A token Triton kernel beside cuBLAS doing the GEMM: coverage from the device records is the
    verdict (issue 19), not only a reward term."""
    r = run("matmul_2k.py", "matmul_torch_fallback.py")
    assert r.compiled and not r.correct and not r.passed and r.error.stage == "profiling", r.feedback
    assert r.coverage is not None and r.coverage < 0.1, r.details.get("profile")
    assert "not done in your Triton kernels" in r.feedback


def test_host_computation_is_caught_by_the_device_to_host_copies():
    r = run("relu_big.py", "relu_numpy.py")
    assert not r.passed and "host_compute" in r.hack_reasons, (r.hack_reasons, r.details.get("integrity"))


def test_tf32_matmul_fails_fp32_tolerance():
    r = run("matmul_2k.py", "matmul_tf32.py", measure_performance=False)
    assert r.compiled and not r.correct and not r.hacked
    assert "error too large for the task's precision" in r.error.message and "TF32" in r.error.message
    # the tf32 policy, declared by a task or a run, accepts it (KernelBench's allclose(1e-2) does not
    # here: outputs of rms ~45 err up to 0.19 in TF32, beyond its absolute 1e-2)
    loose = run("matmul_2k.py", "matmul_tf32.py", measure_performance=False, precision="tf32")
    assert loose.correct, loose.feedback
    assert loose.details["precision"]["policy"] == "tf32"


def test_cuda_fault_is_a_failed_result_and_does_not_poison_the_next():
    bad = run("relu_big.py", "relu_cuda_fault.py", measure_performance=False)
    assert bad.compiled and not bad.correct and bad.error.stage == "correctness"
    good = run("relu_big.py", "relu_honest.py", measure_performance=False)
    assert good.passed, good.feedback


def test_unwritten_output_fails_with_nan_prefill():
    r = run("relu_big.py", "relu_skip_work.py", measure_performance=False)
    assert not r.correct


def test_persisting_l2_reset_works_on_this_device():
    import ctypes

    from drkernel.env.measure.timing import persisting_l2_resetter

    torch.empty(1, device="cuda")
    reset = persisting_l2_resetter()
    assert reset is not None and reset() is True
    # a carve-out as a hack would make it (pattern #20) is cleared
    lib = next(ctypes.CDLL(line.split()[-1]) for line in open("/proc/self/maps") if "libcudart" in line)
    lib.cudaDeviceSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    lib.cudaDeviceGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    assert lib.cudaDeviceSetLimit(0x06, 4 << 20) == 0
    assert reset() is True
    size = ctypes.c_size_t(1)
    assert lib.cudaDeviceGetLimit(ctypes.byref(size), 0x06) == 0 and size.value == 0


@pytest.mark.parametrize("dtype,shape", [(torch.float32, (3, 5)), (torch.float32, (3 << 20, 3)),  # crosses chunks
                                         (torch.bfloat16, (1001,)), (torch.bool, (7, 3)),
                                         (torch.complex64, (5,)), (torch.int64, ())])
def test_gpu_tensors_round_trip_through_the_pinned_path(tmp_path, dtype, shape):
    from drkernel.env.process import tensor_io

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, device="cuda", generator=g, dtype=torch.float32)
    x = (x > 0) if dtype is torch.bool else x.to(dtype)
    x = x.t() if x.dim() == 2 else x  # a non-contiguous source is written in logical order
    desc = tensor_io.write_tensor(x, tmp_path, "out")
    y = tensor_io.read_tensor(desc, tmp_path, "cuda")
    assert y.is_cuda and y.dtype == x.dtype and y.shape == x.shape and torch.equal(y, x)
    z = tensor_io.read_tensor(desc, tmp_path)  # the CPU reader sees the same bytes
    assert torch.equal(z, x.cpu())


def test_a_file_cut_short_after_the_check_is_an_io_error(tmp_path, monkeypatch):
    from drkernel.env.process import tensor_io

    x = torch.arange(10, dtype=torch.float32, device="cuda")
    desc = tensor_io.write_tensor(x, tmp_path, "out")
    real_open = open

    def shrinking_open(path, mode="r", *a, **k):  # the candidate truncates the file between check and read
        if str(path).endswith("out.bin") and "r" in mode:
            with real_open(path, "r+b") as fh:
                fh.truncate(8)
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr("builtins.open", shrinking_open)
    with pytest.raises(tensor_io.TensorIOError, match="ended after"):
        tensor_io.read_tensor(desc, tmp_path, "cuda")


def test_gpu_outputs_cross_the_registered_stage(tmp_path):
    """Both sides page-lock the reserved part of the stage (device <-> host copies are DMA) and a
    GPU output arrives bit-exact in the grader's device memory, without a file."""
    import os

    from drkernel.env.process import tensor_io
    from drkernel.env.process.staging import Stage

    grader = Stage.create()
    worker = Stage.attach(os.dup(grader.fd))
    try:
        n = 96 << 20
        assert grader.reserve(n, cuda=True) == n and worker.reserve(n, cuda=True) == n
        assert grader.registered == n and worker.registered == n  # cudaHostRegister succeeded on both sides
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(4096, 4096, device="cuda", generator=g)  # 64 MB
        b = torch.randn(1001, device="cuda", generator=g).to(torch.bfloat16)
        worker.rewind()
        dx = tensor_io.write_tensor(x.t(), tmp_path, "x", worker)
        db = tensor_io.write_tensor(b, tmp_path, "b", worker)
        assert "stage" in dx and "stage" in db and not list(tmp_path.glob("*.bin"))
        y = tensor_io.read_tensor(dx, tmp_path, "cuda", stage=grader)
        assert y.is_cuda and torch.equal(y, x.t())
        assert torch.equal(tensor_io.read_tensor(db, tmp_path, "cuda", stage=grader), b)
    finally:
        worker.close()
        grader.close()


def test_kernels_compile_ahead_without_a_gpu_and_the_first_call_loads_them():
    """The compiler forked from the zygote (never had a GPU) fills the worker's Triton cache; the first
    correctness call then compiles nothing, and the candidate's verdict is the same as without it."""
    on = run("relu_big.py", "relu_honest.py")  # on by default (drkernel.env.config)
    assert on.passed, on.feedback
    pre = on.details["precompile"]
    assert pre["finished"] and pre["complete"], pre
    assert on.details["isolation"]["process_group"].startswith("fixed"), on.details["isolation"]
    first = on.details["worker_parts_s"]["first_run"]["call"]
    off = run("relu_big.py", "relu_honest.py", precompile_timeout_s=0)
    assert off.passed and "precompile" not in off.details
    # the first call of the compiled-ahead worker loads a cached kernel instead of compiling one
    assert first < off.details["worker_parts_s"]["first_run"]["call"], (first, off.details["worker_parts_s"])


def test_the_graders_cuda_cache_does_not_grow_with_every_evaluation(monkeypatch):
    """Evaluations one after another reuse the grader's streams, so the caching allocator reuses
    their freed memory: the cache's idle part (reserved, not allocated) stays at about one
    evaluation's peak instead of growing by one peak per evaluation until it is emptied (which
    waits for the device). Before the stream pool, on an H100: 1.1 GiB idle after the first
    evaluation, 7.2 GiB after the fifth."""
    emptied = []
    real_empty = torch.cuda.empty_cache
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1) or real_empty())

    def one():
        r = evaluate(TASKS / "relu_big.py", CANDS / "relu_honest.py", seed=100, config=CFG)
        assert r.passed, r.feedback
        return torch.cuda.memory_reserved() - torch.cuda.memory_allocated()

    first = one()
    later = [one() for _ in range(4)]
    assert not emptied, "the cache was emptied: the growth cannot be measured (is the GPU shared?)"
    assert max(later) <= first * 1.25 + (64 << 20), (first, later)


def test_spot_indices_drawn_on_the_gpu_are_the_cpus():
    """The worker samples a checked output on its device, the grader on the reference's: both get
    SplitMix64's indices (drkernel.env.measure.spot), whatever the device, and no index crosses a bus."""
    import time

    from drkernel.env.measure.spot import sample_index

    for numel, seed in ((64 << 20, 7), ((1 << 35) + 3, (1 << 64) - 1)):
        gpu = sample_index(numel, seed, 1 << 20, torch, "cuda")
        assert gpu.device.type == "cuda"
        assert torch.equal(gpu.cpu(), sample_index(numel, seed, 1 << 20, torch, "cpu"))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for k in range(10):
        sample_index(64 << 20, k, 1 << 20, torch, "cuda")
    torch.cuda.synchronize()
    print(f"2^20 spot indices on the GPU: {(time.perf_counter() - t0) / 10 * 1e3:.3f} ms each")


def test_work_deferred_to_a_finaliser_is_timed_as_the_calls():
    """A forward that leaves its work to a finaliser (a reference cycle's ``__del__``): the worker
    collects inside each call's window, so the work is timed as the call's and the output is
    complete when read (drkernel.env.process.harness.Harness._release)."""
    honest = run("relu_big.py", "relu_honest.py")
    deferred = run("relu_big.py", "relu_finalizer_deferred.py")
    assert honest.passed and deferred.passed, deferred.feedback
    print(f"relu honest {honest.kernel_ms:.4f} ms, deferred to a finaliser {deferred.kernel_ms:.4f} ms")
    assert deferred.kernel_ms > 0.8 * honest.kernel_ms, (deferred.kernel_ms, honest.kernel_ms)


def test_the_cuda_runtime_bindings_are_refused_on_a_gpu():
    r = run("relu_big.py", "relu_cudart_host_register.py")
    assert not r.passed and "forbidden_operation" in r.hack_reasons, (r.hack_reasons, r.feedback)
    assert "cudart" in str(r.details.get("integrity")), r.details.get("integrity")


def _timed(fn, n=5):
    import time

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_fused_comparison_is_the_torch_comparison_on_a_gpu(monkeypatch, dtype):
    """GPU outputs are compared by drkernel.env.judge.compare_kernels: the same verdicts, messages and
    statistics as the torch operations, on a 64M-element output (several of torch's chunks and
    thousands of the kernels' blocks) right, slightly off, wrong in a few elements, with NaN/Inf,
    with an allowance and with a given scale; and how long each takes here."""
    from drkernel.env.judge import compare

    g = torch.Generator(device="cuda").manual_seed(5)
    n = 64 << 20
    ref = torch.randn(4096, n // 4096, device="cuda", generator=g, dtype=torch.float64).to(dtype)
    noise = torch.randn(ref.shape, device="cuda", generator=g, dtype=torch.float64)
    cases = {"equal": (ref.clone(), {}),
             "noise": ((ref.double() + 3e-5 * noise).to(dtype), {}),
             "allowance": ((ref.double() + 3e-4 * noise).to(dtype), {"allowance": 1e-3 * noise.abs()}),
             "scale": ((ref.double() + 3e-5 * noise).to(dtype), {"scale": 0.5})}
    wrong = ref.clone()
    wrong.view(-1)[[5, n // 2, n - 1]] += 1.0
    cases["wrong"] = (wrong, {})
    nonfinite = ref.clone()
    nonfinite.view(-1)[[17, n - 3]] = float("nan")
    cases["nan_in_output"] = (nonfinite, {})
    ref_inf = ref.clone()
    ref_inf.view(-1)[99] = float("inf")
    ref_inf.view(-1)[n - 7] = float("nan")
    cases["inf_nan_matched"] = (ref_inf.clone(), {"ref": ref_inf})
    unmatched = ref_inf.clone()
    unmatched.view(-1)[99] = -float("inf")
    cases["inf_unmatched"] = (unmatched, {"ref": ref_inf})
    for name, (out, kw) in cases.items():
        r = kw.pop("ref", ref)
        monkeypatch.setattr(compare, "FUSED", True)
        fused = compare.compare_outputs(out, r, 1e-4, 1e-4, **kw)
        ms_fused = _timed(lambda: compare.compare_outputs(out, r, 1e-4, 1e-4, **kw))
        monkeypatch.setattr(compare, "FUSED", False)
        plain = compare.compare_outputs(out, r, 1e-4, 1e-4, **kw)
        ms_plain = _timed(lambda: compare.compare_outputs(out, r, 1e-4, 1e-4, **kw))
        print(f"compare {dtype} {name}: fused {ms_fused:.2f} ms, torch {ms_plain:.2f} ms, ok={fused.ok}")
        assert (fused.ok, fused.message) == (plain.ok, plain.message), (name, fused, plain)
        for field in ("max_abs_err", "max_rel_err", "mismatch_frac"):
            a, b = getattr(fused, field), getattr(plain, field)
            assert a == b or abs(a - b) <= 1e-12 * max(1.0, abs(b)), (name, field, a, b)
        verdict = {"equal": True, "allowance": True, "inf_nan_matched": True, "wrong": False,
                   "nan_in_output": False, "inf_unmatched": False}  # (noise and scale: near the bound)
        assert name not in verdict or fused.ok == verdict[name], (name, fused)
    assert not compare.compare_outputs(cases["wrong"][0], ref, 1e-4, 1e-4).ok
