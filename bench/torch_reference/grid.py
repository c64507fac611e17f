"""The reference grid: which models and FSDP setups run_grid.py measures.

Plain data, no torch import. A configuration ("spec") is a dict:

  family      "gpt2" | "llama" | "mistral" | "qwen2" | "qwen3" | "gemma" | "gemma2" | "phi3"
              | "gpt_neox" | "opt" | "mixtral" | "qwen2_moe" | "olmoe" | "stablelm" | "olmo2"
              (causal LMs) | "vit" (image classification): the Hugging Face model_type;
              or "custom" (a model of models_custom.py)
  model       keyword arguments of the family's config class (GPT2Config, ...,
              ViTConfig; dropout probabilities are forced to 0 by the harness), or for
              "custom" {"class": "UNet", "args": {constructor keyword arguments}}
  model_name  short label of the model, used in the file name
  flavor      "fsdp2" (fully_shard) | "fsdp1" (FullyShardedDataParallel)
  world       W, the fake process group's size (the run is rank 0 of W)
  batch, seq  micro-batch size B and sequence length T (seq: causal LMs only; an image
              model's input size is its own)
  param_dtype, reduce_dtype   "fp32" | "bf16"
  reshard     True | False | int k (fsdp2 only: reshard to k ranks after forward)
  ac          "none" | "full" (non-reentrant checkpoint of every decoder layer) |
              {"every": k, "offset": o} (layers j with j % k == o checkpointed whole) |
              "torchtitan" (torchtitan v0.2.2's op-level selective checkpointing of every
              layer, torchtitan_sac.py, with the CPU SDPA kernel saved as torchtitan saves
              the GPU ones)
  steps       training steps; the last one is measured
  overrides   (optional, fsdp2) [{"units": [unit names], "reshard", "param_dtype",
              "reduce_dtype"}]: per-unit fully_shard arguments, later entries winning
              (unit names: decoder-layer module paths, "<root>" for the root)
  subdir      (optional) "no-builder": written to tests/reference/no-builder/ (models
              shardscope has no builder for; the C++ test reads tests/reference/*.json)

The models are small (hidden 128-256, 2-4 layers, vocab 1000-2051) with the
ratios of the real families: GPT-2 MLP 4x, Llama/Mistral SwiGLU ~8/3 x
rounded, GQA 4:1 / 2:1, vocabularies that do not always divide by the world
size (so shards are padded).
"""

MODELS = {
    # GPT-2 family: Conv1D layers, learned positions, tied lm_head by default.
    "gpt2-h128-l2": ("gpt2", dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                  n_positions=256, activation_function="gelu_new")),
    "gpt2-h256-l4-untied": ("gpt2", dict(n_layer=4, n_embd=256, n_head=8, vocab_size=2051,
                                         n_positions=512, activation_function="gelu_new",
                                         tie_word_embeddings=False)),
    "gpt2-h128-l2-geluptanh": ("gpt2", dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                            n_positions=256,
                                            activation_function="gelu_pytorch_tanh")),
    "gpt2-h128-l2-gelu": ("gpt2", dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                       n_positions=256, activation_function="gelu")),
    # Llama family: RMSNorm, RoPE, SwiGLU, untied by default.
    "llama-h128-l2-gqa2": ("llama", dict(hidden_size=128, intermediate_size=352,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=1024,
                                         max_position_embeddings=512, hidden_act="silu")),
    "llama-h128-l2-mha-tied": ("llama", dict(hidden_size=128, intermediate_size=352,
                                             num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=4, vocab_size=1024,
                                             max_position_embeddings=512, hidden_act="silu",
                                             tie_word_embeddings=True)),
    "llama-h256-l4-gqa4": ("llama", dict(hidden_size=256, intermediate_size=688,
                                         num_hidden_layers=4, num_attention_heads=8,
                                         num_key_value_heads=2, vocab_size=2048,
                                         max_position_embeddings=512, hidden_act="silu")),
    "llama-h192-l3-gqa3-tied": ("llama", dict(hidden_size=192, intermediate_size=512,
                                              num_hidden_layers=3, num_attention_heads=6,
                                              num_key_value_heads=2, vocab_size=2000,
                                              max_position_embeddings=512, hidden_act="silu",
                                              tie_word_embeddings=True)),
    # Activations HF's Llama accepts (a GeGLU MLP); shardscope may reject them.
    "llama-h128-l2-gqa2-geluptanh": ("llama", dict(hidden_size=128, intermediate_size=352,
                                                   num_hidden_layers=2, num_attention_heads=4,
                                                   num_key_value_heads=2, vocab_size=1024,
                                                   max_position_embeddings=512,
                                                   hidden_act="gelu_pytorch_tanh")),
    "llama-h128-l2-gqa2-gelu": ("llama", dict(hidden_size=128, intermediate_size=352,
                                              num_hidden_layers=2, num_attention_heads=4,
                                              num_key_value_heads=2, vocab_size=1024,
                                              max_position_embeddings=512, hidden_act="gelu")),
    # Mistral: Llama with a sliding window (here larger than T: no effect, no mask),
    # and one with a window smaller than T (HF then materializes a mask).
    "mistral-h128-l2-gqa4": ("mistral", dict(hidden_size=128, intermediate_size=448,
                                             num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=1, vocab_size=1000,
                                             max_position_embeddings=512, hidden_act="silu",
                                             sliding_window=4096)),
    "mistral-h128-l2-gqa4-sw64": ("mistral", dict(hidden_size=128, intermediate_size=448,
                                                  num_hidden_layers=2, num_attention_heads=4,
                                                  num_key_value_heads=1, vocab_size=1000,
                                                  max_position_embeddings=512,
                                                  hidden_act="silu", sliding_window=64)),
    # Qwen2: Llama with biases on q/k/v_proj, tied here (as Qwen2.5-0.5B).
    "qwen2-h128-l2-gqa2-tied": ("qwen2", dict(hidden_size=128, intermediate_size=352,
                                              num_hidden_layers=2, num_attention_heads=4,
                                              num_key_value_heads=2, vocab_size=1024,
                                              max_position_embeddings=512, hidden_act="silu",
                                              tie_word_embeddings=True,
                                              use_sliding_window=False)),
    # Qwen3: per-head q_norm/k_norm, head_dim 64 (H*D = 256 != hidden 128), tied.
    "qwen3-h128-l2-gqa2-hd64-tied": ("qwen3", dict(hidden_size=128, intermediate_size=352,
                                                   num_hidden_layers=2, num_attention_heads=4,
                                                   num_key_value_heads=2, head_dim=64,
                                                   vocab_size=1024, max_position_embeddings=512,
                                                   tie_word_embeddings=True,
                                                   use_sliding_window=False)),
    # Gemma: normalizer, (1 + w) RMSNorm in fp32, GeGLU, multi-query, tied.
    "gemma-h128-l2-mqa-hd64": ("gemma", dict(hidden_size=128, intermediate_size=352,
                                             num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=1, head_dim=64,
                                             vocab_size=1024, max_position_embeddings=512,
                                             hidden_act="gelu_pytorch_tanh")),
    # Gemma 2: sandwich norms, logit soft-capping (saved tanh of the logits),
    # layer 0 with a 64-token window (SDPA; transformers' default ignores the
    # attention softcap, which changes no memory).
    "gemma2-h128-l2-gqa2-sw64": ("gemma2", dict(hidden_size=128, intermediate_size=352,
                                                num_hidden_layers=2, num_attention_heads=4,
                                                num_key_value_heads=2, head_dim=32,
                                                vocab_size=1024, max_position_embeddings=512,
                                                query_pre_attn_scalar=32, sliding_window=64)),
    # Phi-3: packed qkv_proj (GQA) and gate_up_proj, a 64-token window on every layer.
    "phi3-h128-l2-gqa2-sw64": ("phi3", dict(hidden_size=128, intermediate_size=352,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2, vocab_size=1024,
                                            max_position_embeddings=512,
                                            original_max_position_embeddings=512,
                                            sliding_window=64, pad_token_id=0,
                                            bos_token_id=1, eos_token_id=2)),
    # GPT-NeoX (Pythia's shape): per-head fused qkv, partial rotary 0.25,
    # parallel residual, biased GELU MLP 4x, untied embed_out.
    "neox-h128-l2-rot25": ("gpt_neox", dict(hidden_size=128, intermediate_size=512,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            vocab_size=1000, max_position_embeddings=512,
                                            rotary_pct=0.25, rotary_emb_base=10000,
                                            use_parallel_residual=True, hidden_act="gelu",
                                            tie_word_embeddings=False)),
    # Mixture of experts: Mixtral (4 experts, top-2, no shared expert) and Qwen2-MoE
    # (4 experts, top-2, a shared expert with a sigmoid gate; layer 1 dense).
    "mixtral-h128-l2-e4k2": ("mixtral", dict(hidden_size=128, intermediate_size=192,
                                             num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=2, vocab_size=1024,
                                             max_position_embeddings=512, num_local_experts=4,
                                             num_experts_per_tok=2, sliding_window=None,
                                             output_router_logits=False)),
    "qwen2moe-h128-l3-e4k2": ("qwen2_moe", dict(hidden_size=128, intermediate_size=256,
                                                num_hidden_layers=3, num_attention_heads=4,
                                                num_key_value_heads=2, vocab_size=1024,
                                                max_position_embeddings=512, num_experts=4,
                                                num_experts_per_tok=2, moe_intermediate_size=96,
                                                shared_expert_intermediate_size=160,
                                                norm_topk_prob=False, decoder_sparse_step=1,
                                                mlp_only_layers=[1], output_router_logits=False)),
    # OPT (opt-350m's shape): post-LN, project_in/out 128 <-> 64, ReLU FFN 4x,
    # learned positions offset by 2, tied lm_head.
    "opt-h128-l2-postln-proj64": ("opt", dict(hidden_size=128, ffn_dim=512, num_hidden_layers=2,
                                              num_attention_heads=4, vocab_size=1000,
                                              max_position_embeddings=512,
                                              word_embed_proj_dim=64,
                                              do_layer_norm_before=False,
                                              activation_function="relu")),
    # Published models at their real hidden size, head layout and vocabulary
    # (tests/recorded/hf/param_counts.json has the full configs), with 1-2
    # layers: the embedding and lm_head dominate, as in training with few
    # ranks. Tied ones exercise the gradient of a shared weight at full size.
    "qwen3-0.6b-l2": ("qwen3", dict(hidden_size=1024, intermediate_size=3072,
                                    num_hidden_layers=2, num_attention_heads=16,
                                    num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                    max_position_embeddings=40960, rope_theta=1000000.0,
                                    rms_norm_eps=1e-06, attention_bias=False,
                                    tie_word_embeddings=True, use_sliding_window=False)),
    "qwen2.5-0.5b-l2": ("qwen2", dict(hidden_size=896, intermediate_size=4864,
                                      num_hidden_layers=2, num_attention_heads=14,
                                      num_key_value_heads=2, vocab_size=151936,
                                      max_position_embeddings=32768, rope_theta=1000000.0,
                                      rms_norm_eps=1e-06, tie_word_embeddings=True,
                                      use_sliding_window=False)),
    "gemma-2-2b-l2": ("gemma2", dict(hidden_size=2304, intermediate_size=9216,
                                     num_hidden_layers=2, num_attention_heads=8,
                                     num_key_value_heads=4, head_dim=256, vocab_size=256000,
                                     max_position_embeddings=8192, rope_theta=10000.0,
                                     rms_norm_eps=1e-06, hidden_activation="gelu_pytorch_tanh",
                                     query_pre_attn_scalar=256, sliding_window=4096,
                                     final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
                                     attention_bias=False)),
    # Llama 3.2 1B's widths and tying (its llama3 rope_scaling left out: it
    # changes no memory, and shardscope's engine rejects it).
    "llama-3.2-1b-l2": ("llama", dict(hidden_size=2048, intermediate_size=8192,
                                      num_hidden_layers=2, num_attention_heads=32,
                                      num_key_value_heads=8, head_dim=64, vocab_size=128256,
                                      max_position_embeddings=131072, rope_theta=500000.0,
                                      rms_norm_eps=1e-05, hidden_act="silu",
                                      tie_word_embeddings=True)),
    "gpt2-small-l2": ("gpt2", dict(n_layer=2, n_embd=768, n_head=12, n_positions=1024,
                                   vocab_size=50257)),
    "pythia-410m-l2": ("gpt_neox", dict(hidden_size=1024, intermediate_size=4096,
                                        num_hidden_layers=2, num_attention_heads=16,
                                        vocab_size=50304, max_position_embeddings=2048,
                                        rotary_pct=0.25, rotary_emb_base=10000,
                                        layer_norm_eps=1e-05, use_parallel_residual=True,
                                        hidden_act="gelu", tie_word_embeddings=False)),
    "opt-350m-l2": ("opt", dict(hidden_size=1024, ffn_dim=4096, num_hidden_layers=2,
                                num_attention_heads=16, vocab_size=50272,
                                max_position_embeddings=2048, word_embed_proj_dim=512,
                                do_layer_norm_before=False, activation_function="relu")),
    "phi-3-mini-l2": ("phi3", dict(hidden_size=3072, intermediate_size=8192,
                                   num_hidden_layers=2, num_attention_heads=32,
                                   num_key_value_heads=32, vocab_size=32064,
                                   max_position_embeddings=4096,
                                   original_max_position_embeddings=4096, rope_theta=10000.0,
                                   rms_norm_eps=1e-05, hidden_act="silu", sliding_window=2047,
                                   tie_word_embeddings=False, pad_token_id=32000,
                                   bos_token_id=1, eos_token_id=32000)),
    # Mistral 7B v0.1 (untied, GQA 32/8, window 4096 > T: no mask), Mixtral 8x7B
    # (8 experts of Mistral's MLP, top-2; one layer: 1.4 G parameters per layer),
    # Qwen1.5-MoE-A2.7B (60 experts top-4 of width 1408, a gated shared expert of
    # 5632; one layer) and Gemma 2B (multi-query, head_dim 256, tied 256000 vocab).
    "mistral-7b-l2": ("mistral", dict(hidden_size=4096, intermediate_size=14336,
                                      num_hidden_layers=2, num_attention_heads=32,
                                      num_key_value_heads=8, vocab_size=32000,
                                      max_position_embeddings=32768, rope_theta=10000.0,
                                      rms_norm_eps=1e-05, hidden_act="silu",
                                      sliding_window=4096, tie_word_embeddings=False)),
    "mixtral-8x7b-l1": ("mixtral", dict(hidden_size=4096, intermediate_size=14336,
                                        num_hidden_layers=1, num_attention_heads=32,
                                        num_key_value_heads=8, vocab_size=32000,
                                        max_position_embeddings=32768, rope_theta=1000000.0,
                                        rms_norm_eps=1e-05, num_local_experts=8,
                                        num_experts_per_tok=2, sliding_window=None,
                                        router_aux_loss_coef=0.02, output_router_logits=False,
                                        tie_word_embeddings=False)),
    "qwen1.5-moe-a2.7b-l1": ("qwen2_moe", dict(hidden_size=2048, intermediate_size=5632,
                                               num_hidden_layers=1, num_attention_heads=16,
                                               num_key_value_heads=16, vocab_size=151936,
                                               max_position_embeddings=8192,
                                               rope_theta=1000000.0, rms_norm_eps=1e-06,
                                               decoder_sparse_step=1, mlp_only_layers=[],
                                               moe_intermediate_size=1408,
                                               shared_expert_intermediate_size=5632,
                                               num_experts=60, num_experts_per_tok=4,
                                               norm_topk_prob=False, output_router_logits=False,
                                               router_aux_loss_coef=0.001,
                                               use_sliding_window=False,
                                               tie_word_embeddings=False)),
    "gemma-2b-l2": ("gemma", dict(hidden_size=2048, intermediate_size=16384,
                                  num_hidden_layers=2, num_attention_heads=8,
                                  num_key_value_heads=1, head_dim=256, vocab_size=256000,
                                  max_position_embeddings=8192, rope_theta=10000.0,
                                  rms_norm_eps=1e-06, hidden_act="gelu_pytorch_tanh",
                                  hidden_activation="gelu_pytorch_tanh",
                                  attention_bias=False)),
    # ---- Families shardscope has no builder for (tests/reference/no-builder/): the
    # published config.json values of each model, fewer layers where noted.
    # allenai/OLMoE-1B-7B-0924 (16 layers): q_norm/k_norm RMSNorm over the whole
    # projection, 64 experts of width 1024, top-8, no shared expert, untied.
    "olmoe-1b-7b-l1": ("olmoe", dict(hidden_size=2048, intermediate_size=1024,
                                     num_hidden_layers=1, num_attention_heads=16,
                                     num_key_value_heads=16, vocab_size=50304,
                                     max_position_embeddings=4096, rope_theta=10000.0,
                                     rope_scaling=None, rms_norm_eps=1e-05, hidden_act="silu",
                                     attention_bias=False, clip_qkv=None, num_experts=64,
                                     num_experts_per_tok=8, norm_topk_prob=False,
                                     output_router_logits=False, router_aux_loss_coef=0.01,
                                     initializer_range=0.02, pad_token_id=1,
                                     bos_token_id=None, eos_token_id=50279,
                                     tie_word_embeddings=False)),
    # stabilityai/stablelm-2-1_6b (24 layers): LayerNorm with bias, q/k/v biases,
    # partial rotary 0.25, sequential residual, untied 100352 vocabulary.
    "stablelm-2-1.6b-l2": ("stablelm", dict(hidden_size=2048, intermediate_size=5632,
                                            num_hidden_layers=2, num_attention_heads=32,
                                            num_key_value_heads=32, vocab_size=100352,
                                            max_position_embeddings=4096, rope_theta=10000,
                                            partial_rotary_factor=0.25, layer_norm_eps=1e-05,
                                            hidden_act="silu", use_qkv_bias=True,
                                            qk_layernorm=False, use_parallel_residual=False,
                                            initializer_range=0.02, bos_token_id=100257,
                                            eos_token_id=100257, tie_word_embeddings=False)),
    # allenai/OLMo-2-1124-7B (32 layers): post-sublayer RMSNorm (no pre-norm),
    # q_norm/k_norm over the whole projection, untied 100352 vocabulary.
    "olmo2-1124-7b-l2": ("olmo2", dict(hidden_size=4096, intermediate_size=11008,
                                       num_hidden_layers=2, num_attention_heads=32,
                                       num_key_value_heads=32, vocab_size=100352,
                                       max_position_embeddings=4096, rope_theta=500000,
                                       rope_scaling=None, rms_norm_eps=1e-06, hidden_act="silu",
                                       attention_bias=False, initializer_range=0.02,
                                       pad_token_id=100277, bos_token_id=None,
                                       eos_token_id=100257, tie_word_embeddings=False)),
    # google/vit-base-patch16-224 (all 12 layers): 196 patches + [CLS], pre-LN,
    # GELU MLP 4x, q/k/v biases, a 1000-class head on [CLS] (no pooler).
    "vit-base-p16-224": ("vit", dict(hidden_size=768, num_hidden_layers=12,
                                     num_attention_heads=12, intermediate_size=3072,
                                     hidden_act="gelu", layer_norm_eps=1e-12, image_size=224,
                                     patch_size=16, num_channels=3, qkv_bias=True,
                                     initializer_range=0.02, num_labels=1000)),
    # models_custom.UNet: a DDPM-style diffusion UNet on 32 x 32 RGB, channels
    # 128/256/256, attention at 8 x 8 (24,520,195 parameters).
    "unet-c128-m122-s32": ("custom", {"class": "UNet",
                                      "args": dict(in_channels=3, out_channels=3, image_size=32,
                                                   base_channels=128, channel_mult=[1, 2, 2],
                                                   num_res_blocks=2, num_heads=4, groups=32)}),
}

# (model, flavor, param_dtype, reduce_dtype, world, batch, seq, reshard, ac)
_RUNS = [
    # GPT-2, tied, gelu_new
    ("gpt2-h128-l2", "fsdp2", "fp32", "fp32", 2, 2, 128, True, "none"),
    ("gpt2-h128-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("gpt2-h128-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, False, "none"),
    ("gpt2-h128-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, 2, "none"),
    ("gpt2-h128-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "full"),
    ("gpt2-h128-l2", "fsdp2", "fp32", "fp32", 4, 4, 64, False, "full"),
    ("gpt2-h128-l2", "fsdp2", "bf16", "fp32", 16, 1, 256, True, "none"),
    # GPT-2, untied, 4 layers
    ("gpt2-h256-l4-untied", "fsdp2", "bf16", "fp32", 8, 2, 256, True, "none"),
    ("gpt2-h256-l4-untied", "fsdp2", "bf16", "fp32", 8, 2, 256, 4, "full"),
    ("gpt2-h256-l4-untied", "fsdp2", "fp32", "fp32", 2, 4, 128, True, "full"),
    # GPT-2 activations
    ("gpt2-h128-l2-geluptanh", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("gpt2-h128-l2-gelu", "fsdp2", "fp32", "fp32", 4, 2, 128, True, "none"),
    # Llama GQA, untied, silu
    ("llama-h128-l2-gqa2", "fsdp2", "fp32", "fp32", 2, 2, 128, True, "none"),
    ("llama-h128-l2-gqa2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("llama-h128-l2-gqa2", "fsdp2", "bf16", "fp32", 8, 2, 128, False, "none"),
    ("llama-h128-l2-gqa2", "fsdp2", "bf16", "fp32", 8, 2, 128, 2, "none"),
    ("llama-h128-l2-gqa2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "full"),
    ("llama-h128-l2-gqa2", "fsdp2", "bf16", "fp32", 4, 4, 256, 2, "full"),
    ("llama-h128-l2-gqa2", "fsdp2", "bf16", "fp32", 16, 1, 512, True, "none"),
    ("llama-h128-l2-gqa2", "fsdp2", "bf16", "bf16", 8, 2, 128, True, "none"),
    # Llama MHA, tied
    ("llama-h128-l2-mha-tied", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("llama-h128-l2-mha-tied", "fsdp2", "fp32", "fp32", 4, 2, 128, False, "full"),
    # Llama, wider and deeper
    ("llama-h256-l4-gqa4", "fsdp2", "bf16", "fp32", 8, 2, 256, True, "none"),
    ("llama-h256-l4-gqa4", "fsdp2", "bf16", "fp32", 8, 2, 256, 4, "full"),
    ("llama-h256-l4-gqa4", "fsdp2", "fp32", "fp32", 16, 1, 128, True, "none"),
    ("llama-h192-l3-gqa3-tied", "fsdp2", "bf16", "fp32", 4, 3, 192, True, "none"),
    # Llama with GeGLU activations
    ("llama-h128-l2-gqa2-geluptanh", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("llama-h128-l2-gqa2-gelu", "fsdp2", "fp32", "fp32", 8, 2, 128, True, "none"),
    # Mistral
    ("mistral-h128-l2-gqa4", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("mistral-h128-l2-gqa4", "fsdp2", "fp32", "fp32", 2, 2, 256, False, "full"),
    ("mistral-h128-l2-gqa4-sw64", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    # Qwen2
    ("qwen2-h128-l2-gqa2-tied", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("qwen2-h128-l2-gqa2-tied", "fsdp2", "fp32", "fp32", 4, 2, 128, False, "full"),
    # Qwen3, Gemma, Gemma 2, Phi-3
    ("qwen3-h128-l2-gqa2-hd64-tied", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("gemma-h128-l2-mqa-hd64", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("gemma2-h128-l2-gqa2-sw64", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("gemma2-h128-l2-gqa2-sw64", "fsdp2", "fp32", "fp32", 4, 2, 128, False, "full"),
    ("phi3-h128-l2-gqa2-sw64", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    # GPT-NeoX and OPT
    ("neox-h128-l2-rot25", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("opt-h128-l2-postln-proj64", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    # Mixture of experts (real routing: the recorded tokens per expert are compared with
    # shardscope's stated balance in docs/accuracy.md)
    ("mixtral-h128-l2-e4k2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("mixtral-h128-l2-e4k2", "fsdp2", "fp32", "fp32", 4, 2, 128, False, "full"),
    ("qwen2moe-h128-l3-e4k2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    # FSDP1 (FullyShardedDataParallel, use_orig_params=True)
    ("gpt2-h128-l2", "fsdp1", "fp32", "fp32", 8, 2, 128, True, "none"),
    ("gpt2-h128-l2", "fsdp1", "bf16", "fp32", 8, 2, 128, False, "none"),
    ("llama-h128-l2-gqa2", "fsdp1", "bf16", "fp32", 8, 2, 128, True, "full"),
    ("llama-h128-l2-gqa2", "fsdp1", "fp32", "fp32", 4, 2, 128, True, "none"),
    # Selective checkpointing: torchtitan's per-op policy, and every other layer
    # (torchtitan's layer frequency 2: layers 1, 3, ...)
    ("llama-h256-l4-gqa4", "fsdp2", "bf16", "fp32", 8, 2, 256, True, "torchtitan"),
    ("qwen2-h128-l2-gqa2-tied", "fsdp2", "fp32", "fp32", 4, 2, 128, True, "torchtitan"),
    ("llama-h256-l4-gqa4", "fsdp2", "bf16", "fp32", 8, 2, 256, True, {"every": 2, "offset": 1}),
    # Published sizes, 2 layers (tied: Qwen3, Qwen2.5, Gemma 2, Llama 3.2, GPT-2, OPT)
    ("qwen3-0.6b-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("qwen2.5-0.5b-l2", "fsdp2", "fp32", "fp32", 4, 2, 128, True, "full"),
    ("gemma-2-2b-l2", "fsdp2", "fp32", "fp32", 8, 1, 64, True, "full"),
    ("llama-3.2-1b-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("gpt2-small-l2", "fsdp2", "fp32", "fp32", 4, 2, 128, False, "none"),
    ("pythia-410m-l2", "fsdp2", "fp32", "fp32", 8, 2, 128, True, "full"),
    ("opt-350m-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, 4, "none"),
    ("phi-3-mini-l2", "fsdp2", "bf16", "fp32", 8, 1, 128, False, "none"),
    # Published sizes, 2026-11-29: Mistral bf16 with checkpointing and fp32 without
    # (untied), Mixtral and Qwen1.5-MoE (one layer; Mixtral with bf16 reduce to halve
    # the 1.4 G-element gradients' buffers), Gemma bf16 tied with checkpointing.
    ("mistral-7b-l2", "fsdp2", "bf16", "fp32", 8, 1, 128, True, "full"),
    ("mistral-7b-l2", "fsdp2", "fp32", "fp32", 8, 1, 64, False, "none"),
    ("mixtral-8x7b-l1", "fsdp2", "bf16", "bf16", 8, 1, 64, True, "none"),
    ("qwen1.5-moe-a2.7b-l1", "fsdp2", "bf16", "fp32", 8, 2, 64, True, "none"),
    ("gemma-2b-l2", "fsdp2", "bf16", "fp32", 8, 2, 64, True, "full"),
]

# Families shardscope has no builder for, written to tests/reference/no-builder/
# (the C++ test reads tests/reference/*.json only). seq None: an image model.
_NO_BUILDER_RUNS = [
    ("unet-c128-m122-s32", "fsdp2", "bf16", "fp32", 8, 2, None, True, "none"),
    ("unet-c128-m122-s32", "fsdp2", "fp32", "fp32", 4, 4, None, True, "full"),
    ("vit-base-p16-224", "fsdp2", "bf16", "fp32", 8, 2, None, True, "none"),
    ("vit-base-p16-224", "fsdp2", "fp32", "fp32", 4, 2, None, True, "full"),
    ("stablelm-2-1.6b-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "full"),
    ("stablelm-2-1.6b-l2", "fsdp2", "fp32", "fp32", 8, 1, 128, True, "none"),
    ("olmoe-1b-7b-l1", "fsdp2", "bf16", "fp32", 8, 1, 64, True, "none"),
    ("olmoe-1b-7b-l1", "fsdp2", "fp32", "fp32", 8, 1, 64, True, "full"),
    ("olmo2-1124-7b-l2", "fsdp2", "bf16", "fp32", 8, 1, 64, True, "full"),
    ("olmo2-1124-7b-l2", "fsdp2", "fp32", "fp32", 8, 1, 64, True, "none"),
    # The other two of each causal LM's {bf16, fp32} x {no, full checkpointing}
    ("stablelm-2-1.6b-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
    ("stablelm-2-1.6b-l2", "fsdp2", "fp32", "fp32", 8, 1, 128, True, "full"),
    ("olmoe-1b-7b-l1", "fsdp2", "bf16", "fp32", 8, 1, 64, True, "full"),
    ("olmoe-1b-7b-l1", "fsdp2", "fp32", "fp32", 8, 1, 64, True, "none"),
    ("olmo2-1124-7b-l2", "fsdp2", "bf16", "fp32", 8, 1, 64, True, "none"),
    ("olmo2-1124-7b-l2", "fsdp2", "fp32", "fp32", 8, 1, 64, True, "full"),
    # Activation-heavy (issue 37 item 4): at T <= 128 the causal LMs peak at a
    # moment of parameters and gradients; at 2,048-4,096 tokens they peak in the
    # loss's backward (the tracker's "Activation" 19-33%: Hugging Face's fp32 loss
    # keeps it under half, README "Activation-dominated runs"). The image
    # models' larger batches put "Activation" at 71% (ViT) and 89% (UNet).
    ("stablelm-2-1.6b-l2", "fsdp2", "bf16", "fp32", 8, 1, 2048, True, "none"),
    ("olmoe-1b-7b-l1", "fsdp2", "bf16", "fp32", 8, 2, 2048, True, "none"),
    ("olmo2-1124-7b-l2", "fsdp2", "bf16", "fp32", 8, 1, 2048, True, "none"),
    ("stablelm-2-1.6b-l2", "fsdp2", "bf16", "fp32", 8, 1, 2048, True, "full"),
    ("stablelm-2-1.6b-l2", "fsdp2", "fp32", "fp32", 8, 1, 2048, True, "none"),
    ("olmoe-1b-7b-l1", "fsdp2", "bf16", "fp32", 8, 2, 2048, True, "full"),
    ("vit-base-p16-224", "fsdp2", "bf16", "fp32", 8, 8, None, True, "none"),
    ("unet-c128-m122-s32", "fsdp2", "bf16", "fp32", 8, 32, None, True, "none"),
]

# Per-unit overrides (fsdp2: each fully_shard call its own arguments), named by a
# label appended to the configuration's name: (label, run as in _RUNS, overrides).
_OVERRIDE_RUNS = [
    # torchtitan's choice: the last block stays unsharded after forward (its
    # backward all-gather would follow at once).
    ("ovLastKeep", ("llama-h256-l4-gqa4", "fsdp2", "bf16", "fp32", 8, 2, 256, True, "none"),
     [{"units": ["model.layers.3"], "reshard": False}]),
    # The root (embeddings, final norm, lm_head) in fp32 over bf16 blocks.
    ("ovRootF32", ("llama-h128-l2-gqa2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
     [{"units": ["<root>"], "param_dtype": "fp32"}]),
    # Two overrides on GPT-2, the later winning: every block kept unsharded, then
    # the first resharded again and computed in fp32.
    ("ovH0F32", ("gpt2-h128-l2", "fsdp2", "bf16", "fp32", 8, 2, 128, True, "none"),
     [{"units": ["transformer.h.0", "transformer.h.1"], "reshard": False},
      {"units": ["transformer.h.0"], "reshard": True, "param_dtype": "fp32"}]),
]


def _raf_label(reshard):
    if reshard is True:
        return "rafT"
    if reshard is False:
        return "rafF"
    return "raf%d" % reshard


def spec_name(spec):
    """gpt2-h128-l2-fsdp2-bf16-w8-b2-t128-rafT-ac0 (reduce dtype only when it differs
    from fp32; ac as _ac_label writes it; no -t for image models, whose input size is
    in the model name)."""
    dt = spec["param_dtype"]
    if spec["reduce_dtype"] != "fp32":
        dt += "-r" + spec["reduce_dtype"]
    seq = "-t%d" % spec["seq"] if "seq" in spec else ""
    return "%s-%s-%s-w%d-b%d%s-%s-%s" % (
        spec["model_name"], spec["flavor"], dt, spec["world"], spec["batch"], seq,
        _raf_label(spec["reshard"]), _ac_label(spec["ac"]))


def _ac_label(ac):
    """ac0 (none), ac1 (full), acE2o1 ({"every": 2, "offset": 1}), acTT (torchtitan)."""
    if isinstance(ac, dict):
        return "acE%do%d" % (ac["every"], ac.get("offset", 0))
    return {"none": "ac0", "full": "ac1", "torchtitan": "acTT"}[ac]


def make_spec(model_name, flavor, param_dtype, reduce_dtype, world, batch, seq, reshard, ac,
              steps=3):
    family, model = MODELS[model_name]
    spec = dict(family=family, model=dict(model), model_name=model_name, flavor=flavor,
                world=world, batch=batch, seq=seq, param_dtype=param_dtype,
                reduce_dtype=reduce_dtype, reshard=reshard, ac=ac, steps=steps)
    if seq is None:  # an image model: its input size is its own
        del spec["seq"]
    spec["name"] = spec_name(spec)
    return spec


def grid():
    specs = [make_spec(*r) for r in _RUNS]
    for run in _NO_BUILDER_RUNS:
        spec = make_spec(*run)
        spec["subdir"] = "no-builder"
        specs.append(spec)
    for label, run, overrides in _OVERRIDE_RUNS:
        spec = make_spec(*run)
        spec["overrides"] = overrides
        spec["name"] += "-" + label
        specs.append(spec)
    names = [s["name"] for s in specs]
    assert len(set(names)) == len(names), "duplicate configuration names in the grid"
    return specs
