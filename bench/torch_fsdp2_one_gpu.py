#!/usr/bin/env python3
"""PyTorch FSDP2 (fully_shard) GPT-2 training steps on one GPU, for `shardscope profile`.

    shardscope profile --out fsdp2.trace -- \
        torchrun --standalone --nproc_per_node 1 bench/torch_fsdp2_one_gpu.py

The model is torch_gpt2_eager.py's (shardscope's GPT-2 presets). Each block
and the root are fully_shard units with MixedPrecisionPolicy(param_dtype
bf16, reduce_dtype fp32), AdamW as in torch_gpt2_eager.py.

What it shows and what it does not: with a world of one, FSDP2 still runs its
whole schedule (all-gather copy-in/copy-out, reduce-scatter, resharding after
forward, the prefetches), but NCCL's collectives on a one-rank communicator
move no data between GPUs: they are local copies, microseconds long. So the
profile shows the compute, the copy kernels FSDP2 adds around every unit, the
stream structure and the memory of one rank; it does not show the
communication time or overlap of a real world.

--kineto-out FILE.json.gz records 2 more steps after the timed ones under
torch.profiler with shapes (bench/hopper/kineto_record.py; do not combine
with `shardscope profile`: CUPTI has one subscriber).

--cpu runs the same on the CPU with gloo (a syntax and semantics check where
there is no GPU). Prints one JSON object: step_ms (median after --warmup),
tokens_per_s, peak_allocated_bytes / peak_reserved_bytes (torch.cuda memory
statistics; null on --cpu), losses, torch, device.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hopper"))
import kineto_record  # noqa: E402
from torch_gpt2_eager import GPT2, PRESETS  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gpt2-small", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--cpu", action="store_true", help="gloo on the CPU, fp32")
    p.add_argument("--kineto-out", metavar="FILE.json.gz",
                   help="after the timed steps, record 2 more with torch.profiler "
                        "(record_shapes) into this gzipped Chrome trace")
    args = p.parse_args()
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if "RANK" not in os.environ:
        sys.exit("torch_fsdp2_one_gpu.py: run it under torchrun (RANK is not set)")
    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank = dist.get_rank()
    device = torch.device("cpu") if args.cpu else torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    if not args.cpu:
        torch.cuda.set_device(device)
    layers, width, heads, positions, vocab = PRESETS[args.model]
    torch.manual_seed(0)
    model = GPT2(layers, width, heads, positions, vocab).to(device)
    mp = MixedPrecisionPolicy(param_dtype=torch.float32 if args.cpu else torch.bfloat16,
                              reduce_dtype=torch.float32)
    for block in model.h:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    gen = torch.Generator(device=device).manual_seed(rank)
    tokens = torch.randint(0, vocab, (args.batch, args.seq_len + 1), device=device, generator=gen)
    ids, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    sync = (lambda: None) if args.cpu else torch.cuda.synchronize
    losses, step_ms = [], []
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        # An NVTX range per step: `shardscope profile` takes ProfilerStep#N as its steps.
        if not args.cpu:
            torch.cuda.nvtx.range_push(f"ProfilerStep#{step}")
        loss = model(ids, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if not args.cpu:
            torch.cuda.nvtx.range_pop()
        sync()
        if step >= args.warmup:
            step_ms.append((time.perf_counter() - start) * 1e3)
    if args.kineto_out:
        # 1 + 2 more steps, the last 2 recorded with shapes (issue 31, item 1).
        def step():
            loss = model(ids, labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        kineto_record.record(step, args.kineto_out, steps=2, cuda=not args.cpu)
    median_ms = statistics.median(step_ms)
    out = {
        "model": args.model, "batch": args.batch, "seq_len": args.seq_len,
        "world": dist.get_world_size(), "step_ms": median_ms,
        "tokens_per_s": args.batch * args.seq_len / (median_ms / 1e3),
        "peak_allocated_bytes": None if args.cpu else torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": None if args.cpu else torch.cuda.max_memory_reserved(),
        "losses": losses, "torch": torch.__version__,
        "device": "cpu" if args.cpu else torch.cuda.get_device_name(device),
    }
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
