#!/usr/bin/env bash
# Start-up memory of the `shardscope` command: the maximum resident set size
# (/usr/bin/time -v, "Maximum resident set size") of commands that need no
# GPU, which must not pay for the CUDA libraries (engine/cuda_module.h).
# Prints figures only; docs/benchmarks.md records them against the targets
# (--help <= 30 MB, report on a small trace <= 60 MB).
#
#   bash bench/startup_memory.sh [SHARDSCOPE] [REPEATS]
#
# SHARDSCOPE: the binary (default build/release/cli/shardscope); REPEATS: runs
# of each command (default 5), the median printed. Also prints the binary's
# NEEDED CUDA libraries (readelf -d) so that a figure can be told apart.
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=${1:-build/release/cli/shardscope}
REPEATS=${2:-5}
[ -x "$CLI" ] || {
  echo "startup_memory: no executable $CLI (argument 1)" >&2
  exit 2
}
[ -x /usr/bin/time ] || {
  echo "startup_memory: needs /usr/bin/time (GNU time, Debian package 'time')" >&2
  exit 2
}

SMALL=tests/traces/fixtures/kineto_rank0.json   # 9 KB Kineto trace (the target's "small trace")
LARGER=tests/traces/fixtures/gloo_cpu_rank0.json # 136 KB Kineto trace of a PyTorch CPU run

# max_rss_kib ARGS...: the median over REPEATS runs of the command's max RSS (KiB).
TIMES=$(mktemp /tmp/shardscope-startup.XXXXXX)
trap 'rm -f "$TIMES"' EXIT
max_rss_kib() {
  local i
  for ((i = 0; i < REPEATS; i++)); do
    if ! /usr/bin/time -v -o "$TIMES" "$CLI" "$@" >/dev/null 2>&1; then
      echo "startup_memory: '$CLI $*' failed" >&2
      echo nan
      continue
    fi
    sed -n 's/^.*Maximum resident set size (kbytes): *//p' "$TIMES"
  done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

row() {
  local label=$1
  shift
  local kib
  kib=$(max_rss_kib "$@")
  printf '%-44s %8.1f MB\n' "$label" "$(awk -v k="$kib" 'BEGIN {print k / 1024}')"
}

echo "binary: $CLI"
needed=$(readelf -d "$CLI" | sed -n 's/^.*(NEEDED).*\[\(.*\)\]$/\1/p' |
  grep -E '^lib(cublas|cudart|cupti|nccl|cuda)' | tr '\n' ' ' || true)
echo "NEEDED CUDA libraries: ${needed:-none}"
echo "max RSS, median of $REPEATS runs (/usr/bin/time -v):"
row "shardscope --help" --help
row "shardscope report $(basename "$SMALL")" report "$SMALL"
row "shardscope report $(basename "$LARGER")" report "$LARGER"
row "shardscope plan --model gpt2-small" plan --model gpt2-small
