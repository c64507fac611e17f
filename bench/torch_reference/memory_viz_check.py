#!/usr/bin/env python3
"""Opens shardscope's predicted memory snapshots with torch's own memory_viz.

For each model (or snapshot pickle given with --pickle), runs
  shardscope simulate --model M ... --memory-snapshot OUT/M.pickle
then
  python -m torch.cuda._memory_viz stats        OUT/M.pickle
  python -m torch.cuda._memory_viz trace_plot   OUT/M.pickle -o OUT/M.trace.html
  python -m torch.cuda._memory_viz segment_plot OUT/M.pickle -o OUT/M.segments.html
and fails when any of them fails or writes nothing. It also runs torch's
text views in-process (`trace`, and `segments` / `memory` with the flamegraph
step left out: it downloads flamegraph.pl) and tests/traces/memory_snapshot_keys.py
--complete (what MemoryViz.js, the page the plots embed, does with the file:
its unpickler's opcodes, the state-history replay, the timeline's pairing).
Needs torch (any 2.x; the reference venv, build/torch-venv, has 2.9.1); not
part of CI, which runs memory_snapshot_keys.py alone.

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


def torch_text_views(path):
    """torch's own text renderings of a snapshot, in-process: trace() and the
    flamegraph inputs of segments() / memory(). A free whose alloc trace() did
    not see prints the raw address; a block outside every segment is named MEM."""
    import pickle
    from torch.cuda import _memory_viz as mv
    with open(path, "rb") as f:
        snap = pickle.load(f)
    text = mv.trace(snap)
    lines = text.splitlines()
    unknown = [ln for ln in lines if ln.startswith("del ") and ln.split()[1].isdigit()]
    # trace() knows segments from segment_alloc entries and from the final
    # segments' allocated_size (not total_size), never from segment_map: with
    # expandable segments it names blocks MEM even in PyTorch's own snapshots.
    expandable = any(e["action"] == "segment_map" for t in snap["device_traces"] for e in t)
    outside = [ln for ln in lines if "= MEM[" in ln and not expandable]
    if unknown or outside:
        sys.exit("memory_viz_check: %s: trace() found frees without allocs %s or blocks outside "
                 "segments %s" % (path, unknown[:3], outside[:3]))
    for view in (mv.segments, mv.memory):
        if not view(snap, format_flamegraph=lambda lines: lines).strip():
            sys.exit("memory_viz_check: %s: %s() is empty" % (path, view.__name__))
    # (trace()'s last line, TOTAL MEM, reuses the loop index as its byte count:
    # meaningless, not printed.)
    print("torch trace/segments/memory: %d trace lines" % len(lines))


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
    ours = []
    # Each model with fixed segments, and gpt2-small with expandable ones too.
    runs = [(m, []) for m in (a.model or ["gpt2-tiny", "gpt2-small"])]
    if not a.model:
        runs.append(("gpt2-small", ["--set", "allocator.expandable_segments=true"]))
    for model, extra in runs:
        label = model + ("-expandable" if extra else "")
        out = os.path.join(a.out_dir, label + ".pickle")
        run([a.bin, "simulate", "--model", model, "--world", str(a.world), "--set",
             "wrap.type=class", "--set", 'wrap.classes=["GPT2Block"]', "--hw", "h200-sxm"] +
            extra + ["--memory-snapshot", out])
        ours.append(out)
    keys = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tests", "traces", "memory_snapshot_keys.py")
    for p in pickles + ours:
        base = os.path.join(a.out_dir, os.path.basename(p).rsplit(".pickle", 1)[0])
        run([sys.executable, keys] + (["--complete"] if p in ours else []) + [p])
        torch_text_views(p)
        run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", p])
        for kind in ("trace_plot", "segment_plot"):
            html = "%s.%s.html" % (base, kind)
            run([sys.executable, "-m", "torch.cuda._memory_viz", kind, p, "-o", html])
            if not os.path.getsize(html):
                sys.exit("memory_viz_check: %s is empty" % html)
    print("memory_viz_check: ok (%d snapshot(s)); open the .html files in a browser" %
          len(pickles + ours))


if __name__ == "__main__":
    main()
