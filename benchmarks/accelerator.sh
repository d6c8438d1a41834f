#!/usr/bin/env bash
# Every speed and memory figure of docs/benchmarks.md on the device JAX sees, logs and JSON
# under $OUT (default: benchmarks-out/), one stage after another (all by default):
#   devices     the device, JAX and PyTorch versions
#   speed       round_speed.py at d 200 (f32 and bf16, the one-client jit loop, PyTorch's
#               cuDNN loop, clients per round 16 to 1,024) and at d 50 (FedAvg, KTEPS, FedPer)
#   profile     profile_round.py at d 200 and d 50: the top device operations of one round
#   population  population_speed.py (FedAvg and KTEPS; members 1, 4, 16)
#   scale       scale.py: donated or not, M = 16, 64, 256; the most clients in $MEMORY_GB
#   fdu         with the FDU corpus in $FDU_DIR: two real FedAvg rounds at the paper's shapes
#               (16 clients, d 200 random vectors: --embeddings needs no download)
#   essentials  the figures that matter most, for a short lease (one call of ~6 minutes):
#               the device, then at d 200 in float32 the vmapped round against the one-client
#               jit loop and PyTorch's cuDNN loop (the headline ratio), the profile's top
#               operations, and FedAvg at d 50 against PyTorch
# A stage's commands share a budget of $STAGE_S seconds (default 540; a command gets what is
# left of it under `timeout`), so one call of at most 10 minutes can run a single stage:
#   PYTHONPATH=$PWD OUT=$OUT bash benchmarks/accelerator.sh devices speed
#   PYTHONPATH=$PWD OUT=$OUT FDU_DIR=data/fdu-mtl bash benchmarks/accelerator.sh profile fdu
set -u
OUT=${OUT:-benchmarks-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
STAGE_S=${STAGE_S:-540}
# JAX takes 75% of the GPU at start by default; PyTorch's loop shares the device in `speed`
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
run() {
  name=$1; shift
  echo "== $name: $*"
  start=$(date +%s)
  left=$(( STAGE_S - (start - stage_start) ))
  [ "$left" -lt 1 ] && { echo "   skipped: the stage's $STAGE_S s are spent"; return; }
  timeout "$left" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  echo "   rc $rc, $(( $(date +%s) - start )) s"
  tail -n 4 "$OUT/$name.txt"
}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(devices speed profile population scale fdu)
for stage in "${stages[@]}"; do
  stage_start=$(date +%s)
  case $stage in
    devices)
      run devices "$PY" -c "import jax; print('jax', jax.__version__, jax.devices())
try:
    import torch; print('torch', torch.__version__, torch.cuda.is_available()
                        and torch.cuda.get_device_name())
except ImportError:
    print('no torch')" ;;
    speed)
      run round_speed_d200 "$PY" benchmarks/round_speed.py --dtype float32 bfloat16 \
          --sweep 16 64 256 1024 --json "$OUT/round_speed_d200.json"
      run round_speed_d50 "$PY" benchmarks/round_speed.py --embed-dim 50 \
          --algorithm fedavg kteps fedper --json "$OUT/round_speed_d50.json" ;;
    profile)
      run profile_d200 "$PY" benchmarks/profile_round.py --trace-dir "$OUT/trace_d200" \
          --json "$OUT/profile_d200.json"
      run profile_d50 "$PY" benchmarks/profile_round.py --embed-dim 50 \
          --trace-dir "$OUT/trace_d50" --json "$OUT/profile_d50.json" ;;
    population)
      run population_fedavg "$PY" benchmarks/population_speed.py --sizes 1 4 16
      run population_kteps "$PY" benchmarks/population_speed.py --algorithm kteps \
          --sizes 1 4 16 ;;
    scale)
      run scale "$PY" benchmarks/scale.py --sampled-list 16 64 256 --rounds 2
      run scale_memory "$PY" benchmarks/scale.py --memory-gb "${MEMORY_GB:-16}" ;;
    fdu)
      if [ -n "${FDU_DIR:-}" ] && [ -d "$FDU_DIR" ]; then
        run fdu_d200 "$PY" -m fedjax_sc.run.cli train --scene fdu --data-dir "$FDU_DIR" \
            --rounds 2 --embed-dim 200 --no-ap --out "$OUT/fdu-d200" --overwrite
      else
        echo "== fdu: skipped (no FDU_DIR)"
      fi ;;
    essentials)
      run devices "$PY" -c "import jax; print('jax', jax.__version__, jax.devices())"
      run essential_speed_d200 "$PY" benchmarks/round_speed.py --dtype float32 \
          --json "$OUT/essential_speed_d200.json"
      run essential_profile_d200 "$PY" benchmarks/profile_round.py \
          --trace-dir "$OUT/trace_d200" --json "$OUT/profile_d200.json"
      run essential_speed_d50 "$PY" benchmarks/round_speed.py --embed-dim 50 --no-loop \
          --json "$OUT/essential_speed_d50.json" ;;
    *) echo "unknown stage $stage (devices speed profile population scale fdu essentials)"
       exit 2 ;;
  esac
done
