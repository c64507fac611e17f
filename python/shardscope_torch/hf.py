"""Hugging Face causal language models: config.json -> export() arguments.

The step traced is the one tests/reference/ records with real FSDP2:
`model(input_ids=x, labels=x).loss` with x a B x T int64 token batch,
use_cache off, every dropout probability as the config sets it (the
exporter's fake tensors make dropout's masks cost what they cost), SDPA
attention (transformers' default). No attention_mask is passed: an all-ones
mask is passed, as the references do (a graph input: B x T int64). Its
all() test in transformers' masking_utils._ignore_causal_mask_sdpa is a
data-dependent value on fake tensors, so while tracing that function sees no
padding mask: the stated assumption is a batch without padding, where
transformers takes SDPA's is_causal path exactly as on real all-ones masks.
"""
import contextlib
import json

import torch


def load_config(path):
    try:
        from transformers import AutoConfig
    except ImportError as e:
        raise SystemExit("shardscope-export: --hf-config needs transformers "
                         "(pip install './python[transformers]')") from e
    with open(path) as f:
        raw = json.load(f)
    if "model_type" not in raw:
        raise ValueError("%s: missing key 'model_type'" % path)
    cfg = AutoConfig.for_model(**raw)
    cfg.use_cache = False
    return raw, cfg


def export_args(raw, cfg, layers=None, attn_implementation="sdpa"):
    from transformers import AutoModelForCausalLM

    if layers is not None:
        if layers < 1:
            raise ValueError("--layers: expected >= 1, got %d" % layers)
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            if hasattr(cfg, key) and isinstance(getattr(cfg, key), int):
                setattr(cfg, key, layers)
        for key in ("layer_types",):  # Gemma 2 and later: one entry per layer
            if isinstance(getattr(cfg, key, None), list):
                setattr(cfg, key, getattr(cfg, key)[:layers])
    if getattr(cfg, "layerdrop", 0) or getattr(cfg, "decoder_layerdrop", 0):
        # A random set of layers per step: the exporter reads random draws as 0.5
        # (tracer.RANDOM_DRAW_VALUE), which is right only when no layer can be dropped.
        raise ValueError("layerdrop %s: a random subset of layers runs each step; only "
                         "layerdrop 0 can be exported" % getattr(cfg, "layerdrop", 0))
    cfg._attn_implementation = attn_implementation
    vocab = int(getattr(cfg, "vocab_size"))

    def model_fn():
        return AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_implementation,
                                                dtype=torch.float32)

    def example_inputs(b, t):
        x = torch.randint(0, vocab, (b, t), dtype=torch.int64)
        mask = torch.ones(b, t, dtype=torch.int64)
        y = torch.randint(0, vocab, (b, t), dtype=torch.int64)
        return {"input_ids": x, "attention_mask": mask, "labels": y}

    max_seq = None
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(getattr(cfg, key, None), int):
            max_seq = getattr(cfg, key)
            break
    wrap = None
    from .routing import from_hf_config
    return {"model_fn": model_fn, "example_inputs": example_inputs, "vocab_size": vocab,
            "max_seq_len": max_seq, "wrap_classes": wrap,
            "routed_blocks": from_hf_config(cfg)}


@contextlib.contextmanager
def no_padding_assumed():
    """While tracing: transformers' SDPA mask skip sees no padding mask (module docstring)."""
    from transformers import masking_utils
    from transformers.modeling_attn_mask_utils import AttentionMaskConverter
    original = masking_utils._ignore_causal_mask_sdpa
    # The older path (OPT and others still on modeling_attn_mask_utils): the same test.
    original_converter = AttentionMaskConverter._ignore_causal_mask_sdpa

    def without_padding(padding_mask, *args, **kwargs):
        return original(None, *args, **kwargs)

    def converter_without_padding(attention_mask, *args, **kwargs):
        return original_converter(None, *args, **kwargs)

    masking_utils._ignore_causal_mask_sdpa = without_padding
    AttentionMaskConverter._ignore_causal_mask_sdpa = staticmethod(converter_without_padding)
    try:
        yield
    finally:
        masking_utils._ignore_causal_mask_sdpa = original
        AttentionMaskConverter._ignore_causal_mask_sdpa = staticmethod(original_converter)


def no_split_modules(cfg):
    """The decoder-layer classes transformers' _no_split_modules names (FSDP's unit)."""
    from transformers import AutoModelForCausalLM
    cls = AutoModelForCausalLM._model_mapping[type(cfg)]
    return list(getattr(cls, "_no_split_modules", None) or [])
