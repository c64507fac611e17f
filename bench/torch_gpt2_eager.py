#!/usr/bin/env python3
"""PyTorch eager GPT-2 training steps: the reference for `shardscope run --backend cuda`.

Same model as shardscope's presets (plan/models.cpp): GPT-2 with learned
position embeddings, pre-LayerNorm blocks (eps 1e-5), packed qkv, causal
attention, GELU (tanh), biases on every Linear but lm_head, lm_head tied to
wte, no dropout. Same precision as the engine's bf16 mixed precision: fp32
parameters and AdamW state (the master copy), the forward and backward in
bf16 (torch.autocast), and the engine's default AdamW (lr 1e-3, betas
(0.9, 0.999), eps 1e-8, weight decay 0.01; fused). Data: seeded random tokens.

Prints one JSON object on stdout:
  {"model", "batch", "seq_len", "steps", "step_ms" (median after --warmup),
   "tokens_per_s", "peak_mem_bytes" (torch.cuda.max_memory_allocated),
   "params", "flops_per_token", "mfu", "peak_tflops", "torch", "device", "losses"}
MFU = flops_per_token * tokens_per_s / peak, with PaLM's count
flops_per_token = 6 N + 12 L d T (N parameters, L layers, d width, T sequence).

--kineto-out FILE.json.gz records 2 more steps after the timed ones under
torch.profiler with shapes (bench/hopper/kineto_record.py; the losses list
then has those steps too).

--find-max-batch tries batch sizes from --batch-candidates, largest first,
and benchmarks the first that runs a step without running out of memory.
"""
import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hopper"))
import kineto_record  # noqa: E402

PRESETS = {
    # name: (layers, width, heads, positions, vocab)
    "gpt2-tiny": (2, 64, 4, 128, 512),
    "gpt2-small": (12, 768, 12, 1024, 50257),
    "gpt2-medium": (24, 1024, 16, 1024, 50257),
}


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width, eps=1e-5)
        self.c_attn = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width, eps=1e-5)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):  # x: (B, T, C)
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        # (B, heads, T, head_dim)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers, width, heads, positions, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(positions, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=1e-5)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, ids, labels):  # ids, labels: (B, T) int64
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def flops_per_token(params, layers, width, seq_len):
    return 6 * params + 12 * layers * width * seq_len


def run(args, batch):
    """Benchmarks `batch`; raises torch.cuda.OutOfMemoryError when it does not fit."""
    layers, width, heads, positions, vocab = PRESETS[args.model]
    if args.seq_len > positions:
        sys.exit(f"--seq-len {args.seq_len} exceeds {args.model}'s {positions} positions")
    gc.collect()
    torch.cuda.empty_cache()
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    torch.cuda.reset_peak_memory_stats()
    state = {}  # everything on the device, dropped in `finally` (also after an OOM)
    losses, step_ms = [], []
    try:
        state["model"] = model = GPT2(layers, width, heads, positions, vocab).to(device)
        params = sum(p.numel() for p in model.parameters())  # tied weight counted once
        state["opt"] = opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999),
                                               eps=1e-8, weight_decay=0.01, fused=True)
        gen = torch.Generator(device=device).manual_seed(args.seed)
        tokens = torch.randint(0, vocab, (batch, args.seq_len + 1), device=device, generator=gen)
        state["ids"], state["labels"] = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        del tokens
        for step in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            # An NVTX range per step: `shardscope profile` takes ProfilerStep#N as its steps.
            torch.cuda.nvtx.range_push(f"ProfilerStep#{step}")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(state["ids"], state["labels"])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())  # synchronises
            torch.cuda.nvtx.range_pop()
            del loss
            torch.cuda.synchronize()
            if step >= args.warmup:
                step_ms.append((time.perf_counter() - start) * 1e3)
            if args.probe_only:
                break  # --find-max-batch: one step tells whether it fits
        peak = torch.cuda.max_memory_allocated()
        if args.kineto_out and not args.probe_only:
            # 1 + 2 more steps, the last 2 recorded with shapes (issue 31, item 1).
            def step():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(state["ids"], state["labels"])
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.item())
            kineto_record.record(step, args.kineto_out, steps=2)
    finally:
        model = opt = loss = None
        state.clear()
        gc.collect()
        torch.cuda.empty_cache()
    median_ms = statistics.median(step_ms) if step_ms else math.nan
    tps = batch * args.seq_len / (median_ms / 1e3) if step_ms else math.nan
    fpt = flops_per_token(params, layers, width, args.seq_len)
    return {
        "model": args.model, "batch": batch, "seq_len": args.seq_len, "steps": args.steps,
        "warmup": args.warmup, "precision": "bf16 autocast, fp32 params, fused AdamW",
        "step_ms": median_ms, "tokens_per_s": tps, "peak_mem_bytes": peak, "params": params,
        "flops_per_token": fpt, "peak_tflops": args.peak_tflops,
        "mfu": fpt * tps / (args.peak_tflops * 1e12) if step_ms else math.nan,
        "torch": torch.__version__, "device": torch.cuda.get_device_name(device),
        "losses": losses,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gpt2-small", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-tflops", type=float, default=989.4,
                   help="dense bf16 peak for MFU (H100 SXM and H200: 989.4)")
    p.add_argument("--find-max-batch", action="store_true",
                   help="benchmark the largest of --batch-candidates that fits")
    p.add_argument("--batch-candidates", default="128,96,64,48,32,24,16,12,8,4,2,1")
    p.add_argument("--kineto-out", metavar="FILE.json.gz",
                   help="after the timed steps, record 2 more with torch.profiler "
                        "(record_shapes) into this gzipped Chrome trace")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpt2_eager.py: no CUDA device (torch.cuda.is_available() is False)")
    if args.batch < 1 or args.steps < 1 or args.warmup < 0:
        sys.exit("--batch and --steps must be >= 1, --warmup >= 0")
    args.probe_only = False
    batch = args.batch
    if args.find_max_batch:
        args.probe_only = True
        candidates = sorted({int(b) for b in args.batch_candidates.split(",")}, reverse=True)
        batch = None
        for b in candidates:
            try:
                run(args, b)
                batch = b
                break
            except torch.cuda.OutOfMemoryError:
                print(f"batch {b}: out of memory", file=sys.stderr)
        if batch is None:
            sys.exit("no batch size of --batch-candidates fits")
        args.probe_only = False
    print(json.dumps(run(args, batch)))


if __name__ == "__main__":
    main()
