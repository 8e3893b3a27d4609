#!/usr/bin/env bash
# Every GPU path of drkernel in one call, on a CUDA machine (no internet needed):
#   bash tests/gpu/run.sh [stage ...]     stages: cli tests fixtures spread grader loadspread service agent
#                                         local single fused (default: all; one 10-minute device call holds
#                                         about three of them: pass stages to split the run)
#                                         probe sweep (suite authors' tools, not in the default)
#                                         verl (3 verl PPO steps with vLLM; needs the carried wheels
#                                         installed first: tests/gpu/verl/README.md; not in the default)
#                                         verl_scaling (the stage at 1, 2, 4 GPUs: SCALING, PRESET), verl_sft
#                                         (SFT export -> verl SFT -> RL from it); same wheels; not in the default
#                                         trl (examples/trl_grpo.py, 2 GRPO steps; needs the trl extra's wheels)
#                                         rollout (local generation tokens/s; not in the default)
#                                         redteam (the black-box corpus; OLD_DRKERNEL=dir for a before run)
#                                         precision (the oracle's GPU tests, the precision corpus, its cost)
#                                         ab (the grader sweep of this checkout and of OLD_DRKERNEL, arms
#                                         alternating in one call: AB_ARMS, AB_HOLDS, CAPACITIES, SWEEP_ROUNDS; not in
#                                         the default). OLD_DRKERNEL is a directory under the repository
#                                         holding an older drkernel package, carried with the call, e.g.
#                                         mkdir -p .old/47308c3 && git archive 47308c3 drkernel | tar x -C .old/47308c3
# On a machine with several GPUs, tests/gpu/side_by_side.sh runs several of these calls at once, one GPU each.
# Stages service, service_soak, agent and local need the serve/agent/local extras' pure-Python packages
# (pip install -e '.[serve,agent,local]'; on a machine without internet, install their wheels).
# Results go to $OUT (default /tmp/drkernel-gpu): logs, results.json, summary.md, plots.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/drkernel-gpu}"
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
# The serve extra's pure-Python wheels, when carried (the GPU machine has no internet): stages
# service and service_soak need them. Prepare here with
#   pip download -d .whl-serve --python-version 3.12 --platform manylinux2014_x86_64 --only-binary=:all: \
#     fastapi uvicorn httpx prometheus-client
# and name .whl-serve in the device call's carry.
if ls "$ROOT"/.whl-serve/*.whl >/dev/null 2>&1 && ! $PY -c "import uvicorn, fastapi" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --target /tmp/drkernel-serve-site "$ROOT"/.whl-serve/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/drkernel-serve-site"
fi
STAGES="${*:-cli tests fixtures spread grader loadspread service agent local single fused}"
# PRECOMPILE=0 runs loadspread without compiling ahead (files named _pc0).
# BENCH_TASKS="0*,1*" limits the suite stages to matching tasks (a long suite can be split over calls).
TASKS_ARG=(); SUFFIX=""
if [ -n "${BENCH_TASKS:-}" ]; then TASKS_ARG=(--tasks "$BENCH_TASKS"); SUFFIX="-${BENCH_PART:-part}"; fi
status=0
echo "== device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
for stage in $STAGES; do
  echo "== $stage"
  case "$stage" in
    cli)      $PY -m drkernel.cli eval-kernel --task tests/gpu/tasks/relu_big.py \
                --candidate tests/gpu/candidates/relu_honest.py --device cuda --json > "$OUT/eval_kernel_cuda.json"
              rc=$?; echo "eval-kernel exit $rc"; [ $rc -eq 0 ] || status=1
              $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r[k] for k in ('passed','speedup','coverage','kernel_ms','reference_ms')}); sys.exit(0 if r['passed'] else 1)" \
                "$OUT/eval_kernel_cuda.json" || status=1 ;;
    tests)    $PY -m pytest tests/gpu -o addopts="" -q -ra -s -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" || status=1 ;;
    fixtures) DRKERNEL_TEST_DEVICE=cuda $PY -m pytest tests/env/test_fixtures.py -o addopts="" -q -ra -p no:cacheprovider 2>&1 \
                | tee "$OUT/fixtures_cuda.log" || status=1 ;;
    spread)   $PY tests/benchmarks/diagnostics/timing_spread.py --task "${SPREAD_TASK:-tests/gpu/tasks/matmul_2k.py}" \
                --candidate "${SPREAD_CANDIDATE:-tests/gpu/candidates/matmul_honest.py}" --repeats 10 \
                --out "$OUT/spread.json" 2>&1 | tee "$OUT/spread.log" || status=1 ;;
    grader)   $PY tests/benchmarks/bench_grader.py --device cuda --warm-rounds 3 --repeat 10 --spread-task 18_matmul_square \
                --json "$OUT/bench_grader.json" 2>&1 | tee "$OUT/bench_grader.log" || status=1 ;;
    loadspread) $PY tests/benchmarks/diagnostics/output_transfer.py --mb 256 --concurrency 1,8 --out "$OUT/output_transfer.json" 2>&1 \
                | tee "$OUT/output_transfer.log" || status=1
              $PY tests/benchmarks/diagnostics/compiler_phases.py --n 8 --out "$OUT/compiler_phases.json" 2>&1 \
                | tee "$OUT/compiler_phases.log" | tail -3 || status=1
              $PY tests/benchmarks/bench_grader.py --device cuda --capacities "${CAPACITIES:-1,4,8}" \
                --tasks "${LOADSPREAD_TASKS:-01_relu,07_broadcast_mul,13_softmax,15_layer_norm,18_matmul_square,22_cumsum,25_transpose_2d,27_embedding}" \
                --sweep-rounds "${SWEEP_ROUNDS:-3}" ${SPARES:+--spares "$SPARES"} ${PRECOMPILE:+--precompile-timeout "$PRECOMPILE"} \
                --skip-warmup --json "$OUT/bench_grader_sweep${PRECOMPILE:+_pc$PRECOMPILE}.json" 2>&1 \
                | tee "$OUT/bench_grader_sweep${PRECOMPILE:+_pc$PRECOMPILE}.log" | grep -v "^  \[" || status=1 ;;
    ab)       if [ -z "${OLD_DRKERNEL:-}" ] || [ ! -d "$ROOT/$OLD_DRKERNEL/drkernel" ]; then
                echo "stage ab needs OLD_DRKERNEL=<dir under the repository with an older drkernel package>"; status=1
              else
                k=0
                for arm in ${AB_ARMS:-new old new old}; do
                  k=$((k + 1)); pp="$PYTHONPATH"; dir="$ROOT"
                  # AB_HOLDS="1.0 0.4 ...": the k-th arm's launch budget in ms (EvalConfig.launch_budget_ms)
                  hold="$(echo ${AB_HOLDS:-} | cut -d' ' -f$k)"
                  [ "$arm" = old ] && pp="$ROOT/$OLD_DRKERNEL:$PYTHONPATH" && dir="$ROOT/$OLD_DRKERNEL"
                  echo "== ab arm $k: $arm"
                  # each arm runs from its package's directory: a grader before 2026-11-27 started its
                  # workers with ``python -m`` from its working directory, which imports from there first
                  (cd "$dir" && PYTHONPATH="$pp" $PY "$ROOT/tests/benchmarks/bench_grader.py" --device cuda --capacities "${CAPACITIES:-8}" \
                    --tasks "${LOADSPREAD_TASKS:-01_relu,07_broadcast_mul,13_softmax,15_layer_norm,18_matmul_square,22_cumsum,25_transpose_2d,27_embedding}" \
                    --sweep-rounds "${SWEEP_ROUNDS:-4}" --skip-fresh ${hold:+--launch-budget-ms "$hold"} \
                    --json "$OUT/ab_${k}_$arm${hold:+_hold$hold}.json") 2>&1 \
                    | tee -a "$OUT/ab_$arm.log" | grep -E "^drkernel from|^capacity [0-9]+:|share of|empty_cache|timing request" || status=1
                done
              fi ;;
    service)  $PY tests/benchmarks/diagnostics/service_bench.py --n 48 --rounds 2 --latency-n 10 --out "$OUT/service_bench.json" 2>&1 \
                | tee "$OUT/service_bench.log" || status=1 ;;
    agent)    $PY tests/benchmarks/diagnostics/agent_refine.py --device cuda --out "$OUT/agent_refine" 2>&1 \
                | tee "$OUT/agent_refine.log" || status=1 ;;
    local)    OUT="$OUT" bash tests/gpu/local_train.sh || status=1 ;;
    single)   $PY -m drkernel.cli bench --suite envs/single_ops --device cuda "${TASKS_ARG[@]}" \
                --out "$OUT/single_ops$SUFFIX" 2>&1 | tee "$OUT/bench_single$SUFFIX.log" || status=1 ;;
    fused)    $PY -m drkernel.cli bench --suite envs/fused_ops --device cuda "${TASKS_ARG[@]}" \
                --out "$OUT/fused_ops$SUFFIX" 2>&1 | tee "$OUT/bench_fused$SUFFIX.log" || status=1 ;;
    probe)    for suite in single_ops fused_ops; do
                $PY tests/benchmarks/diagnostics/solution_speed.py --suite "envs/$suite" ${BENCH_TASKS:+--tasks "$BENCH_TASKS"} \
                  --out "$OUT/speed_$suite$SUFFIX.json" 2>&1 | tee "$OUT/speed_$suite$SUFFIX.log" || status=1
              done ;;
    sweep)    $PY tests/benchmarks/diagnostics/gemm_sweep.py --out "$OUT/gemm_sweep.json" 2>&1 | tee "$OUT/gemm_sweep.log" || status=1 ;;
    # ---- redteam: the black-box corpus (tests/env/redteam) with this grader and, when OLD_DRKERNEL
    # names an older checkout (e.g. .old/c661605, carried), with that one: the before/after table.
    redteam)  $PY tests/benchmarks/grade_corpus.py tests/env/redteam --device cuda --label new \
                --out "$OUT/redteam_cuda.json" 2>&1 | tee "$OUT/redteam_cuda.log" | tail -12 || status=1
              if [ -n "${OLD_DRKERNEL:-}" ]; then
                PYTHONPATH="$ROOT/$OLD_DRKERNEL" $PY tests/benchmarks/grade_corpus.py tests/env/redteam --device cuda \
                  --label "old" --out "$OUT/redteam_cuda_old.json" 2>&1 | tee "$OUT/redteam_cuda_old.log" | tail -12
              fi ;;
    # ---- precision: the float64 oracle's verdicts on the GPU (tests/gpu/test_gpu_precision.py), the
    # precision corpora (PRECISION_CORPORA, default tests/env/precision and precision_redteam) and what
    # the oracle costs the grader.
    precision) $PY -m pytest tests/gpu/test_gpu_precision.py -o addopts="" -q -ra -s -p no:cacheprovider 2>&1 \
                | tee "$OUT/gpu_precision.log" || status=1
              for corpus in ${PRECISION_CORPORA:-tests/env/precision tests/env/precision_redteam}; do
                name=$(basename "$corpus")
                $PY tests/benchmarks/grade_corpus.py "$corpus" --device cuda --label new \
                  --out "$OUT/${name}_cuda.json" 2>&1 | tee "$OUT/${name}_cuda.log" | grep -E "^(MISS|BAD|FAIL)|caught" || status=1
              done
              $PY tests/benchmarks/diagnostics/precision_cost.py --out "$OUT/precision_cost.json" 2>&1 \
                | tee "$OUT/precision_cost.log" || status=1 ;;
    # ---- rollout: tokens/s of the local trainer's batched generation (tiny model built here, as the
    # GPU local stage's; batched vs one-at-a-time). ROLLOUT_DEVICE=cpu checks the stage on a CPU box.
    rollout)  mkdir -p "$OUT/rollout"
              $PY tests/benchmarks/bench_rollout.py --device "${ROLLOUT_DEVICE:-cuda}" --tiny-hidden 256 \
                --tiny-layers 4 --tokenizer-vocab 4000 --batches "${ROLLOUT_BATCHES:-1,8,32,64}" \
                --prompt-tokens "${ROLLOUT_PROMPTS:-512,2048}" --new-tokens 256 --min-tokens-per-s "${ROLLOUT_MIN_TOKPS:-2000}" \
                --decode "${ROLLOUT_DECODE:-static,hf}" \
                --out "$OUT/rollout/bench_rollout.json" 2>&1 | tee "$OUT/rollout/bench_rollout.log" || status=1 ;;
    # ---- end rollout
    # --- verl: real verl PPO steps with vLLM rollouts (tests/gpu/verl/README.md) ---------------
    verl)     OUT="$OUT" bash tests/gpu/verl/ppo_steps.sh || status=1 ;;
    # the stage at SCALING's GPU counts (GPUS[:TP], default "1 2 4") on PRESET (1.5b), one table
    verl_scaling) OUT="$OUT" bash tests/gpu/verl/scaling.sh ${SCALING:-1 2 4} || status=1 ;;
    # the recipe chain on one GPU: the agent's SFT export -> verl SFT -> RL from its checkpoint
    verl_sft) OUT="$OUT" bash tests/gpu/verl/sft_chain.sh || status=1 ;;
    # the TRL example (drkernel.integrations.trl): 2 GRPO steps with the tiny model on this GPU
    trl)      $PY -m pytest tests/gpu/test_gpu_trl.py -o addopts="" -q -ra -p no:cacheprovider 2>&1 | tee "$OUT/trl.log" \
                | tail -5 || status=1
              $PY examples/trl_grpo.py --device cuda --steps 2 --out "$OUT/trl" 2>&1 | tail -3 | tee -a "$OUT/trl.log" \
                || status=1 ;;
    # ------------------------------------------------------------------------------------------
    # ---- service_soak (on demand: bash tests/gpu/run.sh service_soak; SOAK_COUNT=200 by default) ----
    # drkernel serve under worker kills and a server restart, real grading on the GPU, verdicts
    # compared with a quiet in-process run (tests/benchmarks/bench_service_soak.py; ~5-10 minutes)
    service_soak) $PY tests/benchmarks/bench_service_soak.py --device cuda --count "${SOAK_COUNT:-200}" \
                --out "$OUT/service_soak.json" 2>&1 | tee "$OUT/service_soak.log" || status=1 ;;
    # ---- end service_soak ----
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
exit $status
