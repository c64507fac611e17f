#!/usr/bin/env python3
"""Opens shardscope's predicted memory snapshots with torch's own memory_viz.

For each model (or snapshot pickle given with --pickle), runs
  shardscope simulate --model M ... --memory-snapshot OUT/M.pickle
then
  python -m torch.cuda._memory_viz stats        OUT/M.pickle
  python -m torch.cuda._memory_viz trace_plot   OUT/M.pickle -o OUT/M.trace.html
  python -m torch.cuda._memory_viz segment_plot OUT/M.pickle -o OUT/M.segments.html
and fails when any of them fails or writes nothing. Needs torch (any 2.x; the
reference venv, build/torch-venv, has 2.9.1); not part of CI, which checks the
same keys with CPython's pickle (tests/traces/memory_snapshot_keys.py).

  build/torch-venv/bin/python bench/torch_reference/memory_viz_check.py \
      --bin build/release/cli/shardscope --out-dir /tmp/mviz [--model gpt2-small --world 8]
"""
import argparse
import os
import subprocess
import sys


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout[-2000:], end="")
    if r.returncode != 0:
        sys.exit("memory_viz_check: '%s' exited %d" % (" ".join(cmd), r.returncode))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/release/cli/shardscope")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--model", action="append", help="default: gpt2-tiny and gpt2-small")
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--pickle", action="append", default=[],
                    help="also check an existing snapshot (e.g. a real _dump_snapshot)")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("memory_viz_check: torch is not installed in %s; run it with the reference "
                 "venv's python (build/torch-venv/bin/python)" % sys.executable)
    os.makedirs(a.out_dir, exist_ok=True)
    pickles = list(a.pickle)
    for model in a.model or ["gpt2-tiny", "gpt2-small"]:
        out = os.path.join(a.out_dir, model + ".pickle")
        run([a.bin, "simulate", "--model", model, "--world", str(a.world), "--set",
             "wrap.type=class", "--set", 'wrap.classes=["GPT2Block"]', "--memory-snapshot", out])
        pickles.append(out)
    for p in pickles:
        base = os.path.join(a.out_dir, os.path.basename(p).rsplit(".pickle", 1)[0])
        run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", p])
        for kind in ("trace_plot", "segment_plot"):
            html = "%s.%s.html" % (base, kind)
            run([sys.executable, "-m", "torch.cuda._memory_viz", kind, p, "-o", html])
            if not os.path.getsize(html):
                sys.exit("memory_viz_check: %s is empty" % html)
    print("memory_viz_check: ok (%d snapshot(s)); open the .html files in a browser" % len(pickles))


if __name__ == "__main__":
    main()
