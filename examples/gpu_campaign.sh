#!/usr/bin/env bash
# The 50-round runs of results/fdu/ on a lent accelerator, where one FDU-MTL run takes minutes
# instead of the CPU's two to three hours: the paper's ablation tables as populations (the
# cells of one algorithm share one compiled program) and the methods beyond the paper, one
# run each. The runs go to $WORK (default /tmp/campaign); at the end their small files (no
# checkpoints, no vocabularies) and the logs are packed into $OUT/campaign.tar.gz (the device
# tool brings back few files) and the logs' last lines printed.
#
# Prepare on the CPU: `bash benchmarks/gpu_carry.sh` (carry/: the corpus, and its vocabulary's
# GloVe 6B 50d rows as a gzipped word-vector file, which gives the same initial table as
# --embeddings glove-6b-50d). On the device (carry: ["carry"]), one call per step or two:
#   PYTHONPATH=$PWD OUT=$OUT STEP_S=540 bash examples/gpu_campaign.sh table8
#   PYTHONPATH=$PWD OUT=$OUT bash examples/gpu_campaign.sh \
#       table4:kteps_l1-0_l2-0.001,kteps_l1-0.001_l2-0 beyond:ditto,fedrep
# Steps: TABLE (every cell of table4, table7 or table8), TABLE:RUN,RUN (those cells: the run
# names of `fedjax-sc reproduce`), beyond:DIR,DIR (the runs of results/fdu/beyond.md by
# folder: METHOD, METHOD-seedS or METHOD@S, apfl-fixed-alpha; `train` with the settings that
# examples/beyond_runs.sh gives each folder; folders beyond50/DIR), lr-decay (docs/results.md's
# decayed-LR experiment on Table 5's cliff: KTEPS, LR decayed tenfold over the rounds, Ap at
# mu 0.01, 0.1 and 1; folder exp-lr-decay).
# Each reproduce step, and each method of a beyond step, is one job; PARALLEL=N runs N jobs
# at once, which does not pay: seven side by side on an H200 each ran about seven times
# slower than alone, the GPU shared in turn (docs/benchmarks.md), so keep the default 1 and
# name the most wanted steps first: each finished job comes back whole. A job gets what
# is left of $STEP_S seconds (default 540) under `timeout`; an interrupted population brings
# back its metrics so far. Land the runs on the CPU with examples/land_device_runs.py
# (docs/reproducing.md).
# TINY=1: 1 round at tiny shapes on two domains, a dry run on a CPU in minutes.
set -u
. "$(dirname "$0")/beyond_runs.sh"  # the beyond runs' settings by folder
OUT=${OUT:-campaign-out}
WORK=${WORK:-/tmp/campaign}
PY=${PYTHON:-python3}
STEP_S=${STEP_S:-540}
FDU_DIR=${FDU_DIR:-carry/fdu-mtl}
GLOVE=${GLOVE:-carry/fdu-glove50.txt.gz}
POP=${POP:-16}
PARALLEL=${PARALLEL:-1}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
mkdir -p "$OUT" "$WORK"
DATA=(--scene fdu --data-dir "$FDU_DIR" --embeddings "$GLOVE")
TINY_ARGS=()
[ "${TINY:-0}" = 1 ] && TINY_ARGS=(--rounds 1 --domains books dvd --max-len 16
  --vocab-size 2000 --hidden 8 --mlp-hidden 8 --ap-evals 1 --ap-steps 2)
# job TAG CMD...: CMD under `timeout` of what is left of $STEP_S, its output in $WORK/TAG.log
job() {
  local tag=$1; shift
  local left=$(( STEP_S - ($(date +%s) - start) ))
  [ "$left" -lt 30 ] && { echo "== $tag: skipped, the $STEP_S s are spent"; return; }
  echo "== $tag started ($left s left)"
  local t0=$(date +%s)
  timeout "$left" "$@" >> "$WORK/$tag.log" 2>&1
  echo "== $tag: rc $?, $(( $(date +%s) - t0 )) s; $(tail -n 1 "$WORK/$tag.log" | cut -c1-150)"
}
# launch TAG CMD...: a job, in the background with at most $PARALLEL running at once
launch() {
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n; done
  job "$@" &
}
start=$(date +%s)
for step in "$@"; do
  name=${step%%:*}
  list=""; [ "$step" != "$name" ] && list=${step#*:}
  case $name in
    table4|table7|table8)
      methods=(); [ -n "$list" ] && methods=(--methods ${list//,/ })
      tag=$name${list:+-${list//,/-}}
      launch "${tag:0:80}" "$PY" -m fedjax_sc.run.cli reproduce "$name" "${DATA[@]}" \
        --seeds 1 --first-seed 0 --no-plots --population-size "$POP" "${methods[@]}" \
        --out "$WORK/reproduce-$name" "${TINY_ARGS[@]}" ;;
    beyond)
      for ms in ${list//,/ }; do  # a folder (METHOD, METHOD-seedS, apfl-fixed-alpha) or METHOD@S
        dir=$ms; [[ "$ms" == *@* ]] && dir=${ms%@*}-seed${ms#*@}
        settings=$(beyond_run "$dir") || exit 2
        read -ra parts <<< "$settings"; m=${parts[0]}; seed=${parts[1]}
        extra=("${parts[@]:2}")
        [ -f "$WORK/beyond50/$dir/report.json" ] && continue  # finished in an earlier call
        [ -e "$WORK/beyond50/$dir" ] && extra+=(--resume)
        launch "beyond-$dir" "$PY" -m fedjax_sc.run.cli train "${DATA[@]}" --algorithm "$m" \
          --seed "$seed" "${extra[@]}" --out "$WORK/beyond50/$dir" "${TINY_ARGS[@]}"
      done ;;
    lr-decay)
      extra=(); [ -e "$WORK/exp-lr-decay" ] && extra=(--resume)
      launch lr-decay "$PY" -m fedjax_sc.run.cli train "${DATA[@]}" --algorithm kteps \
        --lr-schedule exponential:0.955 --grid ap_lr_mult=0.01,0.1,1 --seeds 0 "${extra[@]}" \
        --out "$WORK/exp-lr-decay" "${TINY_ARGS[@]}" ;;
    *) echo "unknown step $step (table4, table7, table8, beyond:METHOD,..., lr-decay)"; exit 2 ;;
  esac
done
wait
# the small files of every run so far
tar -czf "$OUT/campaign.tar.gz" -C "$WORK" --exclude checkpoints --exclude vocab.json .
ls -la "$OUT"
