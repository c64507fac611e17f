#!/usr/bin/env python3
"""Compares tests/reference/*.json (measured with real PyTorch FSDP) with shardscope.

Standard library only: it needs no torch. For each reference it writes the
recorded Hugging Face config to a temporary config.json and runs

  shardscope simulate --model config.json <shardscope_args> --json   (peak memory)
  shardscope plan     --model config.json <shardscope_args> --json   (communication, units)

Memory: the reference peak is FSDPMemTracker's (MemTracker's for fsdp1) peak of
live tensor bytes, exact (CPU: no 512-byte rounding, no cache). The predicted
peak is simulate's exact-bytes field when the binary has one
(peak_requested_bytes and similar names), else `peak_allocated_bytes`, which is
the caching allocator's 512-byte-rounded figure (the table says which).

CUDA references (setup.device "cuda", recorded by harness.py --device cuda, e.g.
tests/reference/cuda/: pass --refs DIR): the tracker's figures are 512 B-rounded
there, so the predicted peak is simulate's `peak_allocated_bytes` (the simulated
caching allocator's, also 512 B-rounded), and a second table sets the measured
caching allocator peaks (torch.cuda.max_memory_allocated / max_memory_reserved of
the measured step: peak.cuda_allocated_bytes, peak.cuda_reserved_bytes) against
simulate's `peak_allocated_bytes` and `peak_reserved_bytes`. simulate runs with
--hw h200-sxm or h100-sxm when the recorded GPU is one. CPU references run with
--hw cpu-local: PyTorch ran its CPU flash attention kernel there, where on a GPU
preset shardscope would plan the kernel PyTorch picks on that GPU.

Communication: shardscope reports bytes per rank per step with the nccl-tests
bus factors ((n-1)/n x S for all-gather and reduce-scatter, 2(n-1)/n x S for
all-reduce, S the unsharded buffer). The reference's collectives are converted
the same way: S = output bytes of an all-gather, input bytes of a
reduce-scatter, the tensor's bytes of an all-reduce; n = the group size of
that call.

  compare.py [--shardscope PATH] [--refs DIR | FILE...] [--markdown | --json] [--breakdown]

Exit status: 0 (the table is the result, whatever the errors); 2 when there is
no binary or no reference file.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXACT_PEAK_KEYS = ("peak_requested_bytes", "peak_allocated_requested_bytes",
                   "peak_allocated_exact_bytes", "peak_exact_bytes")
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
# simulate --json fields: the simulated caching allocator's peaks (512 B-rounded blocks,
# and the segments it holds), top level (traces::metrics_to_json, cli/cmd_simulate.cpp)
PRED_ALLOCATED_KEY = "peak_allocated_bytes"
# torch.cuda.max_memory_allocated counts the cuBLAS workspaces the caching
# allocator holds: simulate's tensors plus workspaces (absent before it
# modelled them: then the tensors alone).
PRED_CUDA_ALLOCATED_KEY = "peak_allocated_with_workspaces_bytes"
PRED_RESERVED_KEY = "peak_reserved_bytes"
# recorded GPU name (cuda.device_name) -> simulate --hw preset (sim/hardware.cpp)
HW_PRESETS = (("H200", "h200-sxm"), ("H100", "h100-sxm"))


def find_binary(explicit):
    if explicit:
        return explicit
    for rel in ("build/dev/cli/shardscope", "build/release/cli/shardscope",
                "build/dev/shardscope", "build/release/shardscope"):
        p = os.path.join(ROOT, rel)
        if os.access(p, os.X_OK):
            return p
    return shutil.which("shardscope")


def bus_bytes(collectives):
    """Per-rank bus bytes by kind, as shardscope plan counts them."""
    out = {k: 0.0 for k in KINDS}
    raw = {k: 0 for k in KINDS}
    for c in collectives:
        n = c["group_size"]
        if c["op"] == "all_gather":
            s = c["output_bytes"]
            out["all_gather"] += (n - 1) / n * s
        elif c["op"] == "reduce_scatter":
            s = c["input_bytes"]
            out["reduce_scatter"] += (n - 1) / n * s
        elif c["op"] == "all_reduce":
            s = c["input_bytes"]
            out["all_reduce"] += 2 * (n - 1) / n * s
        else:
            continue
        raw[c["op"]] += s
    return out, raw


def run_json(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip() or "exit %d" % p.returncode).splitlines()
        return None, msg[0] if msg else "exit %d" % p.returncode
    try:
        return json.loads(p.stdout), None
    except ValueError as e:
        return None, "unreadable JSON output: %s" % e


def predicted_reserved(sim):
    """simulate's reserved peak: the top-level field, else the first rank class's."""
    if PRED_RESERVED_KEY in sim:
        return sim[PRED_RESERVED_KEY], PRED_RESERVED_KEY
    classes = sim.get("rank_classes") or []
    if classes and PRED_RESERVED_KEY in classes[0]:
        return classes[0][PRED_RESERVED_KEY], "rank_classes[0]." + PRED_RESERVED_KEY
    return None, None


def rel(pred, ref):
    return None if pred is None or not ref else (pred - ref) / ref


def compare_one(binary, path, tmpdir):
    with open(path) as f:
        ref = json.load(f)
    device = ref.get("setup", {}).get("device", "cpu")
    row = {"name": ref.get("name", os.path.basename(path)),
           "flavor": ref.get("setup", {}).get("flavor"),
           "device": device,
           "ref_peak": ref["peak"]["allocated_bytes"],
           "ref_peak_profiler": ref["peak"].get("profiler_allocated_bytes"),
           "ref_step_start": ref.get("step_start_allocated_bytes"),
           "pred_peak": None, "pred_peak_field": None, "pred_persistent": None,
           "rel_err": None, "error": None}
    ref_bus, ref_raw = bus_bytes(ref["collectives"])
    row["ref_comm_bus"] = ref_bus
    row["ref_comm_unsharded"] = ref_raw
    row["pred_comm_bus"] = None
    row["units_agree"] = None
    if "config" not in ref:
        # A custom nn.Module (tests/reference/no-builder/): model_constructor names it;
        # only an exported graph can describe it to shardscope.
        mc = ref.get("model_constructor", {})
        row["error"] = ("no Hugging Face config (custom model %s of %s): export it to a "
                        "graph first" % (mc.get("class"), mc.get("module")))
        return row
    cfg = os.path.join(tmpdir, "config.json")
    with open(cfg, "w") as f:
        json.dump(ref["config"], f)
    args = list(ref["shardscope_args"])
    hw_args = ["--hw", "cpu-local"]
    if device == "cuda":
        hw_args = []
        cu = ref.get("cuda", {})
        row.update({"gpu": cu.get("device_name"), "alloc_conf": cu.get("alloc_conf"),
                    "ref_cuda_allocated": ref["peak"].get("cuda_allocated_bytes"),
                    "ref_cuda_reserved": ref["peak"].get("cuda_reserved_bytes"),
                    "ref_cuda_step_start_reserved": cu.get("step_start_reserved_bytes"),
                    "pred_allocated": None, "pred_reserved": None, "pred_reserved_field": None,
                    "rel_err_cuda_allocated": None, "rel_err_reserved": None, "hw": None})
        hw = next((p for k, p in HW_PRESETS if k in (cu.get("device_name") or "")), None)
        if hw:
            hw_args = ["--hw", hw]
            row["hw"] = hw

    sim, err = run_json([binary, "simulate", "--model", cfg] + args + hw_args + ["--json"])
    if err:
        row["error"] = "simulate rejected it: " + err.replace(cfg, "config.json")
        return row
    if device == "cuda":
        # On CUDA the tracker rounds like the allocator: compare rounded with rounded.
        field = PRED_ALLOCATED_KEY
        row["pred_allocated"] = sim.get(PRED_CUDA_ALLOCATED_KEY, sim.get(PRED_ALLOCATED_KEY))
        row["pred_reserved"], row["pred_reserved_field"] = predicted_reserved(sim)
        row["rel_err_cuda_allocated"] = rel(row["pred_allocated"], row["ref_cuda_allocated"])
        row["rel_err_reserved"] = rel(row["pred_reserved"], row["ref_cuda_reserved"])
    else:
        field = next((k for k in EXACT_PEAK_KEYS if k in sim), "peak_allocated_bytes")
    row["pred_peak"] = sim[field]
    row["pred_peak_field"] = field
    row["pred_persistent"] = sim.get("persistent_bytes")
    row["rel_err"] = (row["pred_peak"] - row["ref_peak"]) / row["ref_peak"]
    row["ref_breakdown"] = ref["peak"].get("breakdown", {})
    row["pred_breakdown"] = sim.get("peak_breakdown", {}).get("by_category", {})

    plan, err = run_json([binary, "plan", "--model", cfg] + args + ["--json"])
    if err:
        row["error"] = "plan rejected it: " + err.replace(cfg, "config.json")
        return row
    row["pred_comm_bus"] = {k: float(plan.get("comm_bytes_per_rank", {}).get(k, 0.0))
                            for k in KINDS}
    ref_units = {u["name"]: u for u in ref.get("model", {}).get("units", [])}
    pred_units = {u["name"]: u for u in plan.get("units", [])}
    row["units_agree"] = (
        set(ref_units) == set(pred_units)
        and all(ref_units[n]["params"] == pred_units[n]["params"]
                and ref_units[n]["local_numel"] == pred_units[n]["shard_numel"]
                for n in ref_units))
    return row


def human(b):
    if b is None:
        return "-"
    b = float(b)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(b) < 1024 or unit == "GiB":
            return ("%.0f %s" % (b, unit)) if unit == "B" else ("%.2f %s" % (b, unit))
        b /= 1024


def pct(x):
    return "-" if x is None else "%+.1f%%" % (100 * x)


def comm_cell(row, kind):
    r = row["ref_comm_bus"][kind]
    p = row["pred_comm_bus"][kind] if row["pred_comm_bus"] else None
    if r == 0 and (p is None or p == 0):
        return "0"
    if p is None:
        return "%s / -" % human(r)
    mark = "" if abs(r - p) <= 0.5 + 1e-9 * max(r, p) else " (differs)"
    return "%s / %s%s" % (human(r), human(p), mark)


def markdown(rows):
    out = ["| configuration | reference peak (tracker) | reference peak (profiler) | predicted peak "
           "| rel. error | all-gather bus bytes ref / pred | reduce-scatter ref / pred "
           "| all-reduce ref / pred | units | note |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r["error"] or ""
        if not r["error"] and r.get("device") == "cuda":
            note = "CUDA: tracker and prediction both 512 B-rounded"
        elif not r["error"] and r["pred_peak_field"] == "peak_allocated_bytes":
            note = "predicted = 512 B-rounded allocator peak"
        units = "-" if r["units_agree"] is None else ("same" if r["units_agree"] else "DIFFER")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], human(r["ref_peak"]), human(r["ref_peak_profiler"]), human(r["pred_peak"]),
            pct(r["rel_err"]), comm_cell(r, "all_gather"), comm_cell(r, "reduce_scatter"),
            comm_cell(r, "all_reduce"), units, note))
    errs = [abs(r["rel_err"]) for r in rows if r["rel_err"] is not None]
    rejected = sum(1 for r in rows if r["error"])
    out.append("")
    out.append("%d reference(s); %d rejected by shardscope; mean |relative error| of the peak %s; "
               "max %s" % (len(rows), rejected,
                           ("%.1f%%" % (100 * sum(errs) / len(errs))) if errs else "-",
                           ("%.1f%%" % (100 * max(errs))) if errs else "-"))
    return "\n".join(out)


def cuda_markdown(rows):
    """The CUDA references: measured caching allocator peaks against simulate's."""
    rows = [r for r in rows if r.get("device") == "cuda"]
    if not rows:
        return ""
    out = ["", "CUDA caching allocator, measured step (torch.cuda max_memory_allocated / "
           "max_memory_reserved after reset_peak_memory_stats) vs simulate "
           "(%s / %s):" % (PRED_ALLOCATED_KEY, PRED_RESERVED_KEY), "",
           "| configuration | GPU | allocated (measured) | allocated (predicted) | rel. error "
           "| reserved (measured) | reserved (predicted) | rel. error | reserved at step start "
           "| note |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r["error"] or ""
        if not note and r.get("alloc_conf") not in (None, "default"):
            note = "allocator: %s" % r["alloc_conf"]
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], r.get("gpu") or "-", human(r.get("ref_cuda_allocated")),
            human(r.get("pred_allocated")), pct(r.get("rel_err_cuda_allocated")),
            human(r.get("ref_cuda_reserved")), human(r.get("pred_reserved")),
            pct(r.get("rel_err_reserved")), human(r.get("ref_cuda_step_start_reserved")), note))
    errs = [abs(r["rel_err_reserved"]) for r in rows if r.get("rel_err_reserved") is not None]
    out.append("")
    out.append("%d CUDA reference(s); mean |relative error| of the reserved peak %s; max %s" % (
        len(rows), ("%.1f%%" % (100 * sum(errs) / len(errs))) if errs else "-",
        ("%.1f%%" % (100 * max(errs))) if errs else "-"))
    return "\n".join(out)


def breakdown_text(rows):
    """Per reference: the categories at the peak, as each side names them."""
    out = []
    for r in rows:
        if not r.get("ref_breakdown"):
            continue
        out.append("")
        out.append("%s: reference %s, predicted %s" % (r["name"], human(r["ref_peak"]),
                                                       human(r["pred_peak"])))
        ref = sorted(r["ref_breakdown"].items(), key=lambda kv: -kv[1])
        pred = sorted(r.get("pred_breakdown", {}).items(), key=lambda kv: -kv[1])
        for i in range(max(len(ref), len(pred))):
            a = "%-16s %10s" % (ref[i][0], human(ref[i][1])) if i < len(ref) else " " * 27
            b = "%-18s %10s" % (pred[i][0], human(pred[i][1])) if i < len(pred) else ""
            out.append("  %s    %s" % (a, b))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Compare PyTorch FSDP references with shardscope.")
    ap.add_argument("files", nargs="*", help="reference JSON files (default: --refs DIR/*.json)")
    ap.add_argument("--refs", default=os.path.join(ROOT, "tests", "reference"))
    ap.add_argument("--shardscope", help="the shardscope binary (default: build/dev, "
                    "build/release, then PATH)")
    fmt = ap.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="a markdown table (the default)")
    fmt.add_argument("--json", action="store_true", help="one JSON object per reference, as a list")
    ap.add_argument("--breakdown", action="store_true",
                    help="after the table, the categories at the peak on both sides")
    a = ap.parse_args(argv)

    binary = find_binary(a.shardscope)
    if not binary or not os.access(binary, os.X_OK):
        print("error: no shardscope binary (looked for %s); pass --shardscope PATH"
              % (a.shardscope or "build/dev/cli/shardscope, build/release/cli/shardscope, PATH"),
              file=sys.stderr)
        return 2
    files = a.files or sorted(glob.glob(os.path.join(a.refs, "*.json")))
    if not files:
        print("error: no reference JSON files in %s" % a.refs, file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="shardscope-compare-") as tmp:
        for path in files:
            try:
                rows.append(compare_one(binary, path, tmp))
            except (OSError, ValueError, KeyError) as e:
                rows.append({"name": os.path.basename(path), "error": "unreadable reference: %s" % e,
                             "ref_peak": None, "ref_peak_profiler": None, "pred_peak": None,
                             "pred_peak_field": None, "rel_err": None, "units_agree": None,
                             "ref_comm_bus": {k: 0.0 for k in KINDS}, "pred_comm_bus": None})
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print(markdown(rows))
        cuda_table = cuda_markdown(rows)
        if cuda_table:
            print(cuda_table)
        if a.breakdown:
            print(breakdown_text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
