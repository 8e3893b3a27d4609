"""Maps ordinary host memory into the device's address space with the CUDA runtime's bindings
(``cudaHostRegister``): a kernel could then write the worker's memory by address. Refused."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_PAGE = bytearray(1 << 16)


@triton.jit
def relu_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        host = torch.frombuffer(_PAGE, dtype=torch.uint8)
        torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.numel(), 0)

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, num_warps=4)
        return out
