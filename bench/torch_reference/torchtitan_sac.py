"""torchtitan's op-level selective activation checkpointing policy, copied
from torchtitan v0.2.2 (2026-02-20) for the PyTorch reference runs:

  torchtitan/distributed/activation_checkpoint.py
      _apply_op_sac -> selective_checkpointing_context_fn ->
      _get_custom_policy(meta)._custom_policy
  torchtitan/models/llama3/infra/parallelize.py
      _op_sac_save_list

shardscope's preset {"preset": "torchtitan"} models this policy on GPUs
(plan/op_checkpointing.h). On CPU, SDPA dispatches
aten._scaled_dot_product_flash_attention_for_cpu, which the list does not
name; `cpu_sdpa_as_gpu=True` adds it, so that a CPU run saves attention as
torchtitan does on a GPU (the only change to torchtitan's policy).
"""
from collections import defaultdict

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

aten = torch.ops.aten


def save_list(cpu_sdpa_as_gpu=False):
    """_op_sac_save_list, for the ops this torch has (flex attention, varlen
    attention and inductor's compiled-code HOP never occur in an eager
    Hugging Face block)."""
    ops = {
        aten.mm.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_cudnn_attention.default,
        aten._scaled_dot_product_attention_math.default,
        aten._scaled_dot_product_fused_attention_overrideable.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        # for low precision training, it's useful to always save
        # the result of max, since the absolute maximum is
        # used to compute the scaling factor for quantization.
        aten.max.default,
    }
    if cpu_sdpa_as_gpu:
        ops.add(aten._scaled_dot_product_flash_attention_for_cpu.default)
    return ops


def custom_policy(meta, ops, log=None):
    """_get_custom_policy(meta)._custom_policy without forced-recompute mm
    shapes (torchtitan's default list names the MoE router only) and without
    the CUDA -> CPU _to_copy rule (no CUDA here). `log`, when given, collects
    (op name, "save" | "recompute") of the forward decisions."""
    def _custom_policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        mm_count_key = f"{mode}_mm_count"
        if func == aten.mm.default:
            meta[mm_count_key] += 1
        # Saves output of all compute ops, except every second mm
        to_save = func in ops and not (
            func == aten.mm.default and meta[mm_count_key] % 2 == 0)
        if log is not None and mode == "forward":
            log.append((str(func), "save" if to_save else "recompute"))
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE
    return _custom_policy


def context_fn(cpu_sdpa_as_gpu=False, log=None):
    """selective_checkpointing_context_fn: a fresh meta (and so a fresh mm
    count) per checkpointed call."""
    ops = save_list(cpu_sdpa_as_gpu)

    def fn():
        return create_selective_checkpoint_contexts(custom_policy(defaultdict(int), ops, log))
    return fn
