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
#   smoke       the device, versions, and the round at tiny shapes (FedAvg and FedDyn, the
#               one-client loop, PyTorch): does the code run on this machine?
#   headline    d 200 float32 and bfloat16 against the one-client jit loop and PyTorch's cuDNN
#               loop, clients per round 16 to 1,024 (3/4 of $STAGE_S), then the profile's top
#               device operations; packed into $OUT/headline.tar.gz (the device tool brings
#               back at most 8 files)
#   more        populations of 1, 4, 16 members against the members in turn; d 50 FedAvg,
#               KTEPS and FedDyn (client state); with $FDU_DIR, three real FDU rounds at d 50
#               ($GLOVE's vectors, else random) and d 200; packed into $OUT/more.tar.gz
#               A short lease: `smoke headline` in one call, `more` in the next (STAGE_S=280)
# TINY=1 appends tiny shapes to every command (the scale stage's memory search left out): a
# dry run of any stage on a CPU in minutes.
# A stage's commands share a budget of $STAGE_S seconds (default 540; a command gets what is
# left of it under `timeout`), so one call of at most 10 minutes can run a single stage:
#   PYTHONPATH=$PWD OUT=$OUT bash benchmarks/accelerator.sh devices speed
#   PYTHONPATH=$PWD OUT=$OUT FDU_DIR=data/fdu-mtl bash benchmarks/accelerator.sh profile fdu
set -u
# a corpus or vector file named but absent is an error, not a quiet fall-back to random rows
for named in FDU_DIR GLOVE; do
  if [ -n "${!named:-}" ] && [ ! -e "${!named}" ]; then
    echo "benchmarks/accelerator.sh: $named=${!named}: no such file or folder" >&2
    exit 2
  fi
done
OUT=${OUT:-benchmarks-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
STAGE_S=${STAGE_S:-540}
# JAX takes 75% of the GPU at start by default; PyTorch's loop shares the device in `speed`
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
TINY_SPEED=()
TINY_PROFILE=()
TINY_POP=()
TINY_TRAIN=()
TINY_SCALE=()
if [ "${TINY:-0}" = 1 ]; then
  TINY_PROFILE=(--clients 2 --examples 8 --max-len 16 --embed-dim 8 --hidden 8 --mlp-hidden 8
                --vocab 300 --local-vocab 50 --rounds 1)
  TINY_SPEED=("${TINY_PROFILE[@]}" --torch-steps 2)
  TINY_POP=(--clients 2 --examples 8 --max-len 16 --vocab 300 --local-vocab 50 --embed-dim 8
            --hidden 8 --rounds 1)
  TINY_TRAIN=(--domains books dvd --max-len 16 --vocab-size 2000 --hidden 8 --mlp-hidden 8)
  TINY_SCALE=(--clients 8 --examples 8 --max-len 16 --embed-dim 8 --hidden 8 --mlp-hidden 8
              --vocab 300 --local-vocab 50)
fi
export PYTHONUNBUFFERED=1
# run NAME CMD...: CMD's output to $OUT/NAME.txt, under `timeout` of what is left of the stage
# (at most $LIMIT seconds where LIMIT is set)
run() {
  name=$1; shift
  echo "== $name: $*"
  start=$(date +%s)
  left=$(( STAGE_S - (start - stage_start) ))
  [ -n "${LIMIT:-}" ] && [ "$LIMIT" -lt "$left" ] && left=$LIMIT
  [ "$left" -lt 1 ] && { echo "   skipped: the stage's $STAGE_S s are spent"; return; }
  timeout "$left" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  echo "   rc $rc, $(( $(date +%s) - start )) s"
  tail -n 4 "$OUT/$name.txt"
}
# pack NAME: all of $OUT (no checkpoints) into $OUT/NAME.tar.gz: the device tool returns few files
pack() {
  tar -czf "/tmp/$1.tar.gz" -C "$OUT" --exclude checkpoints --exclude vocab.json \
      --exclude "*.tar.gz" . && mv "/tmp/$1.tar.gz" "$OUT/$1.tar.gz"
}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(devices speed profile population scale fdu)
S=("${TINY_SPEED[@]}")
R=("${TINY_PROFILE[@]}")
P=("${TINY_POP[@]}")
T=("${TINY_TRAIN[@]}")
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
          --sweep 16 64 256 1024 --json "$OUT/round_speed_d200.json" "${S[@]}"
      run round_speed_d50 "$PY" benchmarks/round_speed.py --embed-dim 50 \
          --algorithm fedavg kteps fedper --json "$OUT/round_speed_d50.json" "${S[@]}" ;;
    profile)
      run profile_d200 "$PY" benchmarks/profile_round.py --trace-dir "$OUT/trace_d200" \
          --json "$OUT/profile_d200.json" "${R[@]}"
      run profile_d50 "$PY" benchmarks/profile_round.py --embed-dim 50 \
          --trace-dir "$OUT/trace_d50" --json "$OUT/profile_d50.json" "${R[@]}" ;;
    population)
      run population_fedavg "$PY" benchmarks/population_speed.py --sizes 1 4 16 "${P[@]}"
      run population_kteps "$PY" benchmarks/population_speed.py --algorithm kteps \
          --sizes 1 4 16 "${P[@]}" ;;
    scale)
      if [ "${TINY:-0}" = 1 ]; then  # the memory search grows M until the memory is full
        run scale "$PY" benchmarks/scale.py --sampled-list 2 4 --rounds 1 "${TINY_SCALE[@]}"
        echo "== scale_memory: left out under TINY=1 (it fills \$MEMORY_GB whatever the shapes)"
      else
        run scale "$PY" benchmarks/scale.py --sampled-list 16 64 256 --rounds 2
        run scale_memory "$PY" benchmarks/scale.py --memory-gb "${MEMORY_GB:-16}"
      fi ;;
    fdu)
      if [ -n "${FDU_DIR:-}" ] && [ -d "$FDU_DIR" ]; then
        run fdu_d200 "$PY" -m fedjax_sc.run.cli train --scene fdu --data-dir "$FDU_DIR" \
            --rounds 2 --embed-dim 200 --no-ap --out "$OUT/fdu-d200" --overwrite "${T[@]}"
      else
        echo "== fdu: skipped (no FDU_DIR)"
      fi ;;
    smoke)  # the device and versions, then the round at tiny shapes: does the code run here?
      run devices bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm \
--format=csv 2>&1; $PY -c \"import jax, flax, optax; print('jax', jax.__version__, 'flax', \
flax.__version__, 'optax', optax.__version__, jax.devices())
try:
    import torch; print('torch', torch.__version__, torch.cuda.is_available() and
                        torch.cuda.get_device_name())
except ImportError:
    print('no torch')\""
      LIMIT=90 run smoke "$PY" benchmarks/round_speed.py --clients 2 --examples 8 --max-len 16 \
          --embed-dim 8 --hidden 8 --mlp-hidden 8 --vocab 300 --local-vocab 50 --rounds 1 \
          --torch-steps 2 --algorithm fedavg feddyn --sweep 4 ;;
    headline)  # d 200 f32 and bf16, the one-client loop, PyTorch, M 16-1,024; the profile
      LIMIT=$(( STAGE_S * 3 / 4 )) run round_speed_d200 "$PY" benchmarks/round_speed.py \
          --dtype float32 bfloat16 --sweep 16 64 256 1024 --json "$OUT/round_speed_d200.json" \
          "${S[@]}"
      run profile_d200 "$PY" benchmarks/profile_round.py --top 15 \
          --trace-dir "$OUT/trace_d200" --json "$OUT/profile_d200.json" "${R[@]}"
      pack headline ;;
    more)  # populations, d 50 with client state, real FDU rounds
      LIMIT=$(( STAGE_S * 3 / 10 )) run population_fedavg "$PY" benchmarks/population_speed.py \
          --sizes 1 4 16 --axes vmap "${P[@]}"
      LIMIT=$(( STAGE_S / 4 )) run round_speed_d50 "$PY" benchmarks/round_speed.py \
          --embed-dim 50 --no-loop --algorithm fedavg kteps feddyn \
          --json "$OUT/round_speed_d50.json" "${S[@]}"
      if [ -n "${FDU_DIR:-}" ] && [ -d "$FDU_DIR" ]; then
        emb=(--embeddings random --embed-dim 50)
        [ -n "${GLOVE:-}" ] && [ -f "$GLOVE" ] && emb=(--embeddings "$GLOVE")
        LIMIT=$(( STAGE_S / 5 )) run fdu_d50 "$PY" -m fedjax_sc.run.cli train --scene fdu \
            --data-dir "$FDU_DIR" --rounds 3 "${emb[@]}" --no-ap --out "$OUT/fdu-d50" \
            --overwrite "${T[@]}"
        run fdu_d200 "$PY" -m fedjax_sc.run.cli train --scene fdu --data-dir "$FDU_DIR" \
            --rounds 3 --embed-dim 200 --no-ap --out "$OUT/fdu-d200" --overwrite "${T[@]}"
      else
        echo "== fdu: skipped (no FDU_DIR)"
      fi
      pack more ;;
    *) echo "unknown stage $stage (devices speed profile population scale fdu smoke headline more)"
       exit 2 ;;
  esac
done
