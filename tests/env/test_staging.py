"""The output stage: outputs cross the process boundary through a sealed shared memfd that neither
side can resize, read back only inside the part the grader reserved."""

import os

import pytest
import torch

from drkernel.env.process import staging
from drkernel.env.process.staging import ALIGN, Stage, StageError, reserve_bytes
from drkernel.env.process.tensor_io import TensorIOError, read_tensor, write_tensor


@pytest.fixture
def pair():
    """The grader's stage and a worker's view of the same memfd (as a child receives it)."""
    grader = Stage.create(limit=64 << 20)
    worker = Stage.attach(os.dup(grader.fd))  # at the worker's start: the stage is still empty
    grader.reserve(8 << 20, cuda=False)  # at the load: sized once and sealed
    worker.reserve(8 << 20, cuda=False)
    yield grader, worker
    worker.close()
    grader.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool,
                                   torch.complex64])
def test_outputs_round_trip_through_the_stage(pair, tmp_path, dtype):
    grader, worker = pair
    x = (torch.randn(33, 17) * 10).to(dtype)
    y = torch.arange(5, dtype=torch.int32)
    worker.rewind()
    dx = write_tensor(x.t(), tmp_path, "a", worker)  # non-contiguous: written in logical order
    dy = write_tensor(y, tmp_path, "b", worker)
    assert "stage" in dx and dx["stage"] == 0 and dy["stage"] % ALIGN == 0 and dy["stage"] > 0
    assert not list(tmp_path.iterdir())  # no file written
    got = read_tensor(dx, tmp_path, stage=grader)
    assert got.dtype == dtype and torch.equal(got, x.t()) and torch.equal(read_tensor(dy, tmp_path, stage=grader), y)
    # what the grader read is its own copy: the worker writing the stage again does not change it
    worker.rewind()
    write_tensor(torch.zeros_like(x), tmp_path, "c", worker)
    assert torch.equal(got, x.t())


def test_an_output_too_large_for_the_reservation_goes_to_a_file(pair, tmp_path):
    grader, worker = pair
    big = torch.ones(3 << 20)  # 12 MB > the 8 MB reserved
    desc = write_tensor(big, tmp_path, "big", worker)
    assert set(desc) == {"file", "dtype", "shape"}
    assert torch.equal(read_tensor(desc, tmp_path, stage=grader), big)


def test_neither_side_can_resize_the_stage(pair):
    grader, worker = pair
    for fd in (grader.fd, worker.fd):
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 4096)  # a shrunk file would fault the grader's mapping (SIGBUS)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 1 << 40)


def test_an_unsealed_file_is_not_accepted_as_a_stage():
    fd = os.memfd_create("not-a-stage", os.MFD_CLOEXEC)
    os.ftruncate(fd, 1 << 20)
    try:
        with pytest.raises(StageError, match="not sealed"):
            Stage.attach(fd)
    finally:
        os.close(fd)


def test_the_stage_is_sized_by_the_grader_once_and_never_grows():
    grader = Stage.create(limit=4 << 20)
    worker = Stage.attach(os.dup(grader.fd))
    try:
        with pytest.raises(StageError, match="not sized"):
            worker.reserve(1 << 20, cuda=False)  # before the grader reserved: nothing to map
        assert grader.reserve(64 << 20, cuda=False) == 4 << 20  # capped at the limit
        assert os.fstat(grader.fd).st_size == 4 << 20
        with pytest.raises(PermissionError):
            os.posix_fallocate(worker.fd, 0, 64 << 20)  # no memory parked in it beyond the reservation
    finally:
        worker.close()
        grader.close()


@pytest.mark.parametrize("desc,match", [
    ({"stage": 8 << 20, "dtype": "float32", "shape": [1]}, "outside the reserved"),  # past the reservation
    ({"stage": 0, "dtype": "float32", "shape": [(8 << 20) // 4 + 1]}, "outside the reserved"),
    ({"stage": 4, "dtype": "float32", "shape": [1]}, "bad stage offset"),  # not aligned
    ({"stage": -ALIGN, "dtype": "float32", "shape": [1]}, "bad stage offset"),
    ({"stage": True, "dtype": "float32", "shape": [1]}, "bad stage offset"),
    ({"stage": "0", "dtype": "float32", "shape": [1]}, "bad stage offset"),
    ({"stage": 0, "dtype": "object", "shape": [1]}, "unsupported dtype"),
    ({"stage": 0, "dtype": "float32", "shape": [1 << 30, 1 << 30]}, "too many elements"),
    ({"stage": 0, "dtype": "float32", "shape": [0]}, "empty tensor"),
    ({"stage": 0, "file": "a.bin", "dtype": "float32", "shape": [1]}, "malformed"),
])
def test_hostile_stage_descriptors_are_rejected(pair, tmp_path, desc, match):
    grader, _ = pair
    with pytest.raises(TensorIOError, match=match):
        read_tensor(desc, tmp_path, stage=grader)


def test_a_stage_descriptor_without_a_stage_is_rejected(tmp_path):
    with pytest.raises(TensorIOError, match="no output stage"):
        read_tensor({"stage": 0, "dtype": "float32", "shape": [1]}, tmp_path)


def test_reservation_covers_one_output_or_the_kept_timed_outputs():
    assert reserve_bytes(1000, 8, 1000) == 8 * ALIGN  # eight small kept outputs, each aligned
    assert reserve_bytes(256 << 20, 8, 4 << 20) == 256 << 20  # a big output, sampled kept outputs
    assert reserve_bytes(1 << 40, 1, 1) == staging.STAGE_BYTES  # never more than the stage


def test_the_stage_of_a_graded_candidate_is_released(monkeypatch):
    """A candidate process owns its stage: closing the process closes the memfd."""
    from drkernel.env.process.sandbox import CandidateProcess

    proc = CandidateProcess("cpu").wait_ready(120)
    import fcntl

    fd = proc.stage.fd
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
    proc.close()
    assert proc.stage.fd == -1
    with pytest.raises(OSError):
        os.fstat(fd)


# Tries every small file descriptor: shrinks it (which would fault the grader's mapping)
# and scribbles over it before every call's real work.
SCRIBBLER = '''
import mmap
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def scribble():
    for fd in range(3, 64):  # no listing of /proc/self/fd needed: descriptors are small numbers
        try:
            os.ftruncate(fd, 0)
        except Exception:
            pass
        try:
            m = mmap.mmap(fd, 1 << 20)
            m[:] = b"\\x7f" * (1 << 20)
            m.close()
        except Exception:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        scribble()
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
'''


def test_a_candidate_that_attacks_its_stage_cannot_fault_or_fool_the_grader():
    from pathlib import Path

    from drkernel.env.config import cpu_fast
    from drkernel.env.evaluation import evaluate

    tasks = Path(__file__).parent / "fixtures" / "tasks"
    honest = Path(__file__).parent / "fixtures" / "candidates" / "honest" / "relu_basic.py"
    r = evaluate(tasks / "relu.py", SCRIBBLER, seed=3, config=cpu_fast())
    assert r.correct and r.error is None  # the outputs it returned arrived intact (the stage is sealed)
    assert r.hacked  # mmap from a kernel is refused and flagged all the same
    # the grader is intact: an honest candidate right after passes
    assert evaluate(tasks / "relu.py", honest.read_text(), seed=3, config=cpu_fast()).correct
