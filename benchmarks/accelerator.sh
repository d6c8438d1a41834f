#!/usr/bin/env bash
# Every speed and memory figure of docs/benchmarks.md on the device JAX sees, in one call
# (one start of a lent GPU/TPU machine), logs under $OUT (default: benchmarks-out/):
#   the device; round_speed.py at d 200 (f32 and bf16, the one-client loop, PyTorch on CUDA,
#   the 16/64/256 sweep) and at d 50; scale.py (donated vs not, M = 16, 64, 256) and the most
#   clients per round in --memory-gb; and, with the FDU corpus in $FDU_DIR, two rounds of
#   FedAvg at the paper's shapes (16 clients, d 200).
#
#   PYTHONPATH=$PWD OUT=$OUT FDU_DIR=data/fdu-mtl MEMORY_GB=70 bash benchmarks/accelerator.sh
set -u
OUT=${OUT:-benchmarks-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
run() { name=$1; shift; echo "== $name: $*"; "$@" > "$OUT/$name.txt" 2>&1; tail -n 3 "$OUT/$name.txt"; }
run devices "$PY" -c "import jax; print(jax.__version__, jax.devices())"
run round_speed_d200 "$PY" benchmarks/round_speed.py --dtype float32 bfloat16
run round_speed_d50 "$PY" benchmarks/round_speed.py --embed-dim 50 --algorithm fedavg kteps fedper
run scale "$PY" benchmarks/scale.py --sampled-list 16 64 256 --rounds 2
run scale_memory "$PY" benchmarks/scale.py --memory-gb "${MEMORY_GB:-16}"
if [ -n "${FDU_DIR:-}" ] && [ -d "$FDU_DIR" ]; then
  run fdu_d200 "$PY" -m fedjax_sc.run.cli train --scene fdu --data-dir "$FDU_DIR" --rounds 2 \
      --no-ap --out "$OUT/fdu-d200"
fi
