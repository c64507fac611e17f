"""shardscope-export: a Hugging Face config.json to shardscope graph JSON.

  shardscope-export --hf-config CONFIG.json --out GRAPH.json [--layers N]
                    [--dtype bf16|fp32] [--batches 1,2,3] [--seqs 32,48,64] [--held-out B,T]

Exit status: 0; 2 for bad arguments or a config it cannot read; 1 when the
model cannot be traced (the message names the op and module).
"""
import argparse
import os
import sys
import time

import torch

from .export import DEFAULT_SIZES, export
from .tracer import ExportError


def _ints(text, flag):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("%s: expected comma-separated integers, got '%s'"
                                         % (flag, text))
    return vals


def main(argv=None):
    ap = argparse.ArgumentParser(prog="shardscope-export",
                                 description="Export a Hugging Face causal LM's training step "
                                             "to shardscope graph JSON (docs/export.md).")
    ap.add_argument("--hf-config", required=True, help="a Hugging Face config.json")
    ap.add_argument("--out", required=True, help="graph JSON to write")
    ap.add_argument("--layers", type=int, help="keep only the first N decoder layers")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                    help="parameter dtype while tracing (bf16: FSDP2 mixed precision; fp32: "
                         "graphs for fp32 runs)")
    ap.add_argument("--batches", default=None, help="batch sizes traced (default 2,3,4)")
    ap.add_argument("--seqs", default=None, help="sequence lengths traced (default 32,48,64)")
    ap.add_argument("--held-out", default=None, help="B,T the fit is checked at (default 5,80)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    sizes = dict(DEFAULT_SIZES)
    try:
        if args.batches:
            sizes["batch"] = _ints(args.batches, "--batches")
        if args.seqs:
            sizes["seq"] = _ints(args.seqs, "--seqs")
        if args.held_out:
            sizes["held_out"] = _ints(args.held_out, "--held-out")
    except argparse.ArgumentTypeError as e:
        print("shardscope-export: error: %s" % e, file=sys.stderr)
        return 2
    from . import hf
    try:
        raw, cfg = hf.load_config(args.hf_config)
        kw = hf.export_args(raw, cfg, layers=args.layers)
        wrap = hf.no_split_modules(cfg)
    except (OSError, ValueError, KeyError) as e:
        print("shardscope-export: error: %s: %s" % (args.hf_config, e), file=sys.stderr)
        return 2
    t0 = time.time()
    try:
        with hf.no_padding_assumed():
            export(kw["model_fn"], kw["example_inputs"], out=args.out, wrap_classes=wrap,
                   sizes=sizes,
                   dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32,
                   model_name=os.path.basename(args.hf_config), max_seq_len=kw["max_seq_len"],
                   vocab_size=kw["vocab_size"],
                   source="hf-config:" + os.path.basename(args.hf_config),
                   routed_blocks=kw["routed_blocks"])
    except ValueError as e:
        print("shardscope-export: error: %s" % e, file=sys.stderr)
        return 2
    except ExportError as e:
        print("shardscope-export: error: %s" % e, file=sys.stderr)
        return 1
    if not args.quiet:
        print("shardscope-export: wrote %s (%.1f s)" % (args.out, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
