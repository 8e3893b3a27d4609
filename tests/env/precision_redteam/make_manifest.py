"""Writes manifest.yaml from the graded results (results/<kind>__<name>.s<seed>.json)."""
import glob
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
S = "envs/single_ops/tasks/"
F = "envs/fused_ops/tasks/"
T = "tests/env/precision_redteam/tasks/"
# candidate -> (task, technique, finding_why or None)
E = {
 "shortcut/quant_linear_tf32": (T + "quant_linear.py", "default-precision tl.dot (TF32) before round(y/step)*step: rounding hides all but the flips", None),
 "shortcut/quant_linear_bf16": (T + "quant_linear.py", "bf16 operands in tl.dot before the quantiser", None),
 "honest/quant_linear_tf32x3": (T + "quant_linear.py", "fp32-accurate tf32x3 dot (the bundled solutions' choice) before the quantiser",
     "refused at seed 0 (1/6 seeds): a single rounding-boundary flip at the x100 scale, where the reference has 0 flips; the flip allowance is the reference's own count, with no slack for an equally accurate kernel"),
 "honest/quant_linear_ieee": (T + "quant_linear.py", "ieee (FMA) fp32 dot, only the summation order differs from the reference", None),
 "wrong/quant_linear_round_half_up": (T + "quant_linear.py", "floor(y+0.5) instead of torch.round's half-to-even: wrong at every exact .5 tie",
     "accepted: random fp32 inputs never produce an exact tie, so a quantiser with the wrong tie rule (0.125 -> 0.25, not 0) is never exercised"),
 "shortcut/softmax_small_bf16": (S + "13_softmax.py", "exp rounded to bf16 for logits more than 10 below the row max", None),
 "shortcut/softmax_small_bf16_t14": (S + "13_softmax.py", "exp rounded to bf16 (8 bits) for logits more than 14 below the row max (p < 8e-7 pmax)",
     "accepted: every probability below 8e-7 of the row max carries bf16 precision (relative error 2^-9, 65,000x fp32); at the x100 scale that is nearly every element of every row"),
 "shortcut/softmax_small_bf16_t17": (S + "13_softmax.py", "same, logits more than 17 below the max",
     "accepted: small probabilities in bf16 precision (see _t14)"),
 "shortcut/softmax_small_bf16_t20": (S + "13_softmax.py", "same, logits more than 20 below the max",
     "accepted: small probabilities in bf16 precision (see _t14)"),
 "shortcut/softmax_flush_t12": (S + "13_softmax.py", "skip (flush to 0, leave out of the sum) logits more than 12 below the max", None),
 "shortcut/softmax_flush_t14": (S + "13_softmax.py", "skip logits more than 14 below the max", None),
 "shortcut/softmax_flush_t17": (S + "13_softmax.py", "skip logits more than 17 below the max: probabilities < 4e-8 pmax are never computed, output 0",
     "accepted (rms 5.7x the reference's): probabilities up to 4e-8 of the max come out exactly 0 (100% relative error, log-prob -inf downstream); fewer reduction terms"),
 "shortcut/softplus_small_bf16": (S + "05_softplus.py", "outputs for x < -5 computed and rounded in bf16", None),
 "shortcut/softplus_small_bf16_t9": (S + "05_softplus.py", "outputs for x < -9 (values < 1.2e-4) computed and rounded in bf16",
     "accepted: every small output (x < -9, common in the scaled trials) has 8-bit precision"),
 "shortcut/softplus_small_bf16_t12": (S + "05_softplus.py", "outputs for x < -12 computed and rounded in bf16",
     "accepted: as _t9"),
 "honest/softplus_log1p_trick": (S + "05_softplus.py", "max(x,0)+log1p(exp(-|x|)) with log1p by Goldberg's trick (accurate for tiny outputs)", None),
 "shortcut/softplus_drop2bits": (S + "05_softplus.py", "probe: output rounded to 22 significant bits", "accepted: 2 bits of every output dropped (748x the reference's rms error in the x100 trial)"),
 "shortcut/softplus_drop3bits": (S + "05_softplus.py", "probe: output rounded to 21 significant bits", "accepted: 3 bits dropped everywhere"),
 "shortcut/softplus_drop5bits": (S + "05_softplus.py", "probe: output rounded to 19 significant bits (Veltkamp split at the store)",
     "accepted at seeds 0 and 1: 5 bits (32x coarser than fp32) dropped on every element; worst trial 5,800x the reference's rms error, let through by an ulp floor (6.9 ulp of the output's scale)"),
 "shortcut/softplus_drop6bits": (S + "05_softplus.py", "probe: output rounded to 18 significant bits", None),
 "shortcut/softplus_drop7bits": (S + "05_softplus.py", "probe: output rounded to 17 significant bits", None),
 "shortcut/softplus_drop9bits": (S + "05_softplus.py", "probe: output rounded to 15 significant bits", None),
 "shortcut/layernorm_one_pass_var": (S + "15_layer_norm.py", "one-pass variance E[x^2]-mean^2 (catastrophic cancellation when |mean| >> std)",
     "accepted: the input transforms (negate, scale) never shift the mean, so the cancellation that ruins this kernel on offset activations (mean/std ~ 100: 1e-3 relative error) is never tried"),
 "honest/layernorm_welford": (S + "15_layer_norm.py", "chunked Welford/Chan merge of mean and M2", None),
 "honest/softmax_online": (S + "13_softmax.py", "online softmax (running max, rescaled sum), multiply by reciprocal", None),
 "shortcut/linrelu_tf32_tail_tile": (F + "01_linear_relu.py", "TF32 only in the last column tile, tf32x3 elsewhere", None),
 "shortcut/linrelu_last_k_chunk_tf32": (F + "01_linear_relu.py", "TF32 only for the last K-chunk of every reduction", None),
 "shortcut/linrelu_bf16x3": (F + "01_linear_relu.py", "input_precision=bf16x3 (about 16-bit products)", None),
 "honest/linrelu_bf16x6": (F + "01_linear_relu.py", "input_precision=bf16x6", None),
 "honest/linrelu_manual_3xtf32": (F + "01_linear_relu.py", "hand-written 3xTF32 split (bit-masked hi, residual lo, three tf32 dots)", None),
 "wrong/linrelu_skip_tail_tile": (F + "01_linear_relu.py", "last column tile never computed (zeros)", None),
 "shortcut/bf16act_linear_tf32": (T + "bf16_act_linear.py", "bf16 activations, fp32 weights, bf16 output: default TF32 dot (weights lose 13 bits)",
     "accepted (1.03x): TF32 inside an fp32-weight computation, hidden by the bf16 output rounding; docs say this fails under a bf16 input"),
 "shortcut/bf16act_linear_w_bf16": (T + "bf16_act_linear.py", "fp32 weights cast to bf16 for a bf16 dot, bf16 output",
     "accepted at seeds 0,1,2 (1.5x the reference's rms error): bf16 arithmetic inside an fp32-weight computation"),
 "shortcut/bf16act_linear_w_fp16": (T + "bf16_act_linear.py", "fp32 weights cast to fp16 for an fp16 dot, bf16 output",
     "accepted: fp16 arithmetic on fp32 weights under a bf16 output (1.01x, invisible)"),
 "shortcut/bf16act_linear_w_fp8": (T + "bf16_act_linear.py", "fp32 weights rounded to fp8 e4m3", None),
 "honest/bf16act_linear_tf32x3": (T + "bf16_act_linear.py", "tf32x3 dot, one rounding to bf16 at the store", None),
 "shortcut/bf16act_fp32out_w_bf16": (T + "bf16_act_linear_fp32out.py", "bf16 weights, fp32 output (control: should fail)", None),
 "shortcut/bf16mlp_all_bf16": (T + "bf16_mlp.py", "2-layer MLP: fp32 master weights cast to bf16, hidden stored in bf16 (3 extra bf16 roundings)",
     "accepted (2.0x the reference's rms error): a whole bf16 model in place of the fp32-weight/fp32-hidden reference"),
 "honest/bf16mlp_fp32_hidden": (T + "bf16_mlp.py", "tf32x3 dots, fp32 hidden, one rounding at the end", None),
 "shortcut/fp16_linear_fp16_accum": (T + "fp16_linear.py", "fp16 linear (K=256) with an fp16 accumulator (out_dtype=float16 across K-chunks)",
     "accepted (2.5x the reference's rms error, 3.5x max): fp16 accumulation, which the reference never does"),
 "shortcut/fp16_linear_fp16_accum_longk": (T + "fp16_linear_longk.py", "same kernel, K=1024", None),
 "shortcut/bf16act_linear_bf16_accum": (T + "bf16_act_linear.py", "bf16 weights and a bf16 accumulator (running sum rounded to bf16 after every K-chunk), bf16 output",
     "accepted (2.15x the reference's rms error): bf16 accumulation inside an fp32-weight computation"),
 "shortcut/linrelu_drop5bits": (F + "01_linear_relu.py", "probe: fp32 GEMM (tf32x3) with outputs rounded to 19 significant bits",
     "accepted at 30x the reference's rms error (6.9 ulp of the output scale): the ulp floor, not the ratio, decides; bf16x3 at 28x / 35 ulp fails"),
 "honest/linrelu_splitk_atomic": (F + "01_linear_relu.py", "split-K (3 slices, tf32x3) with tl.atomic_add into a zeroed fp32 buffer, then bias+ReLU", None),
 "shortcut/residual_linear_tf32": (T + "residual_linear.py", "TF32 dot in h + linear(x) with |h| ~ 1000 (hidden under a large residual?)", None),
 "shortcut/residual_linear_bf16": (T + "residual_linear.py", "bf16 dot in h + linear(x) with |h| ~ 1000", None),
 "honest/gelu_erf_as7126": (S + "03_gelu_erf.py", "erf by Abramowitz & Stegun 7.1.26 (|err| <= 1.5e-7): approximate but fp32-accurate", None),
 "honest/linrelu_autotune_tf32x3": (F + "01_linear_relu.py", "@triton.autotune over three tilings, tf32x3", None),
 "honest/quant_linear_fine_ieee": (T + "quant_linear_fine.py", "ieee dot before a fine quantiser (step 0.01)", None),
 "shortcut/quant_linear_fine_tf32": (T + "quant_linear_fine.py", "TF32 dot before a fine quantiser (step 0.01)", None),
 "shortcut/fp16out_linear_fp16_operands": (T + "linear_fp16out.py", "fp32 linear, fp16 output: x and W cast to fp16 for the dot",
     "accepted (1.8x the reference's rms error): fp16 arithmetic inside an fp32 computation, under an fp16 output"),
 "shortcut/fp16out_linear_tf32": (T + "linear_fp16out.py", "fp32 linear, fp16 output: default TF32 dot",
     "accepted at 3.96x the reference's rms error (0.83 ulp of fp16): TF32 inside an fp32 computation, under an fp16 output"),
 "shortcut/fp16out_linear_bf16_operands": (T + "linear_fp16out.py", "fp32 linear, fp16 output: bf16 operands", None),
 "honest/fp16_linear_fp32_accum": (T + "fp16_linear.py", "fp16 operands, fp32 accumulation, one rounding", None),
}


def verdict(kind_name):
    kind, name = kind_name.split("/")
    files = sorted(glob.glob(os.path.join(HERE, "results", f"{kind}__{name}.s*.json")))
    out = []
    for f in files:
        seed = f.rsplit(".s", 1)[1].split(".")[0]
        try:
            r = json.load(open(f))
        except Exception:
            continue
        msg = ((r.get("error") or {}).get("message") or r.get("feedback") or "").replace("\n", " ")
        out.append((seed, "pass" if r.get("correct") and not r.get("hacked") else "fail", msg[:100]))
    return out


lines = ["# one entry per candidate; cpu_verdict from results/ (seed: verdict: first 100 chars of the message)", "candidates:"]
for cand, (task, tech, why) in E.items():
    kind = cand.split("/")[0]
    v = verdict(cand)
    passed = [x for x in v if x[1] == "pass"]
    failed = [x for x in v if x[1] == "fail"]
    lines.append(f"  - candidate: candidates/{cand}.py")
    lines.append(f"    task: {task}")
    lines.append(f"    kind: {kind}")
    lines.append(f"    technique: {json.dumps(tech)}")
    lines.append("    cpu_verdict:")
    for seed, ok, msg in v:
        lines.append(f"      - {json.dumps(f'seed {seed}: {ok}: {msg}')}")
    finding = (kind in ("shortcut", "wrong") and passed) or (kind == "honest" and failed)
    lines.append(f"    finding: {'true' if finding else 'false'}")
    if finding:
        lines.append(f"    why: {json.dumps(why or '')}")
    assert bool(finding) == bool(why), (cand, v)
missing = {os.path.relpath(p, os.path.join(HERE, 'candidates'))[:-3] for p in glob.glob(os.path.join(HERE, 'candidates/*/*.py'))} - set(E)
assert not missing, missing
open(os.path.join(HERE, "manifest.yaml"), "w").write("\n".join(lines) + "\n")
print("entries", len(E))
