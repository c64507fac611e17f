"""What the harness trains, per kind of model: how the model is built, its inputs,
its loss, which classes become FSDP units, and how the reference file describes
all of that (so that a reader can rebuild the model and the step exactly).

Three kinds, chosen by the spec's family:

  causal_lm             a Hugging Face *ForCausalLM (harness.FAMILIES): config from
                        the spec's keyword arguments; input_ids (B, T), an all-ones
                        attention mask, labels = input_ids, HF's own loss
  image_classification  a Hugging Face *ForImageClassification (VISION_FAMILIES):
                        pixel_values (B, C, S, S) fp32 standard normal, labels (B,)
                        int64 uniform in [0, num_labels), HF's own loss
  custom                a plain nn.Module of models_custom.py (spec family "custom",
                        model {"class": NAME, "args": {...}}): the UNet takes
                        x (B, C, S, S) fp32 standard normal, t (B,) int64 uniform in
                        [0, 1000) and is trained with mse_loss(out.float(), noise),
                        noise (B, C, S, S) fp32 standard normal

Every input comes from one torch.Generator seeded 1, drawn in the order listed
in the record's setup.inputs. Nothing here imports torch at module level.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# family -> (config class, image-classification class, layer class, dropout keys set to 0)
VISION_FAMILIES = {
    "vit": ("ViTConfig", "ViTForImageClassification", "ViTLayer",
            {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
}
CUSTOM_FAMILY = "custom"
# The diffusion UNet's timesteps are drawn from [0, DIFFUSION_STEPS).
DIFFUSION_STEPS = 1000


def kind_of(family, lm_families):
    if family in lm_families:
        return "causal_lm"
    if family in VISION_FAMILIES:
        return "image_classification"
    if family == CUSTOM_FAMILY:
        return "custom"
    return None


def _custom_models():
    sys.path.insert(0, HERE)
    import models_custom
    return models_custom.CUSTOM_MODELS


def _hf_config(transformers, cfg_cls_name, model_cls_name, kwargs, name, spec_error):
    """The Hugging Face config as config.json would hold it, and the config object
    rebuilt from that dict (so writing the dict out rebuilds the same model)."""
    try:
        cfg0 = getattr(transformers, cfg_cls_name)(**kwargs)
    except Exception as e:  # noqa: BLE001 - reported with the configuration's name
        raise spec_error("configuration '%s': %s(**model) failed: %s: %s"
                         % (name, cfg_cls_name, type(e).__name__, e))
    config = cfg0.to_diff_dict()
    config.pop("transformers_version", None)
    config["architectures"] = [model_cls_name]
    # to_diff_dict drops values equal to PretrainedConfig's defaults; this one matters
    config["tie_word_embeddings"] = bool(cfg0.tie_word_embeddings)
    return config


def _rebuild(transformers, config):
    rebuilt = dict(config)
    return transformers.AutoConfig.for_model(rebuilt.pop("model_type"), **rebuilt)


class CausalLM:
    kind = "causal_lm"

    def __init__(self, spec, transformers, families, spec_error):
        cfg_cls_name, self.model_cls_name, block, self.zero_dropout = families[spec["family"]]
        self.block_class_names = [block]
        self.B, self.T = spec["batch"], spec["seq"]
        kwargs = dict(spec["model"])
        kwargs.update(self.zero_dropout)
        kwargs["use_cache"] = False  # training: no KV cache kept alive during forward
        self.config = _hf_config(transformers, cfg_cls_name, self.model_cls_name, kwargs,
                                 spec["name"], spec_error)
        self.cfg = _rebuild(transformers, self.config)
        self.transformers = transformers

    def build(self):
        return self.transformers.AutoModelForCausalLM.from_config(self.cfg,
                                                                  attn_implementation="sdpa")

    def inputs(self, torch, gen):
        x = torch.randint(0, self.cfg.vocab_size, (self.B, self.T), generator=gen)
        # An all-ones attention mask, as a tokenizer gives for unpadded text. Without it
        # transformers 4.57 (use_cache=False, position_ids derived) checks for packed
        # sequences and materializes a B x 1 x T x T mask, which also turns off SDPA's
        # native GQA (K/V get repeated); with it, SDPA runs with is_causal=True and no
        # mask (except where a sliding window shorter than T needs one).
        mask = torch.ones(self.B, self.T, dtype=torch.int64)
        return {"input_ids": x, "attention_mask": mask}

    @staticmethod
    def loss(model, inp):
        return model(input_ids=inp["input_ids"], attention_mask=inp["attention_mask"],
                     labels=inp["input_ids"]).loss

    def setup(self):
        return {
            "call": "loss = model(input_ids=x, attention_mask=ones(B, T), labels=x).loss "
                    "(x: B x T int64 random tokens, also the labels; Hugging Face's own "
                    "causal-LM loss)",
            "use_cache": False,
            "attn_implementation": "sdpa",
            "dropout": "all dropout probabilities 0: " + ", ".join(sorted(self.zero_dropout)),
        }

    def seq_len(self):
        return self.T


class ImageClassification:
    kind = "image_classification"

    def __init__(self, spec, transformers, spec_error):
        cfg_cls_name, self.model_cls_name, block, self.zero_dropout = \
            VISION_FAMILIES[spec["family"]]
        self.block_class_names = [block]
        self.B = spec["batch"]
        kwargs = dict(spec["model"])
        kwargs.update(self.zero_dropout)
        config = _hf_config(transformers, cfg_cls_name, self.model_cls_name, kwargs,
                            spec["name"], spec_error)
        # num_labels is what config.json's id2label/label2id say (1000 ImageNet names
        # for vit-base-patch16-224); the names do not change the model, so the record
        # keeps the count: PretrainedConfig(num_labels=N) rebuilds N generic labels.
        n = len(config.pop("id2label", {}) or {})
        config.pop("label2id", None)
        config["num_labels"] = n or 2
        self.config = config
        self.cfg = _rebuild(transformers, config)
        self.transformers = transformers

    def build(self):
        return self.transformers.AutoModelForImageClassification.from_config(
            self.cfg, attn_implementation="sdpa")

    def input_shape(self):
        c, s = self.cfg.num_channels, self.cfg.image_size
        return [self.B, c, s, s]

    def inputs(self, torch, gen):
        pixels = torch.randn(self.input_shape(), generator=gen)
        labels = torch.randint(0, self.cfg.num_labels, (self.B,), generator=gen)
        return {"pixel_values": pixels, "labels": labels}

    @staticmethod
    def loss(model, inp):
        return model(pixel_values=inp["pixel_values"], labels=inp["labels"]).loss

    def setup(self):
        return {
            "call": "loss = model(pixel_values=x, labels=y).loss (x: B x C x S x S fp32 "
                    "standard normal, y: B int64 uniform in [0, num_labels); Hugging Face's "
                    "own single-label classification loss, cross entropy on the [CLS] logits)",
            "attn_implementation": "sdpa",
            "dropout": "all dropout probabilities 0: " + ", ".join(sorted(self.zero_dropout)),
        }

    def seq_len(self):
        return None


class Custom:
    kind = "custom"

    def __init__(self, spec, spec_error):
        m = spec["model"]
        models = _custom_models()
        if set(m) - {"class", "args"} or m.get("class") not in models:
            raise spec_error("configuration '%s': a custom model is {\"class\": one of %s, "
                             "\"args\": {...}}, got %r" % (spec["name"], sorted(models), m))
        self.cls, wrap = models[m["class"]]
        self.args = dict(m.get("args", {}))
        try:
            self.cls(**self.args)  # checks the arguments before any torch state exists
        except (TypeError, ValueError) as e:
            raise spec_error("configuration '%s': %s(**args) failed: %s"
                             % (spec["name"], m["class"], e))
        self.block_class_names = list(wrap)
        self.B = spec["batch"]
        self.config = None

    def build(self):
        return self.cls(**self.args)

    def input_shape(self):
        """(x's shape, every constructor argument: the defaults, then the spec's)."""
        import inspect
        full = {k: p.default for k, p in inspect.signature(self.cls.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}
        full.update(self.args)
        return [self.B, full["in_channels"], full["image_size"], full["image_size"]], full

    def constructor(self):
        _, full = self.input_shape()
        return {"module": "bench/torch_reference/models_custom.py", "class": self.cls.__name__,
                "args": {k: list(v) if isinstance(v, tuple) else v for k, v in full.items()}}

    def inputs(self, torch, gen):
        shape, full = self.input_shape()
        x = torch.randn(shape, generator=gen)
        t = torch.randint(0, DIFFUSION_STEPS, (self.B,), generator=gen)
        noise = torch.randn([self.B, full["out_channels"]] + shape[2:], generator=gen)
        return {"x": x, "t": t, "noise": noise}

    @staticmethod
    def loss(model, inp):
        import torch.nn.functional as F
        return F.mse_loss(model(inp["x"], inp["t"]).float(), inp["noise"])

    def setup(self):
        return {
            "call": "loss = torch.nn.functional.mse_loss(model(x, t).float(), noise) (x: the "
                    "noisy image, B x C x S x S fp32 standard normal; t: B int64 uniform in "
                    "[0, %d); noise: the target, B x C_out x S x S fp32 standard normal; "
                    "the output upcast to fp32 before the loss, as under bf16 parameters "
                    "it is bf16)" % DIFFUSION_STEPS,
            "dropout": "none in the model",
        }

    def seq_len(self):
        return None


def make(spec, transformers, lm_families, spec_error):
    kind = kind_of(spec["family"], lm_families)
    if kind == "causal_lm":
        return CausalLM(spec, transformers, lm_families, spec_error)
    if kind == "image_classification":
        return ImageClassification(spec, transformers, spec_error)
    return Custom(spec, spec_error)


def describe_inputs(inputs):
    """setup.inputs: each input in generation order, with shape and dtype."""
    names = {"torch.float32": "fp32", "torch.int64": "i64", "torch.bfloat16": "bf16"}
    return [{"name": k, "shape": list(v.shape), "dtype": names.get(str(v.dtype), str(v.dtype))}
            for k, v in inputs.items()]
