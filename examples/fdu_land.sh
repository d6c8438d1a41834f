#!/bin/bash
# Lands the finished runs of examples/fdu_queue.sh in this checkout's results/fdu/: a paper
# table's new cells through `fedjax-sc results export` and `results render` (its table, heatmap
# and convergence figure), a method beyond the paper as its small files in
# results/fdu/beyond-50-rounds/METHOD[-seedS]/, then that folder's table.md and convergence
# figure anew (examples/beyond_table.py, against the committed FedAvg, FedPer and KTEPS seed-0
# runs). A run already in results/ with its report is left as it is; an unfinished one is not
# touched, unless UNFINISHED=1: then a table's unfinished cells are exported too (their rounds
# so far; the table shows "unfinished: round N/50"), and an unfinished method beyond the paper
# as its config.json and metrics.jsonl (no report: no table reads it until it finishes and
# lands whole), so a sitting's progress lands even where the machine and its run folders may
# not outlive it; a run begun again on a new machine is exported only once it is past the
# rounds committed. Prints what it landed; results/fdu/
# beyond.md's prose is written by hand.
#
#   bash examples/fdu_land.sh && git status --short results/
#   UNFINISHED=1 bash examples/fdu_land.sh      # at the end of a sitting, a run still going
#
# OUT (default ~/fedjax_runs) and PYTHON (default /work/main/.venv/bin/python) may be set.
set -eu
cd "$(dirname "$0")/.."
R=${OUT:-$HOME/fedjax_runs}
PY=${PYTHON:-/work/main/.venv/bin/python}
F="env PYTHONPATH=$PWD $PY -m fedjax_sc.run.cli"
# rounds FILE: the round lines of a metrics.jsonl (0 where there is none)
rounds() { if [ -f "$1" ]; then grep -c '"phase": "round"' "$1" || true; else echo 0; fi; }
for t in table4 table8 table7; do
  cells=""
  for metrics in "$R/reproduce-$t"/fdu/*/seed-0/metrics.jsonl; do
    [ -f "$metrics" ] || continue
    run=$(dirname "$metrics")
    cell=$(basename "$(dirname "$run")")
    [ -f "results/fdu/$t/$cell-seed0/report.json" ] && continue
    if [ -f "$run/report.json" ]; then cells="$cells $cell"
    elif [ "${UNFINISHED:-0}" = 1 ]; then
      # a run begun again (its machine lost) is not exported over the more rounds committed
      if [ "$(rounds "$metrics")" -gt "$(rounds "results/fdu/$t/$cell-seed0/metrics.jsonl")" ]
      then cells="$cells $cell"
      else echo "$cell: $(rounds "$metrics") rounds, not past the committed ones; kept"; fi
    fi
  done
  if [ -n "$cells" ]; then
    $F results export --table $t --scene fdu --store "$R/reproduce-$t" --methods $cells
    $F results render --table $t --scene fdu > /dev/null
    echo "results/fdu/$t.md rendered anew"
  fi
done

B=results/fdu/beyond-50-rounds
new=""
for report in "$R"/beyond50/*/report.json; do
  [ -f "$report" ] || continue
  run=$(dirname "$report")
  dest="$B/$(basename "$run")"
  [ -f "$dest/report.json" ] && continue
  rm -rf "$dest" && mkdir -p "$dest"  # a partial export of the same run, replaced
  for f in config.json metrics.jsonl report.json report.md test_hits.json convergence.png; do
    if [ -f "$run/$f" ]; then cp "$run/$f" "$dest/"; fi
  done
  echo "$(basename "$run"): landed in $dest"
  new=1
done
if [ "${UNFINISHED:-0}" = 1 ]; then
  for metrics in "$R"/beyond50/*/metrics.jsonl; do
    [ -f "$metrics" ] || continue  # no run folder: the pattern itself
    run=$(dirname "$metrics")
    dest="$B/$(basename "$run")"
    [ -f "$run/report.json" ] || [ -f "$dest/report.json" ] && continue
    if [ "$(rounds "$metrics")" -le "$(rounds "$dest/metrics.jsonl")" ]; then
      echo "$(basename "$run"): $(rounds "$metrics") rounds, not past the committed ones; kept"
      continue
    fi
    mkdir -p "$dest" && cp "$run/config.json" "$metrics" "$dest/"
    echo "$(basename "$run"): unfinished, its rounds so far in $dest"
  done
fi
if [ -n "$new" ]; then
  methods="fedavg fedper kteps"
  for m in scaffold ditto feddyn fedrod fedbabu fedrep apfl moon per_fedavg pfedme; do
    if [ -f "$B/$m/report.json" ]; then methods="$methods $m"; fi
  done
  T=results/fdu/table3
  seeds=""  # FedAvg's and KTEPS's seeds 1-2, for the over-seeds table of beyond_table.py
  for m in fedavg kteps; do for s in 1 2; do seeds="$seeds --run $m-seed$s=$T/$m-seed$s"; done; done
  $PY examples/beyond_table.py $B --run fedavg=$T/fedavg-seed0 --run fedper=$T/fedper-seed0 \
    --run kteps=$T/kteps-seed0 $seeds --reference fedavg kteps --methods $methods \
    --figure $B/convergence.png > $B/table.md.new
  mv $B/table.md.new $B/table.md
  echo "$B/table.md and convergence.png written anew"
fi
