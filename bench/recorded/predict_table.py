#!/usr/bin/env python3
"""Calibrate on one recorded GPU run, predict the others: the table of
docs/accuracy.md ("2026-11-26: real GPU runs").

    python3 bench/recorded/predict_table.py [--shardscope PATH] [--dir tests/recorded/h200]
                                            [--calibrate-on base]

For each grid-NAME.trace.gz under --dir (gpt2-small, emulated world 8 rank 0,
recorded by scripts/device-check's grid stage): the measured step time, peak
allocated and peak reserved (`shardscope report --json`, median over the
reported steps), the prediction of `shardscope simulate` under the run's own
policy (from the trace's metadata) with the h200-sxm preset and with the
hardware calibrated on --calibrate-on's run, and the errors. Standard library
only; tests/sim/test_recorded_h200.cpp checks the same numbers in CI.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

ORDER = ["base", "no-reshard", "no-prefetch", "batch4", "fp32"]


def cli(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"shardscope {' '.join(args)} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout


def policy_of(trace, tmp):
    """The run's policy and metadata, written to TMP/<trace>.policy.json.

    The native binary format (docs/traces.md) keeps the trace metadata as one
    JSON object, {"source": ..., "model": ..., "policy": {...}, ...}, which
    neither `report --json` nor the Chrome export repeats."""
    path = os.path.join(tmp, os.path.basename(trace) + ".policy.json")
    with gzip.open(trace, "rb") as f:
        data = f.read()
    start = data.find(b'{"source"')
    if start < 0:
        sys.exit(f"{trace}: no metadata JSON found")
    meta, _ = json.JSONDecoder().raw_decode(data[start:].decode("utf-8", errors="replace"))
    with open(path, "w") as f:
        json.dump(meta["policy"], f)
    return path, meta


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shardscope", default=None)
    p.add_argument("--dir", default="tests/recorded/h200")
    p.add_argument("--calibrate-on", default="base")
    args = p.parse_args()
    binary = args.shardscope
    if binary is None:
        for b in ("build/release/cli/shardscope", "build/dev/cli/shardscope"):
            if os.access(b, os.X_OK):
                binary = b
                break
    if binary is None:
        sys.exit("no shardscope binary: pass --shardscope PATH")
    names = [n for n in ORDER if os.path.exists(f"{args.dir}/grid-{n}.trace.gz")]
    with tempfile.TemporaryDirectory() as tmp:
        fit = os.path.join(tmp, "fit.json")
        cli(binary, "calibrate", f"{args.dir}/grid-{args.calibrate_on}.trace.gz", "--base", "h200-sxm",
            "--out", fit)
        print(f"| policy | measured step | h200-sxm preset | error | calibrated on {args.calibrate_on} "
              "| error | peak allocated, measured = predicted | peak reserved, measured = predicted |")
        print("|---|---|---|---|---|---|---|---|")
        for name in names:
            trace = f"{args.dir}/grid-{name}.trace.gz"
            policy, meta = policy_of(trace, tmp)
            m = json.loads(cli(binary, "report", trace, "--json"))
            sim = {}
            for hw in ("h200-sxm", fit):
                sim[hw] = json.loads(cli(binary, "simulate", "--model", meta["model"], "--world",
                                         str(meta["world_size"]), "--policy", policy, "--hw", hw,
                                         "--json"))
            step = m["step_time_ms"]
            pre, cal = sim["h200-sxm"]["step_time_ms"], sim[fit]["step_time_ms"]
            alloc_ok = "yes" if sim[fit]["peak_allocated_bytes"] == m["peak_allocated_bytes"] else "NO"
            resv_ok = "yes" if sim[fit]["peak_reserved_bytes"] == m["peak_reserved_bytes"] else "NO"
            print(f"| {name} | {step:.2f} ms | {pre:.2f} ms | {100 * (pre / step - 1):+.1f}% "
                  f"| {cal:.2f} ms | {100 * (cal / step - 1):+.1f}% "
                  f"| {m['peak_allocated_bytes']:,} B, {alloc_ok} "
                  f"| {m['peak_reserved_bytes']:,} B, {resv_ok} |")


if __name__ == "__main__":
    main()
