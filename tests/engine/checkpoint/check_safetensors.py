#!/usr/bin/env python3
"""Interop of engine/checkpoint's safetensors with the reference implementation.

usage: check_safetensors.py CHECKPOINT_SAMPLE_BINARY

1. checkpoint_sample writes a file; safetensors.numpy.load_file must load it with the
   same names, shapes, dtypes and values, and safe_open must see its metadata.
2. safetensors.numpy.save_file writes the sample; checkpoint_sample must read it.
3. A float16 file from save_file must be refused naming the tensor and dtype.
Sample values (checkpoint_sample.cpp): element k of tensor s = s*1000 + k*0.25 - 3.5.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file


def sample():
    shapes = [("transformer.wte.weight", (7, 5)), ("transformer.h.0.ln_1.bias", (5,)), ("scalar", ())]
    out = {}
    for s, (name, shape) in enumerate(shapes, start=1):
        n = int(np.prod(shape)) if shape else 1
        values = (s * 1000.0 + np.arange(n, dtype=np.float64) * 0.25 - 3.5).astype(np.float32)
        out[name] = values.reshape(shape)
    return out


def main():
    tool = sys.argv[1]
    expected = sample()
    with tempfile.TemporaryDirectory() as d:
        ours = os.path.join(d, "ours.safetensors")
        subprocess.run([tool, "write", ours], check=True)
        loaded = load_file(ours)
        assert sorted(loaded) == sorted(expected), sorted(loaded)
        for name, want in expected.items():
            got = loaded[name]
            assert got.dtype == np.float32, (name, got.dtype)
            assert got.shape == want.shape, (name, got.shape, want.shape)
            assert np.array_equal(got, want), name
        with safe_open(ours, framework="numpy") as f:
            meta = f.metadata()
        assert meta["step"] == "12" and meta["model"] == "sample", meta
        assert re.fullmatch(r"[0-9a-f]{8}", meta["shardscope.data_crc32c"]), meta
        assert re.fullmatch(r"[0-9a-f]{8}", meta["shardscope.header_crc32c"]), meta
        print("safetensors.numpy.load_file read %d tensors written by write_safetensors" % len(loaded))

        theirs = os.path.join(d, "theirs.safetensors")
        save_file(expected, theirs, metadata={"step": "12"})
        subprocess.run([tool, "check", theirs], check=True)

        half = os.path.join(d, "half.safetensors")
        save_file({"w": np.ones((3,), dtype=np.float16)}, half)
        subprocess.run([tool, "refused", half, "tensor 'w': dtype F16 is not supported"], check=True)
    print("ok")


if __name__ == "__main__":
    main()
