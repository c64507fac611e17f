#!/usr/bin/env python3
"""Step time against real PyTorch on the H200, class by class (issue 31, item 4).

Reads the PyTorch profiles recorded under CUPTI in tests/recorded/h200/
(kernel names and durations, no shapes), sums each step's kernels by class
(GEMM, attention, normalization, cross-entropy, optimizer, reduction,
elementwise, copies) over the steps after the first (warm-up), and prints,
per recorded policy, the measured figures beside `shardscope simulate`'s for
the same model, batch and precision: uncalibrated with the op-level model
(--hw, default h200-sxm), with the op-level terms switched off (the
model before issue 31), and with only host dispatch switched off; and the
device's idle time per step, measured (`report`) and predicted. The simulator's ops are classed by their graph op
type. Calibration on another policy needs compute events with FLOPs, which
these profiles lack: that column says so until profiles with shapes are
recorded (issue 31, item 1).

Usage: python3 bench/recorded/accuracy_gpu.py [--shardscope build/dev/cli/shardscope]
       [--hw h200-sxm] [--json]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDED = os.path.join(ROOT, "tests", "recorded", "h200")

# name, profile, simulate --set arguments (the run's model, batch and precision)
POLICIES = [
    ("eager-b48", "profile-torch-eager-b48.trace.gz",
     ["mixed_precision.param_dtype=bf16", "batch_size=48", "seq_len=1024"]),
    ("fsdp2-b8", "profile-torch-fsdp2-b8.trace.gz",
     ["mixed_precision.param_dtype=bf16", "batch_size=8", "seq_len=1024", "wrap.type=class",
      'wrap.classes=["GPT2Block"]']),
]
CLASSES = ["gemm", "attention", "normalization", "cross_entropy", "optimizer", "reduction",
           "elementwise", "copy", "collective", "other"]

# The op-level terms switched off (every field at its default): the cost
# model as it was before issue 31, for the "before" column.
OFF = {"op_level": {"sustained_clock_fraction": 1.0,
                    "gemm": {"sm_count": 0, "unaligned_efficiency": 0,
                             "unaligned_efficiency_backward": 0},
                    "memory_efficiency": {k: 1.0 for k in [
                        "gelu", "gelu.backward", "layernorm", "layernorm.backward", "residual",
                        "cross_entropy", "cross_entropy.backward"]},
                    "upcast_bytes": False,
                    "host_dispatch_ns": {k: 0 for k in [
                        "layernorm", "linear", "attention", "residual", "default",
                        "cast_params"]},
                    "host_dispatch_per_param_ns": {"cast_params": 0},
                    "attention_efficiency": {}, "math_attention": False},
       "contention_factor": 1.1}
# Only host dispatch switched off (the op-level model as it was before it).
NO_HOST = {"op_level": {k: OFF["op_level"][k]
                        for k in ["host_dispatch_ns", "host_dispatch_per_param_ns"]}}


def kernel_class(name):
    """A kernel's class from its name (PyTorch 2.11, cuBLAS 13, cuDNN 9, NCCL 2.28)."""
    if name.startswith("nccl"):
        return "collective"
    if name.startswith("Memcpy") or name.startswith("Memset"):
        return "copy"
    if re.search(r"sdpa|flash|fmha|cudnn::fusion", name):
        return "attention"
    if re.search(r"gemm|nvjet|splitKreduce|gemv|xmma", name):
        return "gemm"
    if re.search(r"layer_norm|GammaBeta|rms_norm", name):
        return "normalization"
    if re.search(r"SoftMax|softmax|nll_loss", name):
        return "cross_entropy"
    if re.search(r"Adam|multi_tensor_apply", name):
        return "optimizer"
    if "reduce_kernel" in name:
        return "reduction"
    if name.startswith("void at::native::") or name.startswith("void at_cuda_detail::"):
        return "elementwise"
    return "other"


def op_class(op):
    """The class of a simulated op from its graph op type or op kind."""
    return {"linear": "gemm", "attention": "attention", "layernorm": "normalization",
            "rmsnorm": "normalization", "cross_entropy": "cross_entropy",
            "optimizer": "optimizer", "grad_norm": "reduction"}.get(op, "elementwise")


def cli(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"accuracy_gpu.py: {' '.join([binary, *args])} failed "
                 f"(exit {r.returncode}):\n{r.stderr.strip()}")
    return r.stdout


def variant(hw, changes):
    """A hardware JSON document: `hw` (a preset name, or a hardware JSON file,
    whose keys are kept) with `changes` applied, nested objects merged key by
    key (the file's other op_level fields stay)."""
    if os.path.isfile(hw):
        with open(hw) as f:
            doc = json.load(f)
    else:
        doc = {"base": hw}

    def merge(into, over):
        for k, v in over.items():
            if isinstance(v, dict) and v and isinstance(into.get(k), dict):
                merge(into[k], v)
            else:
                into[k] = v
        return into

    return merge(doc, json.loads(json.dumps(changes)))


def chrome_events(binary, trace, tmp):
    out = os.path.join(tmp, os.path.basename(trace) + ".json")
    cli(binary, "export", trace, "--chrome", out)
    with open(out) as f:
        doc = json.load(f)
    return [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc)
            if e.get("ph") == "X"]


def per_step(events, classify):
    """Mean per step (steps after the first) of kernel ms by class, and step ms."""
    steps = sorted({(e["ts"], e["dur"]) for e in events
                    if e.get("name", "").startswith("ProfilerStep")})
    use = steps[1:] if len(steps) > 1 else steps
    sums = collections.Counter()
    for i, (start, _) in enumerate(use):
        later = [s for s, _ in steps if s > start]
        end = min(later) if later else float("inf")
        for e in events:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and start <= e["ts"] < end:
                sums[classify(e)] += e["dur"] / 1000.0
    n = len(use)
    return {c: v / n for c, v in sums.items()}, sum(d for _, d in use) / n / 1000.0


def simulate(binary, sets, hw, tmp, tag):
    trace = os.path.join(tmp, tag + ".trace")
    args = ["simulate", "--model", "gpt2-small", "--world", "1", "--hw", hw, "--trace", trace,
            "--json"]
    for s in sets:
        args += ["--set", s]
    metrics = json.loads(cli(binary, *args))
    classes, _ = per_step(chrome_events(binary, trace, tmp),
                          lambda e: op_class(e.get("args", {}).get("op", "")))
    return classes, metrics["step_time_ms"], metrics["idle_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardscope", default=os.path.join(ROOT, "build", "dev", "cli", "shardscope"))
    ap.add_argument("--hw", default="h200-sxm")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        off = os.path.join(tmp, "op-level-off.json")
        with open(off, "w") as f:
            json.dump(variant(a.hw, OFF), f)
        no_host = os.path.join(tmp, "host-dispatch-off.json")
        with open(no_host, "w") as f:
            json.dump(variant(a.hw, NO_HOST), f)
        for name, profile, sets in POLICIES:
            path = os.path.join(RECORDED, profile)
            measured, step = per_step(chrome_events(a.shardscope, path, tmp),
                                      lambda e: kernel_class(e["name"]))
            measured_idle = json.loads(cli(a.shardscope, "report", path, "--json"))["idle_ms"]
            predicted, predicted_step, predicted_idle = simulate(a.shardscope, sets, a.hw, tmp,
                                                                 name)
            _, before_step, _ = simulate(a.shardscope, sets, off, tmp, name + "-off")
            _, no_host_step, _ = simulate(a.shardscope, sets, no_host, tmp, name + "-no-host")
            rows.append({"policy": name, "measured_ms": step, "predicted_ms": predicted_step,
                         "before_ms": before_step, "no_host_dispatch_ms": no_host_step,
                         "measured_idle_ms": measured_idle, "predicted_idle_ms": predicted_idle,
                         "calibrated_ms": None,
                         "calibrated_note": "calibrate needs compute events with FLOPs: the "
                                            "recorded profiles have no shapes",
                         "kernels_measured_ms": sum(measured.values()),
                         "classes": {c: [measured.get(c, 0.0), predicted.get(c, 0.0)]
                                     for c in CLASSES if c in measured or c in predicted}})
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    err = lambda p, m: f"{100 * (p - m) / m:+.1f}%"
    for r in rows:
        print(f"{r['policy']}: measured step {r['measured_ms']:.2f} ms (kernels "
              f"{r['kernels_measured_ms']:.2f} ms); predicted {r['predicted_ms']:.2f} ms "
              f"({err(r['predicted_ms'], r['measured_ms'])}); op-level terms off "
              f"{r['before_ms']:.2f} ms ({err(r['before_ms'], r['measured_ms'])}); host dispatch "
              f"off {r['no_host_dispatch_ms']:.2f} ms "
              f"({err(r['no_host_dispatch_ms'], r['measured_ms'])}); calibrated on "
              f"the other policy: n/a ({r['calibrated_note']})")
        print(f"  device idle: measured {r['measured_idle_ms']:.2f} ms, predicted "
              f"{r['predicted_idle_ms']:.2f} ms")
        print(f"  {'class':<14} {'measured ms':>12} {'predicted ms':>13} {'error':>8}")
        for c, (m, p) in r["classes"].items():
            if m < 0.005 and p < 0.005:
                continue
            print(f"  {c:<14} {m:12.2f} {p:13.2f} {err(p, m) if m > 0 else 'n/a':>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
