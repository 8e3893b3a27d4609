"""Tensors cross the process boundary as raw bytes + a validated JSON descriptor, never pickle."""

import pytest
import torch

from drkernel.env.process.tensor_io import TensorIOError, read_tensor, write_tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_roundtrip(tmp_path, dtype):
    t = (torch.randn(3, 5) * 10).to(dtype)
    assert torch.equal(read_tensor(write_tensor(t.t(), tmp_path, "a"), tmp_path), t.t())


@pytest.mark.parametrize("desc", [
    {"file": "../etc/passwd.bin", "dtype": "float32", "shape": [1]},
    {"file": "a.bin", "dtype": "object", "shape": [1]},
    {"file": "a.bin", "dtype": "float32", "shape": [-1]},
    {"file": "a.bin", "dtype": "float32", "shape": [1000]},  # size mismatch
    {"file": "a.bin", "dtype": "float32", "shape": [1], "extra": 1},
    "not a dict",
])
def test_hostile_descriptors_are_rejected(tmp_path, desc):
    write_tensor(torch.ones(1), tmp_path, "a")
    with pytest.raises(TensorIOError):
        read_tensor(desc, tmp_path)
