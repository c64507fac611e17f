#!/usr/bin/env bash
# Peak memory (max RSS, /usr/bin/time -v) of `shardscope sweep` on grids of
# 10,000, 100,000 and 1,000,000 configurations: flat, since the sweep
# streams (docs/sweep.md, "Size limits and memory"). GPT-2 tiny on 2 ranks;
# the grid is seed (N/20 values) x shard_group_size 1..20, so validation
# rejects 18 of every 20 and 10% are simulated. Every row goes to a CSV
# (--out), which is the output that would hold everything if anything did.
# Prints one line per size; figures are recorded in docs/benchmarks.md.
# Never asserts on time or memory.
#   bench/sweep_memory.sh CLI [THREADS] [SIZES...]   (default 2 threads; 10000 100000 1000000)
set -euo pipefail
cli=${1:?usage: bench/sweep_memory.sh path/to/shardscope [threads] [sizes...]}
threads=${2:-2}
shift $(($# < 2 ? $# : 2))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1000000)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '{"wrap": {"type": "class", "classes": ["GPT2Block"]}, "seq_len": 64}\n' >"$dir/base.json"
printf '%10s %10s %12s %12s %10s %12s\n' configurations simulated "wall s" "configs/s" "max RSS" "CSV bytes"
for n in "${sizes[@]}"; do
  seeds=$((n / 20))
  python3 -c "import json,sys; json.dump({'seed': list(range($seeds)), 'shard_group_size': list(range(1, 21))}, sys.stdout)" >"$dir/grid.json"
  /usr/bin/time -v "$cli" sweep --model gpt2-tiny --world 2 --policy "$dir/base.json" \
    --grid "$dir/grid.json" --threads "$threads" --out "$dir/out.csv" --quiet \
    >"$dir/report.txt" 2>"$dir/time.txt"
  rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.txt")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$dir/time.txt")
  secs=$(python3 -c "p='$wall'.split(':'); print(sum(float(x) * 60 ** i for i, x in enumerate(reversed(p))))")
  printf '%10d %10d %12.1f %12.0f %7.1f MiB %12d\n' "$n" $((n / 10)) "$secs" \
    "$(python3 -c "print($n / max($secs, 1e-9))")" "$(python3 -c "print($rss_kb / 1024)")" \
    "$(stat -c %s "$dir/out.csv")"
done
