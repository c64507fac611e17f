#!/usr/bin/env python3
"""Checks that a memory snapshot pickle loads with CPython's own pickle module and
has every key torch.cuda._memory_viz and MemoryViz.js read (torch 2.x), with
consistent values: blocks tile their segment, allocated_size is the allocated
blocks, every trace entry names a known action. Standard library only.

It also checks what MemoryViz.js (torch/utils/viz/MemoryViz.js, the page that
trace_plot and segment_plot embed and pytorch.org/memory_viz opens) does with
the file, which torch's Python side never exercises:

- its unpickler knows only some opcodes and protocols 2-4 (PICKLE_OPCODES);
- "Allocator State History" replays the trace backwards from `segments`, one
  event undone at a time (after folding a free_requested directly followed by
  its free_completed into one "free"), and draws every live block inside its
  segment: a block outside every live segment, a free_requested of no live
  block, or undoing a segment_alloc that is not live breaks the page;
- "Active Memory Timeline" pairs each alloc with the next free of its address
  and adds the blocks still active at the end that it did not see allocated.
  With --complete (a trace recorded from an empty allocator, as simulate
  writes it) every free must follow its alloc and the blocks active at the end
  must be exactly the allocations the trace leaves live.

  python3 tests/traces/memory_snapshot_keys.py [--complete] SNAPSHOT.pickle
"""
import pickle
import pickletools
import sys

SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "blocks", "frames"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
ENTRY_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
FRAME_KEYS = {"filename", "line", "name"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom"}
STATES = {"active_allocated", "active_pending_free", "inactive"}
# The opcodes MemoryViz.js's unpickle() handles (any other throws "UNKNOWN OPCODE").
PICKLE_OPCODES = {"APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT",
                  "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET", "MARK", "MEMOIZE", "PROTO",
                  "SETITEMS", "SHORT_BINUNICODE", "STOP", "TUPLE2", "APPEND", "NEWFALSE",
                  "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE", "BINFLOAT", "TUPLE",
                  "TUPLE1", "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM"}


def check_opcodes(data):
    for op, arg, pos in pickletools.genops(data):
        assert op.name in PICKLE_OPCODES, "opcode %s at byte %d: MemoryViz.js cannot read it" % (
            op.name, pos)
        if op.name == "PROTO":
            assert 2 <= arg <= 4, "pickle protocol %d: MemoryViz.js reads 2-4" % arg
        if op.name == "LONG1":
            # Decoded through a 64-bit integer into a JS Number: exact below 2^53.
            assert abs(arg) < 2**53, "integer %d at byte %d: MemoryViz.js rounds it" % (arg, pos)


def fold_frees(trace):
    """MemoryViz.js's annotate_snapshot: a free_requested directly followed by the
    free_completed of the same address becomes one "free"."""
    out = []
    for e in trace:
        if (e["action"] == "free_completed" and out and out[-1]["action"] == "free_requested"
                and out[-1]["addr"] == e["addr"]):
            out[-1] = dict(out[-1], action="free")
            continue
        out.append(e)
    return out


def check_state_history(snap, device, trace, complete=False):
    """Undoes the events from the last to the first as the segment view does,
    checking after every step that each live block lies inside a live segment;
    complete: the allocator before the first event is empty."""
    segments = {}  # address -> (size, stream)
    blocks = {}    # address -> size
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        segments[seg["address"]] = seg["total_size"]
        at = seg["address"]
        for b in seg["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[at] = b["size"]
            at += b["size"]

    def segment_of(addr, size):
        for base, total in segments.items():
            if base <= addr and addr + size <= base + total:
                return base
        return None

    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        a, where = e["action"], "event %d (%s of %#x, %d B)" % (i, e["action"], e["addr"], e["size"])
        if a in ("free", "free_completed"):
            assert e["addr"] not in blocks, where + ": undone, the block is already live"
            assert segment_of(e["addr"], e["size"]) is not None, (
                where + ": undone, the block lies in no live segment")
            blocks[e["addr"]] = e["size"]
        elif a == "free_requested":
            assert e["addr"] in blocks, where + ": no live block there (the page throws)"
        elif a == "alloc":
            assert e["addr"] in blocks, where + ": undone, no live block there"
            del blocks[e["addr"]]
        elif a == "segment_unmap":
            # Undone: the range is mapped again, joining the segment it extends.
            for base, total in segments.items():
                assert e["addr"] + e["size"] <= base or base + total <= e["addr"], (
                    where + ": undone, it overlaps the live segment at %#x" % base)
            joined = [b for b, t in segments.items() if b + t == e["addr"]]
            if joined:
                segments[joined[0]] += e["size"]
            else:
                segments[e["addr"]] = e["size"]
        elif a == "segment_map":
            # Undone: the range leaves the mapped segment holding it (expandable
            # segments map and unmap at a segment's end).
            base = segment_of(e["addr"], e["size"])
            assert base is not None, where + ": undone, no live segment holds the range"
            assert base + segments[base] == e["addr"] + e["size"], (
                where + ": undone, the range is not at its segment's end")
            inside = [b for b, sz in blocks.items() if b < e["addr"] + e["size"] and
                      e["addr"] < b + sz]
            assert not inside, where + ": undone, blocks still live in it: %s" % [
                hex(b) for b in inside[:4]]
            segments[base] -= e["size"]
            if segments[base] == 0:
                del segments[base]
        elif a == "segment_free":
            for base, total in segments.items():
                assert e["addr"] + e["size"] <= base or base + total <= e["addr"], (
                    where + ": undone, it overlaps the live segment at %#x" % base)
            segments[e["addr"]] = e["size"]
        elif a == "segment_alloc":
            assert segments.get(e["addr"]) == e["size"], (
                where + ": undone, no live segment of that address and size")
            inside = [b for b in blocks if e["addr"] <= b < e["addr"] + e["size"]]
            assert not inside, where + ": undone, blocks still live in it: %s" % [
                hex(b) for b in inside[:4]]
            del segments[e["addr"]]
    if complete:
        assert not segments and not blocks, (
            "before the first event: segments %s and blocks %s the trace never made" % (
                [hex(b) for b in segments][:4], [hex(b) for b in blocks][:4]))


def check_timeline(snap, device, trace):
    """The alloc/free pairing of the timeline view, for a trace that starts from an
    empty allocator: every free follows its alloc, and what the trace leaves live
    is what the segments hold."""
    live = {}
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            assert e["addr"] not in live, "event %d: alloc of %#x, already live" % (i, e["addr"])
            live[e["addr"]] = e["size"]
        elif e["action"] in ("free", "free_completed"):
            assert live.get(e["addr"]) == e["size"], (
                "event %d: %s of %#x (%d B) without its alloc" % (i, e["action"], e["addr"],
                                                                  e["size"]))
            del live[e["addr"]]
    active = {}
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        at = seg["address"]
        for b in seg["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                active[at] = b["requested_size"]
            at += b["size"]
    assert active == live, "blocks active at the end %s != allocations left live %s" % (
        sorted(active.items())[:4], sorted(live.items())[:4])


def check(path, complete=False):
    with open(path, "rb") as f:
        data = f.read()
    check_opcodes(data)
    snap = pickle.loads(data)
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
    for device, trace in enumerate(snap["device_traces"]):
        folded = fold_frees(trace)
        check_state_history(snap, device, folded, complete)
        if complete:
            check_timeline(snap, device, folded)
    print("%s: %d segments, %d trace entries: ok" % (path, len(snap["segments"]), len(entries)))


if __name__ == "__main__":
    args = sys.argv[1:]
    complete = "--complete" in args
    paths = [a for a in args if a != "--complete"]
    assert len(paths) == 1, "usage: memory_snapshot_keys.py [--complete] SNAPSHOT.pickle"
    check(paths[0], complete)
