#!/usr/bin/env python3
"""Host dispatch per op, read off the host-bound forward of the FSDP2 B = 8 profile (issue 31).

tests/recorded/h200/profile-torch-fsdp2-b8.trace.gz holds kernels, copies and
memsets with their device times, but no host-side records (the injected
CUPTI recorder drops runtime API activity; `export` synthesizes a
cudaLaunchKernel at each kernel's start). So the host's time is read off the
kernels: a kernel that starts after the device idled started when the host
launched it, and the interval between two such starts is the host's time
between the two launches.

Per step after the first (warm-up), the forward is everything before lm_head's
GEMM (the first `align1` kernel). Each GPT-2 block's forward starts with
FSDP2's copy-in (a bfloat16 cast and a device copy per parameter), then
ln_1, c_attn (memset + GEMM), attention (memset + cuDNN SDPA), c_proj, the
residual add, ln_2, c_fc, GELU, the MLP's c_proj, the residual add. Prints
the median over the block forwards of each interval, each op's kernel time,
the phases' device idle, and the figures the GH100 presets carry
(sim/hardware_presets.cpp, docs/simulator.md "Host dispatch").

Usage: python3 bench/recorded/host_dispatch.py [--shardscope build/dev/cli/shardscope]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accuracy_gpu import RECORDED, ROOT, chrome_events  # noqa: E402

BLOCK_OPS = ["ln_1", "c_attn", "attention", "c_proj", "residual_1", "ln_2", "c_fc", "gelu",
             "mlp_c_proj", "residual_2"]
BLOCK_KINDS = ["ln", "gemm", "sdpa", "gemm", "add", "ln", "gemm", "gelu", "gemm", "add"]


def kind(name):
    if "bfloat16_copy" in name:
        return "cast"
    if name == "Memcpy DtoD":
        return "copy"
    if name == "Memset":
        return "memset"
    if "layer_norm" in name:
        return "ln"
    if "nvjet" in name or "gemm" in name:
        return "gemm"
    if "sdpa" in name:
        return "sdpa"
    if "CUDAFunctor_add" in name:
        return "add"
    if "Gelu" in name:
        return "gelu"
    return "other"


def idle_us(events, start, end):
    busy_end, idle = start, 0.0
    for e in events:
        if start <= e["ts"] < end:
            idle += max(0.0, e["ts"] - busy_end)
            busy_end = max(busy_end, e["ts"] + e["dur"])
    return idle


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardscope", default=os.path.join(ROOT, "build", "dev", "cli", "shardscope"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        events = chrome_events(a.shardscope, os.path.join(RECORDED, "profile-torch-fsdp2-b8.trace.gz"),
                               tmp)
    steps = sorted({(e["ts"], e["dur"]) for e in events
                    if e.get("name", "").startswith("ProfilerStep")})[1:]
    device = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                    key=lambda e: e["ts"])
    intervals = {}
    per_param, unit_entry, copy_in_to_ln1, kernel_us, idle_before = [], [], [], {}, {}

    def add(key, v):
        intervals.setdefault(key, []).append(v)

    for start, dur in steps:
        step = [e for e in device if start <= e["ts"] < start + dur]
        lm_head = next(i for i, e in enumerate(step) if "align1" in e["name"])
        first_opt = next(i for i, e in enumerate(step) if "multi_tensor_apply" in e["name"])
        fwd_end, opt_start = step[lm_head]["ts"], step[first_opt]["ts"]
        print(f"step {dur / 1000:.2f} ms: forward {(fwd_end - start) / 1000:.2f} ms, idle "
              f"{idle_us(step, start, fwd_end) / 1000:.2f}; lm_head + backward "
              f"{(opt_start - fwd_end) / 1000:.2f}, idle {idle_us(step, fwd_end, opt_start) / 1000:.2f}; "
              f"optimizer {(start + dur - opt_start) / 1000:.2f}, idle "
              f"{idle_us(step, opt_start, start + dur) / 1000:.2f} ms")
        seq = [(kind(e["name"]), e["ts"], e["dur"]) for e in step[:lm_head]]
        # The device's idle time right before each event (one stream here).
        before = [0.0] + [max(0.0, seq[n][1] - seq[n - 1][1] - seq[n - 1][2])
                          for n in range(1, len(seq))]
        i = 0
        while i < len(seq):
            # A block: 12 (cast, copy) pairs, then the block's ops.
            pairs = 0
            while i + 2 * pairs + 1 < len(seq) and seq[i + 2 * pairs][0] == "cast" and \
                    seq[i + 2 * pairs + 1][0] == "copy":
                pairs += 1
            if pairs != 12:
                i += 1
                continue
            casts = [seq[i + 2 * p][1] for p in range(pairs)]
            if i > 0 and seq[i - 1][0] == "add":
                unit_entry.append(casts[0] - seq[i - 1][1])
            per_param.append(statistics.median(casts[p + 1] - casts[p] for p in range(pairs - 1)))
            j = i + 2 * pairs
            ops = []  # (first kernel start, kernel us) per op; a memset joins its kernel
            while j < len(seq) and len(ops) < len(BLOCK_KINDS):
                k, t, d = seq[j]
                if k == "memset" and j + 1 < len(seq):
                    ops.append((seq[j + 1][0], t, d + seq[j + 1][2]))
                    idle_before.setdefault(len(ops) - 1, []).append(before[j])
                    j += 2
                else:
                    ops.append((k, t, d))
                    idle_before.setdefault(len(ops) - 1, []).append(before[j])
                    j += 1
            if [k for k, _, _ in ops] != BLOCK_KINDS:
                i = j
                continue
            copy_in_to_ln1.append(ops[0][1] - casts[0])
            for n in range(len(ops)):
                kernel_us.setdefault(BLOCK_OPS[n], []).append(ops[n][2])
                if n > 0:
                    add(BLOCK_OPS[n], ops[n][1] - ops[n - 1][1])
            i = j
    # Medians rounded to 0.1 us, as the presets state them.
    med = lambda v: round(statistics.median(v), 1)  # noqa: E731
    print(f"\nblock forwards: {len(per_param)}; medians, us (start-to-start of first kernels; "
          f"'waited': the device idled over 3 us before the op's first kernel, so the interval "
          f"is host time)")
    print(f"  previous residual add -> first copy-in cast: {med(unit_entry):8.1f}")
    print(f"  copy-in, per parameter (cast to cast):         {med(per_param):8.1f}")
    print(f"  first copy-in cast -> ln_1:                    {med(copy_in_to_ln1):8.1f}")
    for n, op in enumerate(BLOCK_OPS[1:], start=1):
        prev = BLOCK_OPS[n - 1]
        waited = med(idle_before[n]) > 3.0
        print(f"  {prev:>11} -> {op:<11} {med(intervals[op]):8.1f}  ({prev} kernels "
              f"{med(kernel_us[prev]):6.1f}, idle before {med(idle_before[n]):5.1f}: "
              f"{'waited' if waited else 'device-bound, an upper bound'})")
    linear = round(statistics.mean([med(intervals["c_attn"]), med(intervals["c_proj"]),
                                    med(intervals["c_fc"])]), 1)
    cast_fixed = med(unit_entry) + med(copy_in_to_ln1) - med(intervals["ln_2"]) - 12 * med(per_param)
    ns = lambda us: round(us * 1000)  # noqa: E731
    print("\nGH100 preset figures (ns): layernorm %d, linear %d, attention %d, residual %d, "
          "default %d, cast_params %d + %d per parameter" % (
              ns(med(intervals["ln_2"])), ns(linear), ns(med(intervals["attention"])),
              ns(med(intervals["residual_1"])), ns(med(intervals["residual_1"])), ns(cast_fixed),
              ns(med(per_param))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
