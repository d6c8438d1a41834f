# The 50-round runs of results/fdu/beyond.md by folder name, in one place for the CPU's lane
# (examples/fdu_queue.sh) and the device's campaign (examples/gpu_campaign.sh), which source it.
# A folder is METHOD (seed 0) or METHOD-seedS; each method trains at its authors' defaults and
# the paper's shared settings, with two departures written here:
#   fedrep             25 head steps a round (the short grid of results/fdu/beyond.md)
#   apfl-fixed-alpha   APFL with alpha fixed at 0.5, its authors' README command (the learned
#                      alpha went to 1 on every client: results/fdu/beyond.md)

# beyond_run DIR: prints "METHOD SEED [FLAG ...]", the `fedjax-sc train` settings of the run
# that folder DIR holds; a DIR that is not a folder name (empty, a slash, a leading or doubled
# dash) is one line on stderr and status 2
beyond_run() {
  local dir=$1 m=$1 s=0
  if [[ ! "$dir" =~ ^[A-Za-z0-9_]+(-[A-Za-z0-9_]+)*$ ]]; then
    echo "beyond_run: '$dir' is not a run folder's name (METHOD or METHOD-seedS)" >&2
    return 2
  fi
  if [[ "$dir" =~ ^(.+)-seed([0-9]+)$ ]]; then m=${BASH_REMATCH[1]}; s=${BASH_REMATCH[2]}; fi
  case $m in
    fedrep) echo "$m $s --rep-head-steps 25" ;;
    apfl-fixed-alpha) echo "apfl $s --apfl-alpha-lr 0" ;;
    *) echo "$m $s" ;;
  esac
}
