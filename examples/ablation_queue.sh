#!/bin/bash
# The paper's ablations on FDU-MTL, in order, as background runs that resume where they
# stopped (rerun this script; a finished step is skipped): the HSIC-normalisation experiment's
# 10-round populations, Table 4's lambda1 = lambda2 = 0 cell for 10 rounds, the whole-table
# KTEPS* bands and the row-wise ones for 10 rounds, then Table 4's first two cells at the
# paper's 50 rounds (seed 0) with the Ap-length and decayed-LR experiments after its default
# cell. docs/results.md reads them; examples/fdu_queue.sh trains the tables' other cells.
#
#   git clone . ~/fedjax_runs/queue-code   # run from a clone: edits to the work tree
#   cd ~/fedjax_runs/queue-code             # must not reach a run that is going
#   nohup setsid bash examples/ablation_queue.sh > ~/fedjax_runs/queue.out 2>&1 &
#
# FDU_DIR (default /work/shared/data/fdu-mtl), OUT (default ~/fedjax_runs) and FEDJAX_SC (the
# command, default: this checkout's code with the venv of /work/main) may be set.
set -u
# nice alone does not yield to the foreground when the script runs in a session of its own
# (setsid): Linux shares the CPU between sessions' autogroups first; lower this one's weight
echo 19 > /proc/self/autogroup 2>/dev/null || true
FDU_DIR=${FDU_DIR:-/work/shared/data/fdu-mtl}
R=${OUT:-$HOME/fedjax_runs}
F=${FEDJAX_SC:-"env PYTHONPATH=$PWD /work/main/.venv/bin/python -m fedjax_sc.run.cli"}
mkdir -p "$R/logs"
DATA="--scene fdu --data-dir $FDU_DIR --embeddings glove-6b-50d"
step() {  # step NAME OUTDIR ARGS...   (train steps get --resume when OUTDIR exists)
  local name=$1 out=$2; shift 2
  [ -f "$R/done-$name" ] && return
  local extra=""
  if [ "$1" = train ] && [ -e "$out" ]; then extra="--resume"; fi
  echo "$(date -u +%FT%TZ) start $name" >> "$R/queue.log"
  nice -n 10 $F "$@" $extra >> "$R/logs/$name.log" 2>&1
  local rc=$?
  echo "$(date -u +%FT%TZ) end $name rc=$rc" >> "$R/queue.log"
  [ $rc = 0 ] && touch "$R/done-$name"
}
SHORT="--rounds 10 --no-ap"
ROWS="kteps_star_d1-1_d2-38 kteps_star_d1-3_d2-38 kteps_star_d1-6_d2-38"
step hsic-none "$R/exp-hsic-none" train $DATA --algorithm kteps --hsic-normalization none \
  --seeds 0 --grid lambda_div=0.01,0.1,1.0 $SHORT --out "$R/exp-hsic-none"
step t4-zero "$R/reproduce-table4" reproduce table4 $DATA --seeds 1 --first-seed 0 $SHORT \
  --no-plots --methods kteps_l1-0_l2-0 --out "$R/reproduce-table4"
# the biased estimator's lambda2 0.1 and 1.0 rows: results/ablations/fdu/hsic-first-look.jsonl
step t7-dense-short "$R/reproduce-dense" reproduce table7 $DATA --dense-embedding --seeds 1 \
  --first-seed 0 $SHORT --no-plots --methods $ROWS --out "$R/reproduce-dense"
step t7-rows-short "$R/reproduce-table7" reproduce table7 $DATA --seeds 1 --first-seed 0 \
  $SHORT --no-plots --methods $ROWS --out "$R/reproduce-table7"
# Table 4's lambda1 = lambda2 = 0 cell and its default cell (Table 2's KTEPS) at 50 rounds, one
# run at a time (--population-size 1): on a CPU a population costs its members in turn, and
# this way each cell lands when it finishes.
ONE="--seeds 1 --first-seed 0 --no-plots --population-size 1"
step t4-first "$R/reproduce-table4" reproduce table4 $DATA $ONE \
  --methods kteps_l1-0_l2-0 kteps --out "$R/reproduce-table4"
# The Ap phase's length (Table 5's cliff at mu = 1): the default cell's seed-0 model
# fine-tuned 25 x 200 steps (about 25 epochs of a client) at mu = 0.01 and 1, one program.
B="$R/reproduce-table4/fdu/kteps/seed-0"
if [ -f "$B/report.json" ]; then  # its rounds copied into each member's folder
  step ap-length "$R/exp-ap-length" train --from-run "$B" --grid ap_lr_mult=0.01,1 \
    --seeds 0 --ap-steps 200 --out "$R/exp-ap-length"
fi
# The decayed aggregation LR (Table 5's cliff at mu = 1, the second reading; the Ap phase's
# length alone left Ap_t at mu = 1 within 84.6-85.2 over 5,000 steps): KTEPS trained with its
# LR decayed tenfold over the 50 rounds (x 0.955 a round), Ap at mu = 0.01, 0.1 and 1 (the
# members differ only in mu: one training, three Ap phases).
step lr-decay "$R/exp-lr-decay" train $DATA --algorithm kteps --lr-schedule exponential:0.955 \
  --grid ap_lr_mult=0.01,0.1,1 --seeds 0 --out "$R/exp-lr-decay"
# The tables' other 50-round cells: examples/fdu_queue.sh ablations (it skips the cells whose
# runs are in results/ already, so it goes on where a machine without these run folders left
# off).
