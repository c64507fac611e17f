#!/usr/bin/env python3
"""Checks that a memory snapshot pickle loads with CPython's own pickle module and
has every key torch.cuda._memory_viz and MemoryViz.js read (torch 2.x), with
consistent values: blocks tile their segment, allocated_size is the allocated
blocks, every trace entry names a known action. Standard library only.

  python3 tests/traces/memory_snapshot_keys.py SNAPSHOT.pickle
"""
import pickle
import sys

SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "blocks", "frames"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
ENTRY_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
FRAME_KEYS = {"filename", "line", "name"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"}
STATES = {"active_allocated", "active_pending_free", "inactive"}


def check(path):
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert set(snap) >= {"segments", "device_traces"}, sorted(snap)
    assert snap["segments"], "no segments"
    for seg in snap["segments"]:
        assert SEGMENT_KEYS <= set(seg), sorted(SEGMENT_KEYS - set(seg))
        assert seg["segment_type"] in ("small", "large"), seg["segment_type"]
        at = seg["address"]
        for b in seg["blocks"]:
            assert BLOCK_KEYS <= set(b), sorted(BLOCK_KEYS - set(b))
            assert b["address"] == at and b["state"] in STATES, b
            at += b["size"]
        assert at == seg["address"] + seg["total_size"], "blocks do not tile the segment"
        allocated = sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        assert allocated == seg["allocated_size"], (allocated, seg["allocated_size"])
    entries = [e for trace in snap["device_traces"] for e in trace]
    assert entries, "no trace entries"
    for e in entries:
        assert ENTRY_KEYS <= set(e), sorted(ENTRY_KEYS - set(e))
        assert e["action"] in ACTIONS, e["action"]
        for fr in e["frames"]:
            assert FRAME_KEYS <= set(fr) and isinstance(fr["name"], str), fr
    print("%s: %d segments, %d trace entries: ok" % (path, len(snap["segments"]), len(entries)))


if __name__ == "__main__":
    check(sys.argv[1])
