#!/bin/bash
# The 50-round FDU-MTL runs that results/fdu/ still lacks, as one background lane each:
#
#   bash examples/fdu_queue.sh ablations   # Table 4, Table 8's A and B, Table 7, Table 8's C
#   bash examples/fdu_queue.sh beyond      # the methods beyond the paper, seeds 1-2 of the best,
#                                          # then Per-FedAvg, pFedMe and APFL with alpha fixed
#   bash examples/fdu_queue.sh ablations --list   # what it would train, in order, and stop
#
# A run is done when its folder in results/ (this checkout's: RESULTS) holds a report.json, or
# when its run folder under OUT does (finished, not landed yet: examples/fdu_land.sh lands it);
# a run folder without one is resumed (--resume), and such unfinished runs go first. Runs go one
# at a time, so each lands when it finishes; a run another lane is training (its lock under
# OUT/locks) is skipped, never trained twice at once. UNTIL (a date, e.g. UNTIL="today 12:00")
# stops the lane before a run that would not finish by then at EST_S seconds a run (default
# 9000: 50 rounds at 150-200 s on a 2-core machine, alone, and the Ap phase): on a machine whose
# run folders are lost with it, a run started too late is lost work (two lanes side by
# side took about 200 s a round each: 2.8 hours a run). SEEDS_OF names the methods whose seeds
# 1-2 the beyond lane trains after the seed 0 of every method but the two costliest (default:
# feddyn and scaffold, the methods beyond the paper within 0.5 points of the best Ag or Ap at
# the time of writing; results/fdu/beyond.md).
#
#   git clone -q . ~/fedjax_runs/lane-code && cd ~/fedjax_runs/lane-code   # a snapshot: edits
#   nohup setsid bash examples/fdu_queue.sh beyond > ~/fedjax_runs/beyond.out 2>&1 &  # to the
#                                                           # work tree never reach a running lane
#
# Two lanes of one kind may run side by side (each run is locked under OUT/locks while it
# trains; a lane skips a run another holds), e.g. two of Table 8's cells at once:
#
#   for i in 1 2; do nohup setsid bash examples/fdu_queue.sh ablations \
#       >> ~/fedjax_runs/ablations-$i.out 2>&1 < /dev/null & sleep 5; done
#
# ONLY (names as --list prints them, e.g. ONLY="beyond-feddyn-seed1") trains just those runs,
# in the lane's order: a run that fits the time left goes alone, ahead of a longer one begun.
#
# FDU_DIR (default /work/shared/data/fdu-mtl), OUT (default ~/fedjax_runs), RESULTS (default
# results/fdu/ of the folder it runs in: the folder holding table4/, beyond-50-rounds/, ...) and
# FEDJAX_SC (the command; default this checkout's code with the
# venv of /work/main) may be set.
set -u
lane=${1:?usage: fdu_queue.sh ablations|beyond [--list]}
list=${2:-}
# nice alone does not yield to the foreground when the script runs in a session of its own
# (setsid): Linux shares the CPU between sessions' autogroups first; lower this one's weight
echo 19 > /proc/self/autogroup 2>/dev/null || true
FDU_DIR=${FDU_DIR:-/work/shared/data/fdu-mtl}
R=${OUT:-$HOME/fedjax_runs}
RESULTS=${RESULTS:-$PWD/results/fdu}
F=${FEDJAX_SC:-"env PYTHONPATH=$PWD /work/main/.venv/bin/python -m fedjax_sc.run.cli"}
EST_S=${EST_S:-9000}
DATA="--scene fdu --data-dir $FDU_DIR --embeddings glove-6b-50d"
ONE="--seeds 1 --first-seed 0 --no-plots --population-size 1"
mkdir -p "$R/logs" "$R/locks"

# run NAME DONE_IN RUN_FOLDER ARGS...: one run, unless it is done (in the first pass, only a
# run whose folder exists: a lane finishes what it began before it starts anything new)
run() {
  local name=$1 landed=$2 folder=$3; shift 3
  if [ -f "$landed/report.json" ] || [ -f "$folder/report.json" ]; then return; fi
  if [ "$pass" = resume ] && [ ! -e "$folder" ]; then return; fi
  if [ -n "${seen[$name]:-}" ]; then return; fi  # once a lane (a failed run is not retried)
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  seen[$name]=1
  if [ -n "$list" ]; then echo "$name"; return; fi
  # one lane a run: a run another lane holds (a second lane of the same kind, or one left
  # running from an earlier sitting on a machine that outlived it) is left to that lane
  local lock
  exec {lock}> "$R/locks/$name.lock"
  if ! flock -n "$lock"; then
    echo "$(date -u +%FT%TZ) $lane: $name is held by another lane; next" >> "$R/queue.log"
    exec {lock}>&-
    return
  fi
  if [ -n "${UNTIL:-}" ] && [ $(( $(date +%s) + EST_S )) -gt "$(date -d "$UNTIL" +%s)" ]; then
    echo "$(date -u +%FT%TZ) $lane: $name would not finish by $UNTIL; stopped" >> "$R/queue.log"
    exit 0
  fi
  local extra=""
  if [ "$1" = train ] && [ -e "$folder" ]; then extra="--resume"; fi
  echo "$(date -u +%FT%TZ) start $name" >> "$R/queue.log"
  nice -n 10 $F "$@" $extra >> "$R/logs/$name.log" 2>&1
  echo "$(date -u +%FT%TZ) end $name rc=$?" >> "$R/queue.log"
  exec {lock}>&-
}

# cell TABLE NAME: one cell of a paper table (reproduce resumes a cell's unfinished run itself)
cell() {
  run "$1-$2" "$RESULTS/$1/$2-seed0" "$R/reproduce-$1/fdu/$2/seed-0" \
    reproduce "$1" $DATA $ONE --methods "$2" --out "$R/reproduce-$1"
}

# beyond DIR: a method beyond the paper in its own folder, with the settings that
# examples/beyond_runs.sh gives that folder (METHOD or METHOD-seedS)
. "$(dirname "$0")/beyond_runs.sh"
beyond() {
  local dir=$1 settings parts
  settings=$(beyond_run "$dir") || exit 2
  read -ra parts <<< "$settings"
  run "beyond-$dir" "$RESULTS/beyond-50-rounds/$dir" "$R/beyond50/$dir" \
    train $DATA --algorithm "${parts[0]}" --seed "${parts[1]}" --out "$R/beyond50/$dir" \
    "${parts[@]:2}"
}

declare -A seen
for pass in resume all; do
case $lane in
  # cheapest first within a lane, so that a sitting whose machine keeps no run folder lands
  # what fits in it: Table 8's architectures A and B and Table 7's KTEPS* cost about a KTEPS
  # round (arch_a_l1-0: 155 s, arch_b_l1-0: 170 s beside a second run; on a later machine A
  # 114 s and B 215 s beside each other, so A's cells go first), architecture C 174 s in its
  # first ten rounds (results/fdu/table8.md); beyond the paper, Per-FedAvg (113 s alone, MOON
  # 163 s on that machine) and pFedMe (2.1x FedAvg's round on the 10-round slice,
  # results/fdu/beyond-slice-10-rounds; 866-1,379 s a round beside C in rounds 1-4), after the other
  # methods' seeds
  ablations)
    for c in kteps_l1-0_l2-0 kteps_l1-0_l2-0.001 kteps_l1-0_l2-0.01 kteps_l1-0.001_l2-0 \
        kteps_l1-0.001_l2-0.001 kteps_l1-0.001_l2-0.01 kteps_l1-0.01_l2-0 \
        kteps_l1-0.01_l2-0.001 kteps; do cell table4 $c; done
    for a in a b; do
      for l in 0 0.001 0.01 0.1; do cell table8 "arch_${a}_l1-$l"; done
    done
    for d2 in 50 38; do
      for d1 in 1 2 3 6; do
        c="kteps_star_d1-${d1}_d2-$d2"; [ "$c" = kteps_star_d1-2_d2-38 ] && c=kteps_star
        cell table7 $c
      done
    done
    for l in 0 0.001 0.01 0.1; do cell table8 "arch_c_l1-$l"; done ;;
  beyond)
    for m in scaffold ditto feddyn fedrod fedbabu fedrep apfl moon; do beyond $m; done
    for m in ${SEEDS_OF:-feddyn scaffold}; do
      for s in 1 2; do beyond "$m-seed$s"; done
    done
    for d in per_fedavg pfedme apfl-fixed-alpha; do beyond $d; done ;;
  *) echo "fdu_queue.sh: unknown lane '$lane' (ablations or beyond)" >&2; exit 2 ;;
esac
done
