#!/usr/bin/env python3
"""Which aten ops one decoder block dispatches, and which of their outputs
torchtitan's op-level selective activation checkpointing saves (CPU).

For each family (Llama without biases, Qwen2 with q/k/v biases, GPT-2 whose
Conv1D calls torch.addmm) it runs one decoder layer of a tiny transformers
model on a [B, T, C] input:
  1. under a TorchDispatchMode that logs every aten op (the ops below autograd,
     which is what a selective-checkpointing policy sees);
  2. under torch.utils.checkpoint with torchtitan's policy (torchtitan_sac.py,
     copied from torchtitan v0.2.2), logging its decisions in forward.

On CPU, SDPA dispatches aten._scaled_dot_product_flash_attention_for_cpu,
which is not in torchtitan's list (it lists the GPU kernels: flash,
efficient, cudnn, ...): the second run marks it "(cpu-sdpa)" and the
`--gpu-sdpa` policy treats it as torchtitan treats the GPU kernels.

Usage: sac_dispatch.py [--gpu-sdpa]     prints one block per family, as JSON
"""
import argparse
import json
import os
import sys

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchtitan_sac  # noqa: E402

class Logger(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


TINY = {
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=128)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=128)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(n_embd=64, n_layer=1, n_head=4, vocab_size=128, n_positions=64,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
}


def block_call(family, B=2, T=16):
    cfg_cls, lm_cls, kw = TINY[family]
    cfg = getattr(transformers, cfg_cls)(**kw)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = getattr(transformers, lm_cls)(cfg)
    x = torch.randn(B, T, cfg.hidden_size if family != "gpt2" else cfg.n_embd,
                    requires_grad=True)
    if family == "gpt2":
        block = model.transformer.h[0]

        def g(h):
            out = block(h)
            return out[0] if isinstance(out, tuple) else out
        return g, x
    layer = model.model.layers[0]
    pos = torch.arange(T).unsqueeze(0)
    emb = model.model.rotary_emb(x, pos)

    def f(h):
        out = layer(h, attention_mask=None, position_ids=pos, position_embeddings=emb)
        return out[0] if isinstance(out, tuple) else out
    return f, x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu-sdpa", action="store_true",
                    help="treat the CPU flash op as torchtitan treats the GPU SDPA kernels")
    args = ap.parse_args()
    result = {"torch": torch.__version__, "transformers": transformers.__version__}
    for family in TINY:
        f, x = block_call(family)
        with Logger() as lg:
            f(x)
        interesting = [o for o in lg.ops
                       if any(k in o for k in ("mm", "addmm", "linear", "scaled_dot", "bmm"))]
        log = []
        ctx = torchtitan_sac.context_fn(cpu_sdpa_as_gpu=args.gpu_sdpa, log=log)
        y = checkpoint(f, x, use_reentrant=False, context_fn=ctx)
        y.sum().backward()
        # In dispatch order: every matmul / attention op with the policy's
        # decision, and the other ops the policy saves (none in these blocks).
        result[family] = {
            "matmul_and_attention_ops": interesting,
            "decisions": ["%s: %s" % (op, d) for op, d in log
                          if d == "save" or any(k in op for k in ("mm", "scaled_dot"))],
        }
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
