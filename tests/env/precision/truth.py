"""Ground truth for the precision corpus: how far each candidate is from a float64 oracle, next to how
far the reference itself (run in the task's dtypes) is.

usage: python tests/env/precision/truth.py [--device cpu|cuda] [--size small|full] [--filter SUBSTR]
                                           [--verbose] [--update-manifest]

For every manifest entry (or those whose candidate path contains SUBSTR) and every trial below:

* ref    = Model(*init)(*inputs)                       in the task's dtypes (on --device)
* oracle = copy of Model cast to float64, fed the inputs cast to float64 (floating tensors only)
* cand   = ModelNew(*init) holding the reference's parameter values, on the same inputs
           (on the CPU through Triton's interpreter: TRITON_INTERPRET=1 is set before triton loads)

err(out) = out.double() - oracle, summarised as rms and max |.|, both divided by rms(oracle). The
ratios err_cand / err_ref (rms and max) are what a precision-aware "correct" compares; an entry's
line shows the worst trial. A non-finite candidate output where the oracle is finite counts as inf.

Trials (each where the task's INPUT_DISTRIBUTIONS allow it, default all): native (the initial
parameters), negated, scaled x1e-2, scaled x1e2, and "reload" (native inputs, every parameter
scaled elementwise by a factor in [0.5, 1.5), as the grader does between trials).

Tasks that cast internally are written so the oracle stays float64 (pc07 casts with
`.to(self.linear.weight.dtype)`, not `.float()`); no task casts to a lower precision inside
`forward`, so the oracle is the task's math in float64 throughout.

--update-manifest rewrites the `measured` field of each graded entry in manifest.yaml.
"""
import argparse
import copy
import importlib.util
import math
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--size", default="small", choices=["small", "full"])
    ap.add_argument("--filter", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--update-manifest", action="store_true")
    return ap.parse_args()


ARGS = parse()
os.environ["DRKERNEL_TASK_SIZE"] = ARGS.size
if ARGS.device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import yaml  # noqa: E402

_counter = [0]


def load(path):
    _counter[0] += 1
    spec = importlib.util.spec_from_file_location(f"_pc_mod_{_counter[0]}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def to_dev(v, dev, f64=False):
    if isinstance(v, torch.Tensor):
        v = v.to(dev)
        if f64 and v.is_floating_point():
            v = v.double()
    return v


def trials(task):
    dists = getattr(task, "INPUT_DISTRIBUTIONS", ("native", "negated", "scaled"))
    out = [("native", None, 1.0, False)]
    if "negated" in dists:
        out.append(("negated", "neg", 1.0, False))
    if "scaled" in dists:
        out += [("scaled1e-2", "scale", 1e-2, False), ("scaled1e2", "scale", 1e2, False)]
    out.append(("reload", None, 1.0, True))
    return out


def transform(inputs, how, s):
    res = []
    for v in inputs:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            if how == "neg":
                v = -v
            elif how == "scale":
                v = (v.double() * s).to(v.dtype)
        res.append(v)
    return res


def err(out, oracle):
    o = oracle.double()
    d = out.double() - o
    fin = torch.isfinite(o)
    bad = (~torch.isfinite(out.double())) & fin
    scale = o[fin].pow(2).mean().sqrt().item() or 1.0
    if bad.any():
        return math.inf, math.inf, scale
    d = torch.where(fin, d, torch.zeros_like(d))
    return d.pow(2).mean().sqrt().item() / scale, d.abs().max().item() / scale, scale


def measure(entry, dev):
    tpath = os.path.join(HERE, entry["task"])
    cpath = os.path.join(HERE, entry["candidate"])
    task = load(tpath)
    cand = load(cpath)
    rows = []
    for name, how, s, reload in trials(task):
        torch.manual_seed(ARGS.seed)
        init = task.get_init_inputs()
        ref_model = task.Model(*init).to(dev).eval()
        if reload:
            g = torch.Generator().manual_seed(ARGS.seed + 1)
            with torch.no_grad():
                for p in ref_model.parameters():
                    f = 0.5 + torch.rand(p.shape, generator=g)
                    p.copy_((p.double().cpu() * f).to(p.dtype).to(dev))
        torch.manual_seed(ARGS.seed + 7)
        inputs = transform(task.get_inputs(), how, s)
        torch.manual_seed(ARGS.seed)
        new_model = cand.ModelNew(*init).to(dev).eval()
        with torch.no_grad():
            for p, q in zip(new_model.parameters(), ref_model.parameters()):
                p.copy_(q)
        oracle_model = copy.deepcopy(ref_model).double()
        with torch.no_grad():
            ref = ref_model(*[to_dev(v, dev) for v in inputs])
            oracle = oracle_model(*[to_dev(v, dev, f64=True) for v in inputs])
            out = new_model(*[to_dev(v, dev) for v in inputs])
        assert oracle.dtype == torch.float64, f"oracle of {entry['task']} is {oracle.dtype}"
        if out.shape != ref.shape:
            rows.append((name, math.inf, math.inf, 0.0, 0.0))
            continue
        cr, cm, _ = err(out, oracle)
        rr, rm, _ = err(ref, oracle)
        rows.append((name, cr, cm, rr, rm))
    return rows


def ratio(a, b):
    if a == 0:
        return 0.0
    return a / max(b, 1e-12)


def fmt(x):
    return "inf" if x == math.inf else f"{x:.3g}"


def main():
    dev = ARGS.device
    mpath = os.path.join(HERE, "manifest.yaml")
    manifest = yaml.safe_load(open(mpath))
    entries = [e for e in manifest["candidates"] if ARGS.filter in e["candidate"]]
    print(f"{'candidate':58s} {'kind':8s} {'dev':4s} {'worst trial':11s} "
          f"{'cand rms':>9s} {'ref rms':>9s} {'x rms':>8s} {'cand max':>9s} {'ref max':>9s} {'x max':>8s}")
    for e in entries:
        try:
            rows = measure(e, dev)
        except Exception as exc:  # noqa: BLE001
            print(f"{e['candidate']:58s} ERROR {type(exc).__name__}: {exc}")
            if ARGS.verbose:
                traceback.print_exc()
            e["measured"] = f"error ({type(exc).__name__})"
            continue
        worst = max(rows, key=lambda r: (max(ratio(r[1], r[3]), ratio(r[2], r[4]))))
        name, cr, cm, rr, rm = worst
        print(f"{e['candidate'][11:]:58s} {e['kind']:8s} {e.get('devices', 'both'):4s} {name:11s} "
              f"{fmt(cr):>9s} {fmt(rr):>9s} {fmt(ratio(cr, rr)):>8s} {fmt(cm):>9s} {fmt(rm):>9s} "
              f"{fmt(ratio(cm, rm)):>8s}")
        if ARGS.verbose:
            for name, cr, cm, rr, rm in rows:
                print(f"    {name:11s} cand rms {fmt(cr)} max {fmt(cm)} | ref rms {fmt(rr)} max {fmt(rm)} "
                      f"| x rms {fmt(ratio(cr, rr))} x max {fmt(ratio(cm, rm))}")
        e["measured"] = (f"worst trial {name} ({ARGS.device}, {ARGS.size}): rms {fmt(cr)} vs ref {fmt(rr)} "
                         f"(x{fmt(ratio(cr, rr))}), max {fmt(cm)} vs ref {fmt(rm)} (x{fmt(ratio(cm, rm))})")
        sys.stdout.flush()
    if ARGS.update_manifest:
        head = [ln for ln in open(mpath).read().splitlines() if ln.startswith("#")]
        with open(mpath, "w") as f:
            f.write("\n".join(head) + "\n")
            yaml.safe_dump(manifest, f, sort_keys=False, width=200, allow_unicode=True)


if __name__ == "__main__":
    main()
