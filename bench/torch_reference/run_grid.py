#!/usr/bin/env python3
"""Regenerates tests/reference/<name>.json for the configurations of grid.py
(tests/reference/no-builder/<name>.json for those grid.py marks "no-builder").

Each configuration runs in its own Python process (harness.py): a fresh fake
process group, a fresh model, and no state carried from one run to the next.

  run_grid.py                  every configuration
  run_grid.py --only NAME ...  some of them (repeatable)
  run_grid.py --list           print the names
  run_grid.py --jobs 2         run two at once (each run is single-threaded)
  run_grid.py --device cuda    on CUDA device 0 (default out dir tests/reference/cuda/);
                               each line then also gives the step's peak allocated
                               and reserved bytes (torch.cuda)
  run_grid.py --timeout S      end a configuration that runs longer than S seconds

Exit status: 0 all written; 1 some configuration failed (each failure is
printed with its configuration's name and PyTorch's reason); 2 bad arguments.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import grid  # noqa: E402


def run_one(python, spec, out_dir, device="cpu", timeout=None):
    # tests/reference/<subdir>/ for the specs that name one (grid.py: "no-builder")
    out = os.path.join(out_dir, spec.get("subdir", ""), spec["name"] + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    env = dict(os.environ)
    # One intra-op thread per run: results do not depend on it (allocation sizes
    # are shapes), and the machine stays usable.
    env.setdefault("OMP_NUM_THREADS", "1")
    # A fixed string hash: where the tracker's peak ties between modules, which
    # one `peak.at` names follows set order, which follows the hash seed.
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("KINETO_LOG_LEVEL", "5")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    cmd = [python, os.path.join(HERE, "harness.py"), "--name", spec["name"], "--out", out]
    if device != "cpu":
        cmd += ["--device", device]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return (spec["name"], None, time.time() - t0,
                "error: timed out after %.0f s (--timeout)\n%s" % (timeout, err[-2000:]))
    return spec["name"], p.returncode, time.time() - t0, p.stderr


def cuda_summary(path):
    """'allocated A  reserved R' of a --device cuda file (the step's torch.cuda peaks)."""
    try:
        with open(path) as f:
            peak = json.load(f)["peak"]
        return "allocated %d  reserved %d  (tracker %d)" % (
            peak["cuda_allocated_bytes"], peak["cuda_reserved_bytes"], peak["allocated_bytes"])
    except (OSError, ValueError, KeyError) as e:
        return "(unreadable result: %s)" % e


def main(argv=None):
    ap = argparse.ArgumentParser(description="Regenerate the PyTorch FSDP reference JSON files.")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="regenerate only this configuration (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the configuration names")
    ap.add_argument("--out-dir", help="default: tests/reference, or tests/reference/cuda "
                    "with --device cuda")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with torch and transformers (default: this one)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the models run (harness.py --device)")
    ap.add_argument("--timeout", type=float, metavar="S",
                    help="seconds one configuration may run before it is ended (default: none)")
    a = ap.parse_args(argv)
    if a.out_dir is None:
        a.out_dir = os.path.join(ROOT, "tests", "reference",
                                 *(["cuda"] if a.device == "cuda" else []))

    specs = grid.grid()
    if a.list:
        for s in specs:
            print(s["name"])
        return 0
    if a.only:
        known = {s["name"] for s in specs}
        unknown = [n for n in a.only if n not in known]
        if unknown:
            print("error: not in grid.py: %s (run_grid.py --list shows the names)"
                  % ", ".join(unknown), file=sys.stderr)
            return 2
        specs = [s for s in specs if s["name"] in a.only]
    os.makedirs(a.out_dir, exist_ok=True)

    subdirs = {s["name"]: s.get("subdir", "") for s in specs}
    t0 = time.time()
    failed = []
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [pool.submit(run_one, a.python, s, a.out_dir, a.device, a.timeout)
                   for s in specs]
        for i, f in enumerate(futures):
            name, rc, secs, err = f.result()
            status = "ok" if rc == 0 else "TIMEOUT" if rc is None else "FAILED (exit %d)" % rc
            if rc == 0 and a.device == "cuda":
                status += "  " + cuda_summary(os.path.join(a.out_dir, subdirs[name],
                                                           name + ".json"))
            print("[%2d/%d] %-58s %6.1f s  %s" % (i + 1, len(specs), name, secs, status),
                  flush=True)
            if rc != 0:
                lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
                msg = "\n".join(lines) if lines else err[-3000:]
                print("        " + msg.replace("\n", "\n        "), flush=True)
                failed.append(name)
    print("%d configuration(s) in %.1f s; %d failed" % (len(specs), time.time() - t0, len(failed)))
    if not a.only:
        for sub in sorted(set(subdirs.values())):
            d = os.path.join(a.out_dir, sub)
            names = {n + ".json" for n, s in subdirs.items() if s == sub}
            stale = sorted(f for f in os.listdir(d) if f.endswith(".json") and f not in names)
            for f in stale:
                print("note: %s is not a configuration of grid.py any more (remove it by hand)"
                      % os.path.join(sub, f))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
