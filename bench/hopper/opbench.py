#!/usr/bin/env python3
"""Op-level microbenchmark of the kernels PyTorch launches in the recorded steps (issue 31, item 1).

    python3 bench/hopper/opbench.py --out DIR/opbench.json [--quick]

Shapes are those of the two recorded workloads: GPT-2 small eager (B = 48,
T = 1024: 49,152 tokens, width 768, vocabulary 50,257) and the
Llama-3-8B-shaped FSDP2 model (B = 1, T = 8192, width 4096, 32 heads, 8 KV
heads, FFN 14336, vocabulary 128,256). Every row is timed with CUDA events:
--warmup calls, then --reps calls, the median in ms. Rows:

  gemm       each linear's forward (F.linear, bias as the model has it),
             input-gradient (dy @ W) and weight-gradient (dy^T @ x) GEMMs,
             bf16 (and fp32 for GPT-2's, TF32 off as torch's default);
             lm_head also at the vocabulary padded to a multiple of 128
             (50304, 128256 is one already) to measure alignment
  sdpa       F.scaled_dot_product_attention forward and backward, causal,
             with the backend PyTorch picks ("default", its kernel names
             read with the profiler) and with each backend forced (flash,
             efficient, cudnn, math; math at T <= 2048 only), T = 1024..8192,
             head_dim 64 (12 heads) and 128 (32 heads, 8 KV heads: GQA by
             enable_gqa, and by repeat_kv copies as transformers does
             without it); a backend that refuses a shape is a row with its
             error, not a failure
  memory     LayerNorm (bf16, and under bf16 autocast as eager GPT-2 runs it),
             transformers' LlamaRMSNorm, GELU (tanh), SwiGLU (silu(g) * u),
             transformers' RoPE (apply_rotary_pos_emb), a residual add,
             casts (bf16 <-> fp32), cross-entropy over fp32-upcast logits at
             V = 50257 and 128256: forward and backward, with bytes moved
             (tensors read + written, numel x size) and the GB/s that gives
  optimizer  AdamW foreach and fused over one shard: one Llama layer's 9
             tensors (218 M parameters) and GPT-2 small's 148 (124 M)
  fsdp       FSDP2's copy-in (torch.ops.fsdp.all_gather_copy_in, after the
             fp32 -> bf16 cast), copy-out (split_with_sizes_copy) and
             reduce-scatter input (torch._chunk_cat) over one Llama layer at
             world sizes 1 and 8

Writes one JSON object (device, torch, cuda, cudnn, rows) to --out and a
table to stdout. --quick: tiny sizes (a check of the script, also on the
CPU with --device cpu, where CUDA-only backends become error rows).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

GPT2 = dict(tokens=49152, batch=48, seq=1024, width=768, heads=12, ffn=3072, vocab=50257,
            linears=[("c_attn", 768, 2304, True), ("attn.c_proj", 768, 768, True),
                     ("c_fc", 768, 3072, True), ("mlp.c_proj", 3072, 768, True),
                     ("lm_head", 768, 50257, False), ("lm_head.padded", 768, 50304, False)])
LLAMA = dict(tokens=8192, batch=1, seq=8192, width=4096, heads=32, kv=8, ffn=14336, vocab=128256,
             linears=[("q_proj", 4096, 4096, False), ("k_proj", 4096, 1024, False),
                      ("v_proj", 4096, 1024, False), ("o_proj", 4096, 4096, False),
                      ("gate_proj", 4096, 14336, False), ("up_proj", 4096, 14336, False),
                      ("down_proj", 14336, 4096, False), ("lm_head", 4096, 128256, False)])
QUICK_GPT2 = dict(tokens=64, batch=2, seq=32, width=64, heads=4, ffn=256, vocab=500,
                  linears=[("c_attn", 64, 192, True), ("lm_head", 64, 500, False),
                           ("lm_head.padded", 64, 512, False)])
QUICK_LLAMA = dict(tokens=64, batch=1, seq=64, width=128, heads=4, kv=2, ffn=256, vocab=1000,
                   linears=[("q_proj", 128, 128, False), ("down_proj", 256, 128, False)])


class Bench:
    def __init__(self, device, reps, warmup):
        self.device, self.reps, self.warmup = device, reps, warmup
        self.cuda = device.type == "cuda"
        self.rows = []

    def time_ms(self, fn):
        for _ in range(self.warmup):
            fn()
        if not self.cuda:
            times = []
            for _ in range(self.reps):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(times)
        torch.cuda.synchronize()
        times = []
        for _ in range(self.reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def row(self, kind, name, fn, flops=0, bytes_=0, **extra):
        """Times fn and records a row; an exception becomes the row's error."""
        row = {"kind": kind, "name": name, **extra}
        try:
            ms = self.time_ms(fn)
            row["ms"] = ms
            if flops:
                row["flops"] = flops
                row["tflops"] = flops / (ms * 1e-3) / 1e12
            if bytes_:
                row["bytes"] = bytes_
                row["gbps"] = bytes_ / (ms * 1e-3) / 1e9
        except Exception as e:  # a backend's refusal or out of memory: recorded
            row["error"] = ("%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))[:300]
        finally:
            if self.cuda:
                torch.cuda.empty_cache()
        self.rows.append(row)
        return row


def nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def gemms(b, model, tag, dtypes):
    dev = b.device
    m = model["tokens"]
    for name, k, n, bias in model["linears"]:
        for dt in dtypes:
            x = torch.randn(m, k, device=dev, dtype=dt)
            w = torch.randn(n, k, device=dev, dtype=dt) * 0.02
            bv = torch.randn(n, device=dev, dtype=dt) if bias else None
            dy = torch.randn(m, n, device=dev, dtype=dt)
            f = 2 * m * k * n
            common = dict(model=tag, m=m, n=n, k=k, dtype=str(dt).replace("torch.", ""),
                          bias=bias)
            b.row("gemm", name, lambda: F.linear(x, w, bv), f, nbytes(x, w, dy), direction="forward",
                  **common)
            b.row("gemm", name, lambda: torch.mm(dy, w), f, nbytes(dy, w, x),
                  direction="input_grad", **common)
            b.row("gemm", name, lambda: torch.mm(dy.t(), x), f, nbytes(dy, x, w),
                  direction="weight_grad", **common)
            del x, w, bv, dy


def sdpa_kernel_names(fn):
    """Names of the CUDA kernels one call launches (the kernel PyTorch picks)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.device_type.name == "CUDA"})


def sdpa(b, quick):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev, dt = b.device, torch.bfloat16
    backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    # GPT-2 small's own attention (B = 48, T = 1024), then the T sweep.
    shapes = [] if quick else [(48, 12, 12, 1024, 64)]
    for d, h, kv in ((64, 12, 12), (128, 32, 8)):
        for t in ((32, 64) if quick else (1024, 2048, 4096, 8192)):
            shapes.append((max(1, (128 if quick else 8192) // t), h, kv, t, d))
    for bsz, h, kv, t, d in shapes:
        q = torch.randn(bsz, h, t, d, device=dev, dtype=dt, requires_grad=True)
        k = torch.randn(bsz, kv, t, d, device=dev, dtype=dt, requires_grad=True)
        v = torch.randn(bsz, kv, t, d, device=dev, dtype=dt, requires_grad=True)
        # Causal: half the T x T products (flop_counter counts all of them);
        # the backward's four products are counted as twice the forward's two.
        f_fwd = 4 * bsz * h * t * t * d // 2
        variants = [("enable_gqa", dict(enable_gqa=kv != h))]
        if kv != h:
            variants.append(("repeat_kv", {}))
        for gqa, kw in variants:
            def args():
                if gqa == "repeat_kv":
                    rep = h // kv
                    return (q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1))
                return (q, k, v)
            for bname, backend in backends:
                if bname == "math" and t > 2048:
                    continue
                if gqa == "repeat_kv" and bname != "default":
                    continue
                common = dict(batch=bsz, heads=h, kv_heads=kv, seq=t, head_dim=d, causal=True,
                              gqa=gqa, backend=bname, dtype="bfloat16")

                def fwd():
                    qq, kk, vv = args()
                    if backend is None:
                        return F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, **kw)
                    with sdpa_kernel([backend]):
                        return F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, **kw)
                r = b.row("sdpa", "sdpa", lambda: fwd(), f_fwd, direction="forward", **common)
                if "error" in r:
                    continue
                if b.cuda and bname == "default":
                    try:
                        r["kernels"] = sdpa_kernel_names(
                            lambda: torch.autograd.grad(fwd(), (q, k, v), torch.ones_like(q)))
                    except Exception as e:
                        r["kernels_error"] = str(e)[:200]
                try:
                    out = fwd()
                    dout = torch.randn_like(out)
                    b.row("sdpa", "sdpa", lambda: torch.autograd.grad(out, (q, k, v), dout,
                                                                      retain_graph=True),
                          2 * f_fwd, direction="backward", **common)
                    del out, dout
                except Exception as e:
                    b.rows.append({"kind": "sdpa", "name": "sdpa", "direction": "backward",
                                   **common, "error": str(e).splitlines()[0][:300]})
        del q, k, v


def fwd_bwd(b, kind, name, make, fn, common):
    """Rows for fn(*inputs) forward and its backward (autograd.grad with a
    random output gradient); bytes = inputs read + output written (forward),
    output grad + saved inputs read + input grads written (backward)."""
    inputs = make()
    fwd_bytes = None
    try:
        out = fn(*inputs)
        fwd_bytes = nbytes(*inputs) + nbytes(out)
    except Exception as e:
        b.rows.append({"kind": kind, "name": name, "direction": "forward", **common,
                       "error": str(e).splitlines()[0][:300]})
        return
    b.row(kind, name, lambda: fn(*inputs), 0, fwd_bytes, direction="forward", **common)
    grads_of = [t for t in inputs if t.requires_grad]
    if not grads_of or not out.requires_grad:
        return
    dout = torch.randn_like(out) if out.dim() else torch.ones_like(out)
    bwd_bytes = nbytes(dout) + 2 * nbytes(*grads_of)
    b.row(kind, name, lambda: torch.autograd.grad(out, grads_of, dout, retain_graph=True), 0,
          bwd_bytes, direction="backward", **common)


def memory_ops(b, gpt2, llama):
    dev, bf = b.device, torch.bfloat16
    g_n, g_c, g_f = gpt2["tokens"], gpt2["width"], gpt2["ffn"]
    l_n, l_c, l_f = llama["tokens"], llama["width"], llama["ffn"]

    def t(*shape, dtype=bf, grad=True):
        return torch.randn(*shape, device=dev, dtype=dtype).requires_grad_(grad)

    ln = torch.nn.LayerNorm(g_c, eps=1e-5).to(dev)
    ln_bf = torch.nn.LayerNorm(g_c, eps=1e-5).to(dev, bf)
    fwd_bwd(b, "memory", "layernorm", lambda: [t(g_n, g_c)], ln_bf,
            dict(model="gpt2-small", rows=g_n, cols=g_c, dtype="bfloat16"))

    def ln_autocast(x):
        with torch.autocast(dev.type, dtype=bf):
            return ln(x)
    fwd_bwd(b, "memory", "layernorm", lambda: [t(g_n, g_c)], ln_autocast,
            dict(model="gpt2-small", rows=g_n, cols=g_c, dtype="bfloat16 autocast (fp32 math)"))
    try:
        from transformers.models.llama.modeling_llama import (LlamaRMSNorm,
                                                              apply_rotary_pos_emb)
        rms = LlamaRMSNorm(l_c, eps=1e-5).to(dev, bf)
        fwd_bwd(b, "memory", "rmsnorm", lambda: [t(l_n, l_c)], rms,
                dict(model="llama3-8b", rows=l_n, cols=l_c, dtype="bfloat16",
                     impl="transformers LlamaRMSNorm (fp32 upcast)"))
        h, kv, d, s = llama["heads"], llama["kv"], l_c // llama["heads"], llama["seq"]
        cos = torch.randn(1, s, d, device=dev, dtype=bf)
        sin = torch.randn(1, s, d, device=dev, dtype=bf)
        fwd_bwd(b, "memory", "rope", lambda: [t(1, h, s, d), t(1, kv, s, d)],
                lambda q, k: torch.cat([x.flatten() for x in apply_rotary_pos_emb(q, k, cos, sin)]),
                dict(model="llama3-8b", heads=h, kv_heads=kv, seq=s, head_dim=d, dtype="bfloat16",
                     impl="transformers apply_rotary_pos_emb (+ one cat to time both)"))
    except ImportError as e:
        b.rows.append({"kind": "memory", "name": "rmsnorm/rope", "error": "transformers: %s" % e})
    fwd_bwd(b, "memory", "gelu_tanh", lambda: [t(g_n, g_f)],
            lambda x: F.gelu(x, approximate="tanh"),
            dict(model="gpt2-small", rows=g_n, cols=g_f, dtype="bfloat16"))
    fwd_bwd(b, "memory", "swiglu", lambda: [t(l_n, l_f), t(l_n, l_f)],
            lambda g, u: F.silu(g) * u,
            dict(model="llama3-8b", rows=l_n, cols=l_f, dtype="bfloat16"))
    fwd_bwd(b, "memory", "residual_add", lambda: [t(l_n, l_c), t(l_n, l_c)], lambda a, c: a + c,
            dict(model="llama3-8b", rows=l_n, cols=l_c, dtype="bfloat16"))
    for model, n, v in (("gpt2-small", g_n, gpt2["vocab"]), ("llama3-8b", l_n, llama["vocab"])):
        fwd_bwd(b, "memory", "cast_bf16_to_fp32", lambda: [t(n, v)], lambda x: x.float(),
                dict(model=model, rows=n, cols=v))
        labels = torch.randint(0, v, (n,), device=dev)
        fwd_bwd(b, "memory", "cross_entropy", lambda: [t(n, v, dtype=torch.float32)],
                lambda x: F.cross_entropy(x, labels),
                dict(model=model, rows=n, vocab=v, dtype="float32 (upcast logits)"))
    fwd_bwd(b, "memory", "cast_fp32_to_bf16", lambda: [t(l_f, l_c, dtype=torch.float32)],
            lambda x: x.to(bf), dict(model="llama3-8b", rows=l_f, cols=l_c))


def layer_shapes(model, quick):
    if quick:
        return [(64, 64)] * 4 + [(64,)] * 2
    c, f, kvd = model["width"], model["ffn"], model["width"] // model["heads"] * model["kv"]
    return [(c, c), (kvd, c), (kvd, c), (c, c), (f, c), (f, c), (c, f), (c,), (c,)]


def gpt2_shapes(quick):
    if quick:
        return [(500, 64), (128, 64)] + [(64,)] * 10
    c, f = 768, 3072
    per_block = [(c,), (c,), (3 * c, c), (3 * c,), (c, c), (c,), (c,), (c,), (f, c), (f,), (c, f),
                 (c,)]
    return [(50257, c), (1024, c)] + per_block * 12 + [(c,), (c,)]


def optimizer(b, llama, quick):
    dev = b.device
    for tag, shapes in (("llama3-8b layer", layer_shapes(llama, quick)),
                        ("gpt2-small model", gpt2_shapes(quick))):
        params = [torch.randn(*s, device=dev, dtype=torch.float32, requires_grad=True)
                  for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p)
        numel = sum(p.numel() for p in params)
        for impl in ("foreach", "fused"):
            kw = {impl: True}
            try:
                opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, **kw)
            except Exception as e:
                b.rows.append({"kind": "optimizer", "name": "adamw", "impl": impl, "shard": tag,
                               "error": str(e).splitlines()[0][:300]})
                continue
            # Reads p, g, m, v; writes p, m, v: 7 x 4 bytes per parameter.
            b.row("optimizer", "adamw", opt.step, 0, 28 * numel, impl=impl, shard=tag,
                  tensors=len(params), params=numel)
            del opt
        del params


def fsdp_copies(b, llama, quick):
    dev, bf = b.device, torch.bfloat16
    import importlib
    for mod in ("torch.distributed.fsdp._fully_shard._fsdp_collectives",
                "torch.distributed._composable.fsdp._fsdp_collectives"):
        try:  # registers the torch.ops.fsdp ops
            importlib.import_module(mod)
            break
        except ImportError:
            pass
    shapes = layer_shapes(llama, quick)
    for world in (1, 8):
        numels = [int(torch.Size(s).numel()) for s in shapes]
        shard = [-(-n // world) for n in numels]  # padded shard sizes (FSDP2 pads dim 0)
        fp32 = [torch.randn(n, device=dev) for n in shard]
        total = sum(shard)
        common = dict(model="llama3-8b layer", world=world, params=sum(numels))

        def cast():
            return [x.to(bf) for x in fp32]
        b.row("fsdp", "param_cast_fp32_to_bf16", cast, 0, 6 * total, **common)
        inputs = cast()

        ag_out = torch.empty(world * total, device=dev, dtype=bf)
        # The op's schema changed across releases (torch 2.9: inputs, output
        # buffer, sizes, numel, rank; earlier: world_size, dtype, device
        # instead of the buffer): its arguments are filled by name.
        by_name = dict(all_gather_inputs=inputs, all_gather_output=ag_out, inp_split_sizes=shard,
                       all_gather_input_numel=total, world_size=world, rank=0, dtype=bf,
                       device=dev)

        def copy_in():
            schema = torch.ops.fsdp.all_gather_copy_in.default._schema
            return torch.ops.fsdp.all_gather_copy_in(*[by_name[a.name] for a in schema.arguments])
        r = b.row("fsdp", "all_gather_copy_in", copy_in, 0, 2 * 2 * total, **common)
        if "error" in r:
            continue
        _, out = copy_in()
        out2d = out.view(world, -1)
        dst = [torch.empty(world, n, device=dev, dtype=bf) for n in shard]
        b.row("fsdp", "split_with_sizes_copy",
              lambda: torch.ops.fsdp.split_with_sizes_copy(out2d, shard, dim=1, out=dst),
              0, 2 * 2 * world * total, **common)
        grads = [torch.randn(n * world, device=dev, dtype=torch.float32) for n in shard]
        rs_in = torch.empty(world * total, device=dev, dtype=torch.float32)
        chunk_cat = getattr(torch.ops.fsdp, "chunk_cat", None) or torch._chunk_cat
        b.row("fsdp", "chunk_cat",
              lambda: chunk_cat(grads, dim=0, num_chunks=world, out=rs_in.view(world, -1)),
              0, 2 * 4 * world * total, **common)
        del fp32, inputs, ag_out, out, out2d, dst, grads, rs_in


def table(rows):
    lines = []
    for r in rows:
        what = " ".join("%s=%s" % (k, r[k]) for k in ("model", "m", "n", "k", "seq", "head_dim",
                                                       "gqa", "backend", "dtype", "direction",
                                                       "impl", "shard", "world") if k in r)
        fig = ("error: " + r["error"][:60]) if "error" in r else "%9.3f ms %s" % (
            r["ms"], ("%7.1f TFLOP/s" % r["tflops"]) if "tflops" in r else
            ("%7.1f GB/s" % r["gbps"]) if "gbps" in r else "")
        lines.append("%-9s %-24s %s  %s" % (r["kind"], r["name"], fig, what))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sections", default="gemm,sdpa,memory,optimizer,fsdp")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a check of the script)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = p.parse_args()
    known = {"gemm", "sdpa", "memory", "optimizer", "fsdp"}
    sections = [s for s in args.sections.split(",") if s]
    if any(s not in known for s in sections):
        sys.exit("opbench.py: unknown section in --sections (known: %s)" % ", ".join(sorted(known)))
    if args.reps < 1 or args.warmup < 0:
        sys.exit("opbench.py: --reps >= 1, --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("opbench.py: no CUDA device (torch.cuda.is_available() is False)")
    dev = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    gpt2, llama = (QUICK_GPT2, QUICK_LLAMA) if args.quick else (GPT2, LLAMA)
    b = Bench(dev, args.reps, args.warmup)
    t0 = time.time()
    if "gemm" in sections:
        gemms(b, gpt2, "gpt2-small", (torch.bfloat16, torch.float32))
        gemms(b, llama, "llama3-8b", (torch.bfloat16,))
    if "sdpa" in sections:
        sdpa(b, args.quick)
    if "memory" in sections:
        memory_ops(b, gpt2, llama)
    if "optimizer" in sections:
        optimizer(b, llama, args.quick)
    if "fsdp" in sections:
        fsdp_copies(b, llama, args.quick)
    out = {"device": torch.cuda.get_device_name(dev) if b.cuda else "cpu",
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if b.cuda else None,
           "allow_tf32": torch.backends.cuda.matmul.allow_tf32, "reps": args.reps,
           "warmup": args.warmup, "quick": args.quick, "seconds": round(time.time() - t0, 1),
           "rows": b.rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(table(b.rows))
    print("%d rows (%d errors) in %.1f s -> %s" % (len(b.rows), sum("error" in r for r in b.rows),
                                                   out["seconds"], args.out))


if __name__ == "__main__":
    main()
