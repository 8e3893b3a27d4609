# Shared by the RL recipes (sourced, not run): Ray cluster start-up and the --dry-run switch.
#
# One script runs on every node. NODE_RANK=0 starts the Ray head, waits for NNODES nodes and
# launches training; any other rank joins the head at HEAD_ADDR:RAY_PORT and blocks.

drk_parse_args() {
  # Sets DRY_RUN=1 for --dry-run; everything else is kept in OVERRIDES (Hydra key=value).
  DRY_RUN=0
  OVERRIDES=()
  for arg in "$@"; do
    if [ "$arg" = "--dry-run" ]; then DRY_RUN=1; else OVERRIDES+=("$arg"); fi
  done
}

drk_python() {
  echo "${PYTHON:-python3}"
}

drk_start_ray() {
  # Head or worker, by NODE_RANK. Returns on the head once NNODES nodes are up; never on a worker.
  local ray_port="${RAY_PORT:-6379}"
  if [ "${NODE_RANK:-0}" = "0" ]; then
    if ! ray status >/dev/null 2>&1; then
      ray start --head --port="$ray_port" --num-gpus="$GPUS_PER_NODE" ${RAY_HEAD_ARGS:-}
    fi
    local deadline=$((SECONDS + ${RAY_WAIT_SECONDS:-600}))
    while true; do
      local alive
      alive=$("$(drk_python)" -c "import ray; ray.init(address='auto', logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))" 2>/dev/null | tail -1)
      [ "${alive:-0}" -ge "$NNODES" ] && break
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "only ${alive:-0} of $NNODES Ray nodes joined within ${RAY_WAIT_SECONDS:-600}s" >&2
        exit 1
      fi
      sleep 5
    done
  else
    : "${HEAD_ADDR:?HEAD_ADDR must name the Ray head node on workers (NODE_RANK > 0)}"
    exec ray start --address="$HEAD_ADDR:$ray_port" --num-gpus="$GPUS_PER_NODE" --block
  fi
}
