"""Kineto traces with shapes of a few training steps (issue 31, item 1).

record(step, out_path, steps=2) runs `step()` 1 + `steps` times under
torch.profiler with CPU and CUDA activities and record_shapes=True (the
cpu_ops then carry "Input Dims", "Input type" and "Concrete Inputs", which
`shardscope import --kineto` / traces/op_cost.h turn into FLOPs), records the
last `steps`, each marked ProfilerStep#N (prof.step()), and writes the Chrome-format trace
gzipped to out_path (".json.gz"). Only the recorded steps are in the file:
the trace is "trimmed" by recording nothing else. Returns the uncompressed
and compressed sizes in bytes.

No stacks, no memory profile: they multiply the trace's size and are not
read by shardscope.
"""
import gzip
import os
import shutil
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def record(step, out_path, steps=2, cuda=True):
    if steps < 1:
        raise ValueError("steps must be >= 1")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # A schedule makes prof.step() mark each step (ProfilerStep#N); its one
    # warm-up step runs unrecorded (the profiler's own start-up cost).
    sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(activities=activities, schedule=sched, record_shapes=True, with_stack=False,
                 profile_memory=False) as prof:
        for _ in range(steps + 1):
            step()
            prof.step()
    fd, raw = tempfile.mkstemp(suffix=".json", dir=os.path.dirname(os.path.abspath(out_path)))
    os.close(fd)
    try:
        prof.export_chrome_trace(raw)
        raw_bytes = os.path.getsize(raw)
        tmp = out_path + ".part"
        with open(raw, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(raw):
            os.remove(raw)
    return raw_bytes, os.path.getsize(out_path)
