#!/usr/bin/env python3
"""Real PyTorch FSDP2 steps of a Llama-3-8B-shaped model on one GPU (issue 31, item 1).

    python3 bench/hopper/record_llama.py --out-dir DIR [--layers N] [--seq 8192]

The model is Hugging Face's LlamaForCausalLM (transformers, SDPA attention,
use_cache off, no dropout) with Llama-3-8B's shapes: hidden 4096, 32 heads,
8 KV heads, FFN 14336, vocabulary 128256 (untied), RMSNorm eps 1e-5, RoPE
theta 500000 with Llama 3's scaling; fewer layers. FSDP2 (fully_shard) on a
world of one (NCCL), one unit per decoder layer plus the root,
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fp32 parameters
and AdamW state (torch's default implementation: foreach on CUDA; --fused for
the fused one). The loss is the model's own (logits upcast to fp32, shifted
cross-entropy). Data: seeded random tokens.

Policies (each in this process, one after the other; the caching
allocator is emptied and the peak statistics reset between them):
  none       no activation checkpointing
  sac        torchtitan's op-level selective checkpointing
             (bench/torch_reference/torchtitan_sac.py) of every layer
  full       every decoder layer checkpointed (non-reentrant)
  noreshard  no checkpointing, reshard_after_forward=False
  eager      (only when named) no FSDP: bf16 autocast over fp32 parameters,
             fused AdamW, as bench/torch_gpt2_eager.py runs GPT-2; the
             reference the CUDA engine's speed is compared with (issue 33)

Layers: unless --layers is given, one step of the most memory-hungry
policy (noreshard) is run at 1 and 2 layers; the peak's slope and intercept
give the most layers that fit in --fill of the device's memory, at most 32.
Batch: --batch (1) for every policy, then --batch2 (2) with at most 1 warm-up
and 2 timed steps and no trace (out of memory is recorded, not fatal).

Per (policy, batch): --warmup steps, --steps timed steps (median step_ms;
no profiler), then 2 more steps under torch.profiler with record_shapes
(kineto_record.py) written to DIR/llama-<policy>-b<batch>.json.gz
(--no-trace: none). Prints, and writes to DIR/llama.json after every run
(so that a time limit keeps what was measured), one JSON object:
the probe, and a row per run with step_ms, step_ms_all, tokens_per_s,
peak_allocated_bytes, peak_reserved_bytes, losses, trace file and sizes.

--device cpu --tiny runs the same script on the CPU with gloo and a tiny
config (a check of the script where there is no GPU; scripts/test-python).
"""
import argparse
import gc
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
TORCH_REFERENCE = os.path.join(HERE, "..", "torch_reference")
sys.path.insert(0, TORCH_REFERENCE)
import harness  # noqa: E402  (stdlib imports only: its checkpoint wrappers)
import kineto_record  # noqa: E402

POLICIES = ("none", "sac", "full", "noreshard")
# Not FSDP: the model as is, bf16 autocast over fp32 parameters, fused AdamW
# (bench/torch_gpt2_eager.py's precision): the reference for the CUDA
# engine's speed (issue 33, item 4). Run only when named in --policies.
EAGER = "eager"
MAX_LAYERS = 32  # Llama-3-8B's own count

# Meta-Llama-3-8B's shape without its layer count (Hugging Face config keys),
# shared with bench/recorded/predict_hopper.py and scripts/device-check.
with open(os.path.join(HERE, "llama3-8b-shape.json")) as _f:
    LLAMA3_8B = {k: v for k, v in json.load(_f).items()
                 if k not in ("model_type", "architectures", "max_position_embeddings")}
TINY = dict(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=512, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)


def config(layers, seq, tiny):
    from transformers import LlamaConfig
    shape = TINY if tiny else LLAMA3_8B
    cfg = LlamaConfig(num_hidden_layers=layers, max_position_embeddings=max(seq, 8192),
                      attention_dropout=0.0, use_cache=False, **shape)
    cfg._attn_implementation = "sdpa"
    return cfg


def ac_wrapper(policy):
    """checkpoint_wrapper as the reference harness applies it (torchtitan's
    non-reentrant wrapper; SAC with its op list), or None."""
    if policy not in ("sac", "full"):
        return None
    return harness.ac_wrapper(TORCH_REFERENCE, "torchtitan" if policy == "sac" else "full")


def build(policy, layers, seq, device, tiny, fused):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config(layers, seq, tiny))
    if policy == EAGER:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, fused=device.type == "cuda")
        return model, opt
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = policy != "noreshard"
    wrap = ac_wrapper(policy)
    for i, layer in enumerate(model.model.layers):
        if wrap is not None:
            layer = wrap(layer)
            model.model.layers[i] = layer
        fully_shard(layer, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=mp, reshard_after_forward=reshard)
    opt_kw = {"fused": True} if fused else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, **opt_kw)
    return model, opt


class Run:
    """One (policy, layers, batch) on the device: build, steps, cleanup."""

    def __init__(self, args, device):
        self.args, self.device = args, device
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def __call__(self, policy, layers, batch, timed, warmup, trace_path):
        args, device = self.args, self.device
        model = opt = None
        try:
            if self.cuda:
                gc.collect()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            model, opt = build(policy, layers, args.seq, device, args.tiny, args.fused)
            vocab = model.config.vocab_size
            gen = torch.Generator(device=device).manual_seed(0)
            ids = torch.randint(0, vocab, (batch, args.seq), device=device, generator=gen)
            losses = []

            def step():
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=policy == EAGER):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.item())  # synchronises

            times = []
            for i in range(warmup + timed):
                self.sync()
                t0 = time.perf_counter()
                step()
                self.sync()
                if i >= warmup:
                    times.append((time.perf_counter() - t0) * 1e3)
            row = {"policy": policy, "layers": layers, "batch": batch, "seq": args.seq,
                   "optimizer": "AdamW fused" if args.fused or policy == EAGER
                   else "AdamW default (foreach on CUDA)",
                   "step_ms": statistics.median(times) if times else None,
                   "step_ms_all": times,
                   "peak_allocated_bytes": torch.cuda.max_memory_allocated() if self.cuda else None,
                   "peak_reserved_bytes": torch.cuda.max_memory_reserved() if self.cuda else None,
                   "params": sum(p.numel() for p in model.parameters())}
            if times:
                row["tokens_per_s"] = batch * args.seq / (row["step_ms"] / 1e3)
            if trace_path:
                raw, gz = kineto_record.record(step, trace_path, steps=2, cuda=self.cuda)
                row.update(trace=os.path.basename(trace_path), trace_bytes=raw, trace_gz_bytes=gz)
            row["losses"] = losses
            return row
        except torch.cuda.OutOfMemoryError as e:
            return {"policy": policy, "layers": layers, "batch": batch, "seq": args.seq,
                    "oom": True, "error": str(e).splitlines()[0][:300]}
        finally:
            model = opt = None
            gc.collect()
            if self.cuda:
                torch.cuda.empty_cache()


def choose_layers(run, args):
    """Largest layer count whose predicted peak (line through the 1- and
    2-layer peaks of one noreshard step) fits in --fill of the memory."""
    probe = [run("noreshard", n, args.batch, 1, 0, None) for n in (1, 2)]
    if any(p.get("oom") for p in probe):
        return None, {"probe": probe, "why": "out of memory at 1 or 2 layers"}
    a = probe[0]["peak_reserved_bytes"]
    b = probe[1]["peak_reserved_bytes"] - a  # bytes per layer
    total = torch.cuda.mem_get_info()[1]
    fit = int((args.fill * total - (a - b)) // b) if b > 0 else MAX_LAYERS
    layers = max(1, min(MAX_LAYERS, fit))
    return layers, {"probe": [{k: p[k] for k in ("layers", "peak_allocated_bytes",
                                                  "peak_reserved_bytes", "step_ms")}
                              for p in probe],
                    "bytes_per_layer": b, "device_bytes": total, "fill": args.fill,
                    "layers_that_fit": fit, "layers": layers}


def save(out, path):
    with open(path + ".part", "w") as f:
        json.dump(out, f, indent=1)
    os.replace(path + ".part", path)


def init_world(device):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if dist.get_world_size() != 1:
        sys.exit("record_llama.py: world size %d; this records one GPU" % dist.get_world_size())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", required=True)
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--layers", type=int, help="default: as many as fit (probed)")
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--batch2", type=int, default=2, help="second batch size; 0: none")
    p.add_argument("--steps", type=int, default=3, help="timed steps after --warmup")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--fill", type=float, default=0.9, help="fraction of memory to plan for")
    p.add_argument("--fused", action="store_true", help="fused AdamW")
    p.add_argument("--no-trace", action="store_true")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="tiny config (a CPU check of the script)")
    args = p.parse_args()
    policies = [x for x in args.policies.split(",") if x]
    bad = [x for x in policies if x not in POLICIES + (EAGER,)]
    if bad:
        sys.exit("record_llama.py: unknown policy %r (known: %s)" % (
            bad[0], ", ".join(POLICIES + (EAGER,))))
    if args.seq < 2 or args.batch < 1 or args.batch2 < 0 or args.steps < 1 or args.warmup < 0:
        sys.exit("record_llama.py: --seq >= 2, --batch >= 1, --batch2 >= 0, --steps >= 1, "
                 "--warmup >= 0")
    if not 0 < args.fill <= 1:
        sys.exit("record_llama.py: --fill must be in (0, 1]")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("record_llama.py: no CUDA device (torch.cuda.is_available() is False)")
    if args.device == "cpu" and args.layers is None:
        sys.exit("record_llama.py: --device cpu needs --layers (the probe reads CUDA memory)")
    os.makedirs(args.out_dir, exist_ok=True)
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    init_world(device)
    import transformers
    run = Run(args, device)
    out = {"model": "Llama-3-8B shape (transformers LlamaForCausalLM, sdpa)", "world": 1,
           "fsdp": "fully_shard per decoder layer + root, param bf16, reduce fp32",
           "torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(device) if run.cuda else "cpu",
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if run.cuda else None,
           "runs": []}
    layers = args.layers
    if layers is None:
        layers, out["probe"] = choose_layers(run, args)
        if layers is None:
            print(json.dumps(out))
            sys.exit("record_llama.py: " + out["probe"]["why"])
    out["layers"] = layers
    path = os.path.join(args.out_dir, "llama.json")
    save(out, path)
    # The second batch: fewer steps and no trace (the time limit is short).
    plan = [(args.batch, args.steps, args.warmup, not args.no_trace)]
    if args.batch2 and args.batch2 != args.batch:
        plan.append((args.batch2, min(args.steps, 2), min(args.warmup, 1), False))
    for batch, timed, warmup, traced in plan:
        for policy in policies:
            trace = os.path.join(args.out_dir, "llama-%s-b%d.json.gz" % (policy, batch)) \
                if traced else None
            t0 = time.time()
            row = run(policy, layers, batch, timed, warmup, trace)
            row["wall_s"] = round(time.time() - t0, 1)
            out["runs"].append(row)
            save(out, path)  # after every run: a time limit keeps what was measured
            print(json.dumps({k: row.get(k) for k in ("policy", "batch", "layers", "step_ms", "oom",
                                                       "peak_allocated_bytes", "wall_s")}),
                  file=sys.stderr, flush=True)
    print(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
