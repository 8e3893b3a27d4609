"""The candidate's kernels carry the grader's suffix whatever Triton's cache already holds."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KERNELS = textwrap.dedent('''
    import triton
    import triton.language as tl

    @triton.jit
    def kern(x_ptr, n):
        i = tl.arange(0, 16)
        tl.store(x_ptr + i, tl.load(x_ptr + i) * 2, mask=i < n)

    @triton.jit
    def caller(x_ptr, n):
        kern(x_ptr, n)
''')

CHECK = textwrap.dedent('''
    import importlib.util, json, sys
    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
        return m
    path = sys.argv[1]
    plain = load(path, "plain")  # the same source compiled by anyone else, without the suffix
    from drkernel.env.measure.launches import install_naming
    install_naming(path, "__dk5f2a91")
    named = load(path, "named")
    from triton.compiler.compiler import ASTSource
    def disk_key(k):
        return ASTSource(k, {"x_ptr": "*fp32", "n": "i32"}, {}).hash()
    print(json.dumps({"name": named.kern._fn_name, "fn_key": plain.kern.cache_key != named.kern.cache_key,
                      "disk_key": disk_key(plain.kern) != disk_key(named.kern),
                      "caller_key": plain.caller.cache_key != named.caller.cache_key,
                      "still_a_jit_function": isinstance(named.kern, type(plain.kern))}))
''')


def test_a_renamed_kernel_never_shares_a_cache_key_with_the_same_source_unrenamed(tmp_path):
    """Triton's cache key hashes a kernel's source, not its name: before the fix, a binary compiled
    from the same source under the plain name (someone ran the solution outside the grader) was a
    hit in the worker's shared cache layer and ran under that name, so the device records showed
    no kernel of the candidate's and an honest candidate failed (H100, 2026-11-27)."""
    kernels = tmp_path / "kernels.py"
    kernels.write_text(KERNELS)
    check = tmp_path / "check.py"
    check.write_text(CHECK)
    out = subprocess.run([sys.executable, str(check), str(kernels)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["name"].endswith("__dk5f2a91")
    assert res["fn_key"] and res["disk_key"] and res["caller_key"], res
    assert res["still_a_jit_function"]
