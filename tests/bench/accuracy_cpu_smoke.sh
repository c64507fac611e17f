#!/bin/bash
# CI's run of bench/accuracy_cpu (docs/accuracy.md): the whole pipeline on a
# tiny case (--tiny: batch 1, seq 16, 3 steps, 2 runs per policy). It checks that it completes
# and prints every policy's row and the summary, not the accuracy goal (a
# benchmark's figures, recorded in docs/accuracy.md).
set -euo pipefail
bin=$1
out=$("$bin" --tiny)
echo "$out"
fail=0
for row in "fsdp2 " "fsdp1 " "fsdp2 no reshard" "fsdp2 reshard 1" "fsdp2 fwd prefetch 2" \
  "fsdp1 fwd prefetch" "fsdp2 no bwd prefetch" "fsdp2 checkpointing" "fsdp2 bf16" "fsdp1 bf16" \
  "fsdp2 batch x2" "fsdp2 ckpt bf16 batch x2"; do
  # A row: the label, then measured, predicted and a signed error in percent.
  if ! grep -Eq "^${row}[ ]* +[0-9.]+ +[0-9.]+ +[-+][0-9.]+%" <<<"$out"; then
    echo "accuracy_cpu_smoke: no row for '$row'" >&2
    fail=1
  fi
done
grep -Eq "^12 policies: median \|step error\| [0-9.]+%, worst [0-9.]+%; median run-to-run noise \(max - min over the runs\) [0-9.]+%" <<<"$out" ||
  { echo "accuracy_cpu_smoke: no summary line" >&2; fail=1; }
grep -q "calibrated on --measure (6 runs)" <<<"$out" || { echo "accuracy_cpu_smoke: no calibration line" >&2; fail=1; }
exit $fail
