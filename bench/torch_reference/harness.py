#!/usr/bin/env python3
"""Runs ONE reference configuration with real PyTorch FSDP on CPU (or, with
--device cuda, on one CUDA GPU) and writes what it measures as JSON (format
"shardscope.torch_reference", version 1).

The run is rank 0 of a fake process group of W ranks (FakeStore +
init_process_group("fake")): every collective is issued with its real sizes,
group and dtype, but nothing is communicated (all-gather outputs hold whatever
torch.empty gave). Memory does not depend on the data, so rank 0's memory is
that of any rank of a real W-rank job on CPU.

Usage:
  harness.py --name NAME --out FILE.json     a configuration of grid.py
  harness.py --spec SPEC.json --out FILE.json   a configuration given as JSON
                                               (the grid.py spec format)
  harness.py ... --device cuda               on CUDA device 0 (default: cpu); the
                                               fake process group is the same
  harness.py --check-api                     only check that the private PyTorch
                                               APIs the harness uses exist

Exit status: 0 written; 2 bad configuration (unknown family, bad key...);
3 PyTorch refused the configuration or failed while running it; 4 --device cuda
but this torch sees no CUDA device; 5 a private PyTorch API the harness uses is
missing or changed (the message names it).
See README.md for what is measured and how ("On a GPU" for --device cuda).
"""
import argparse
import gc
import inspect
import json
import os
import platform
import sys
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

FORMAT = "shardscope.torch_reference"
VERSION = 1

# family -> (config class, causal-LM class, decoder layer class, dropout keys set to 0)
FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", "GPT2Block",
             {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
              "summary_first_dropout": 0.0}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", "LlamaDecoderLayer",
              {"attention_dropout": 0.0}),
    "mistral": ("MistralConfig", "MistralForCausalLM", "MistralDecoderLayer",
                {"attention_dropout": 0.0}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "Qwen2DecoderLayer",
              {"attention_dropout": 0.0}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "Qwen3DecoderLayer",
              {"attention_dropout": 0.0}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", "GemmaDecoderLayer",
              {"attention_dropout": 0.0}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", "Gemma2DecoderLayer",
               {"attention_dropout": 0.0}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", "Phi3DecoderLayer",
             {"attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", "GPTNeoXLayer",
                 {"attention_dropout": 0.0, "hidden_dropout": 0.0}),
    "opt": ("OPTConfig", "OPTForCausalLM", "OPTDecoderLayer",
            {"dropout": 0.0, "attention_dropout": 0.0, "layerdrop": 0.0}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", "MixtralDecoderLayer",
                {"attention_dropout": 0.0, "router_jitter_noise": 0.0}),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", "Qwen2MoeDecoderLayer",
                  {"attention_dropout": 0.0}),
    # Families shardscope has no builder for (references under tests/reference/no-builder/)
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", "OlmoeDecoderLayer",
              {"attention_dropout": 0.0}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", "StableLmDecoderLayer",
                 {"attention_dropout": 0.0, "hidden_dropout": 0.0}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", "Olmo2DecoderLayer",
              {"attention_dropout": 0.0}),
}
# Mixture-of-experts families: the router is the `gate` Linear of each sparse MoE
# block; its top-k decides how many tokens every expert computes (recorded per layer).
MOE_BLOCKS = {"mixtral": "MixtralSparseMoeBlock", "qwen2_moe": "Qwen2MoeSparseMoeBlock",
              "olmoe": "OlmoeSparseMoeBlock"}
FLAVORS = ("fsdp1", "fsdp2")
DTYPE_KEYS = ("fp32", "bf16")
# "torchtitan": torchtitan v0.2.2's op-level selective checkpointing
# (torchtitan_sac.py) with the CPU SDPA kernel treated as torchtitan treats the
# GPU ones (saved); {"every": k, "offset": o}: blocks j % k == o checkpointed whole.
AC_NAMES = ("none", "full", "torchtitan")


def ac_policy_value(ac):
    """The spec's ac as shardscope's activation_checkpointing value (JSON text)."""
    if isinstance(ac, dict):
        return json.dumps({"every": ac["every"], "offset": ac.get("offset", 0)},
                          separators=(",", ":"))
    if ac == "torchtitan":
        return '{"preset":"torchtitan"}'
    return ac


def ac_checkpointed(ac, j):
    """Whether decoder layer j (0-based, model order) is checkpointed."""
    if isinstance(ac, dict):
        return j % ac["every"] == ac.get("offset", 0)
    return ac != "none"


def ac_wrapper(torch_reference_dir, ac):
    """checkpoint_wrapper with the arguments of this ac (non-reentrant)."""
    import functools
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, checkpoint_wrapper)
    if ac == "torchtitan":
        sys.path.insert(0, torch_reference_dir)
        import torchtitan_sac
        # torchtitan's _apply_op_sac: context_fn and early_stop=False (its
        # config default in v0.2.2).
        return functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT,
                                 context_fn=torchtitan_sac.context_fn(cpu_sdpa_as_gpu=True),
                                 early_stop=False)
    return functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
SPEC_KEYS = {"name", "family", "model", "model_name", "flavor", "world", "batch", "seq",
             "param_dtype", "reduce_dtype", "reshard", "ac", "steps", "overrides", "subdir"}
# One entry of a spec's "overrides" (fsdp2 only): the fully_shard arguments of the
# units it names (decoder-layer paths, "<root>" for the root), in list order, a
# later entry winning for the keys it sets.
OVERRIDE_KEYS = {"units", "reshard", "param_dtype", "reduce_dtype"}


# Folders under tests/reference/ a spec may be written to (run_grid.py): "no-builder"
# holds models shardscope has no builder for, which the C++ test does not build.
SUBDIRS = ("no-builder",)


class SpecError(Exception):
    """The configuration itself is wrong (exit 2)."""


class RefusedError(Exception):
    """PyTorch (or transformers) refused the configuration or failed running it (exit 3)."""


class DeviceError(Exception):
    """--device cuda, and this torch has no usable CUDA device (exit 4)."""


class ApiError(Exception):
    """A private PyTorch API the harness relies on is missing or changed (exit 5)."""


DEVICES = ("cpu", "cuda")

# Private (underscore) PyTorch APIs the harness uses: (module, attribute path, what for).
# Checked before a run (check_private_api) so that a PyTorch that moved one fails
# with its name instead of an AttributeError deep inside a step.
PRIVATE_APIS = [
    ("torch.testing._internal.distributed.fake_pg", "FakeStore",
     "the fake process group (init_process_group('fake'))"),
    ("torch.distributed._tools.fsdp2_mem_tracker", "FSDPMemTracker", "memory tracker, FSDP2"),
    ("torch.distributed._tools.fsdp2_mem_tracker", "FSDPMemTracker.track_inputs",
     "memory tracker, FSDP2 inputs"),
    ("torch.distributed._tools.mem_tracker", "MemTracker", "memory tracker, FSDP1"),
    ("torch.distributed._tools.mem_tracker", "MemTracker.track_external", "memory tracker, FSDP1"),
    ("torch.distributed._tools.mem_tracker", "MemTracker.get_tracker_snapshot", "peak breakdown"),
    ("torch.distributed._tools.mem_tracker", "MemTracker._update_peak_stats",
     "peak location and phase peaks (RefTracker overrides it)"),
    ("torch.distributed._tools.mem_tracker", "MemTracker._track_module_params_and_buffers",
     "FSDP1 tracking without gradient hooks (RefTracker overrides it)"),
    ("torch.distributed._tools.mem_tracker", "MemTracker._update_and_maybe_create_winfos",
     "FSDP1 flat parameters and flat gradients registered with the tracker"),
    ("torch.distributed._tools.mem_tracker", "MemTracker.__torch_dispatch__",
     "c10d ops seen by the tracker (collective cross-check)"),
    ("torch.distributed._tools.mem_tracker", "_MemRefType.PARAM", "FSDP1 flat parameters"),
    ("torch.distributed._tools.mem_tracker", "_MemRefType.GRAD", "FSDP1 flat gradients"),
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup.unshard",
     "which FSDP2 unit issues an all-gather"),
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup.post_backward",
     "which FSDP2 unit issues a reduce-scatter"),
    ("torch.distributed.fsdp", "FSDPModule._get_fsdp_state", "FSDP2 units and their shards"),
    ("torch.distributed.fsdp._runtime_utils", "_unshard", "which FSDP1 unit issues an all-gather"),
    ("torch.distributed.fsdp._runtime_utils", "_post_backward_hook",
     "which FSDP1 unit issues a reduce-scatter"),
    ("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "checkpoint_wrapper",
     "activation checkpointing"),
    ("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "CheckpointImpl.NO_REENTRANT",
     "activation checkpointing"),
    ("torch.distributed.algorithms._checkpoint.checkpoint_wrapper",
     "apply_activation_checkpointing", "activation checkpointing, FSDP1"),
    ("torch.utils.checkpoint", "create_selective_checkpoint_contexts",
     "torchtitan's selective checkpointing (torchtitan_sac.py)"),
    ("torch._C._profiler", "_EventType.Allocation", "profiler memory events (CPU)"),
    ("torch._C._profiler", "_EventType.TorchOp", "profiler op events (attention kernels)"),
]
# Attributes of instances, checked where the instances exist: (what, attribute).
TRACKER_ATTRS = ("_peak_mem", "_curr_mem_snap", "_mod_tracker", "_in_opt", "_in_ac")


def check_private_api(torch_version=None):
    """Imports every PRIVATE_APIS entry; raises ApiError naming all that are missing."""
    import importlib
    missing = []
    for mod_name, attr_path, what in PRIVATE_APIS:
        try:
            obj = importlib.import_module(mod_name)
        except Exception as e:  # noqa: BLE001
            missing.append("%s (module: %s: %s) [%s]" % (mod_name, type(e).__name__, e, what))
            continue
        for part in attr_path.split("."):
            if not hasattr(obj, part):
                missing.append("%s.%s [%s]" % (mod_name, attr_path, what))
                break
            obj = getattr(obj, part)
    if not missing:
        import inspect as _inspect
        from torch.distributed._tools.mem_tracker import MemTracker
        params = _inspect.signature(MemTracker._track_module_params_and_buffers).parameters
        if "install_grad_hooks" not in params:
            missing.append("torch.distributed._tools.mem_tracker.MemTracker."
                           "_track_module_params_and_buffers(install_grad_hooks=) "
                           "[FSDP1 tracking without gradient hooks]")
    if missing:
        raise ApiError("private PyTorch API(s) missing or changed in torch %s:\n  %s"
                       % (torch_version or "?", "\n  ".join(missing)))
    return len(PRIVATE_APIS) + 1


def private_attr(obj, attr, what):
    """getattr for a private attribute of a PyTorch object, failing with its name."""
    try:
        return getattr(obj, attr)
    except AttributeError:
        raise ApiError("private PyTorch attribute %s.%s is missing in this torch (%s)"
                       % (type(obj).__name__, attr, what))


# ---- configuration checks (no torch needed) ------------------------------------------

def check_spec(spec):
    name = spec.get("name", "<unnamed>") if isinstance(spec, dict) else "<not an object>"
    where = "configuration '%s'" % name

    def bad(msg):
        raise SpecError("%s: %s" % (where, msg))

    if not isinstance(spec, dict):
        bad("expected a JSON object")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        bad("unknown key(s) %s (known: %s)" % (unknown, sorted(SPEC_KEYS)))
    for k in ("name", "family", "model", "flavor", "world", "batch", "param_dtype",
              "reduce_dtype", "reshard", "ac"):
        if k not in spec:
            bad("missing key '%s'" % k)
    kind = workloads.kind_of(spec["family"], FAMILIES)
    if kind is None:
        bad("unknown model family '%s' (known: %s)" % (
            spec["family"], ", ".join(list(FAMILIES) + list(workloads.VISION_FAMILIES)
                                      + [workloads.CUSTOM_FAMILY])))
    if not isinstance(spec["model"], dict):
        bad("'model' must be an object (%s)" % (
            "%s keyword arguments" % FAMILIES[spec["family"]][0] if kind == "causal_lm" else
            "%s keyword arguments" % workloads.VISION_FAMILIES[spec["family"]][0]
            if kind == "image_classification" else '{"class": ..., "args": {...}}'))
    # A causal LM's sequence length is the spec's; an image model's input size is its
    # config's (image_size), so a seq there would be ignored: refused instead.
    if kind == "causal_lm" and "seq" not in spec:
        bad("missing key 'seq'")
    if kind != "causal_lm" and "seq" in spec:
        bad("'seq' is for causal LMs; family '%s' takes its input size from the model "
            "(image_size)" % spec["family"])
    if "subdir" in spec and spec["subdir"] not in SUBDIRS:
        bad("'subdir' must be one of %s, got %r" % (SUBDIRS, spec["subdir"]))
    if spec["flavor"] not in FLAVORS:
        bad("unknown flavor '%s' (known: fsdp1, fsdp2)" % spec["flavor"])
    for k in ("world", "batch") + (("seq",) if kind == "causal_lm" else ()):
        if not isinstance(spec[k], int) or isinstance(spec[k], bool) or spec[k] < 1:
            bad("'%s' must be a positive integer, got %r" % (k, spec[k]))
    if "steps" in spec and (not isinstance(spec["steps"], int) or spec["steps"] < 2):
        bad("'steps' must be an integer >= 2 (the last step is measured in steady state)")
    for k in ("param_dtype", "reduce_dtype"):
        if spec[k] not in DTYPE_KEYS:
            bad("'%s' must be one of %s, got %r" % (k, DTYPE_KEYS, spec[k]))
    r = spec["reshard"]
    if not isinstance(r, (bool, int)):
        bad("'reshard' must be true, false or an integer, got %r" % (r,))
    if spec["flavor"] == "fsdp1" and not isinstance(r, bool):
        bad("fsdp1 has no integer reshard_after_forward (FULL_SHARD = true, SHARD_GRAD_OP = false)")
    ac = spec["ac"]
    if isinstance(ac, dict):
        if set(ac) - {"every", "offset"} or "every" not in ac:
            bad("'ac' as an object is {\"every\": k, \"offset\": o}, got %r" % (ac,))
        k, o = ac["every"], ac.get("offset", 0)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (k, o)) \
                or k < 1 or not 0 <= o < k:
            bad("'ac' needs integers every >= 1 and 0 <= offset < every, got %r" % (ac,))
    elif ac not in AC_NAMES:
        bad("'ac' must be one of %s or {\"every\": k, \"offset\": o}, got %r" % (AC_NAMES, ac))
    overrides = spec.get("overrides", [])
    if not isinstance(overrides, list):
        bad("'overrides' must be a list, got %r" % (overrides,))
    if overrides and spec["flavor"] != "fsdp2":
        bad("'overrides' are per fully_shard call: fsdp2 only")
    for i, o in enumerate(overrides):
        at = "overrides[%d]" % i
        if not isinstance(o, dict) or set(o) - OVERRIDE_KEYS or "units" not in o:
            bad("%s must be an object with 'units' and some of %s, got %r"
                % (at, sorted(OVERRIDE_KEYS - {"units"}), o))
        if len(o) < 2:
            bad("%s sets nothing" % at)
        if not isinstance(o["units"], list) or not o["units"] or \
                not all(isinstance(u, str) for u in o["units"]):
            bad("%s.units must be a non-empty list of unit names" % at)
        if "reshard" in o and not isinstance(o["reshard"], (bool, int)):
            bad("%s.reshard must be true, false or an integer" % at)
        for k in ("param_dtype", "reduce_dtype"):
            if k in o and o[k] not in DTYPE_KEYS:
                bad("%s.%s must be one of %s, got %r" % (at, k, DTYPE_KEYS, o[k]))


def unit_fsdp_args(spec, unit_names):
    """{unit name: {"reshard", "param_dtype", "reduce_dtype"}}: the spec's values, then
    each override in list order. A name that is no unit's is a SpecError."""
    out = {u: {"reshard": spec["reshard"], "param_dtype": spec["param_dtype"],
               "reduce_dtype": spec["reduce_dtype"]} for u in unit_names}
    out["<root>"]["reshard"] = None  # PyTorch's default on the root unless an override sets it
    for i, o in enumerate(spec.get("overrides", [])):
        for u in o["units"]:
            if u not in out:
                raise SpecError("configuration '%s': overrides[%d].units: '%s' is no unit "
                                "(units: %s)" % (spec["name"], i, u, ", ".join(out)))
            out[u].update({k: v for k, v in o.items() if k != "units"})
            if "param_dtype" in o:
                out[u]["param_dtype_overridden"] = True
    return out


def shardscope_args(spec, wrap_classes):
    """The flags that describe the same run to `shardscope simulate --model CONFIG.json`
    (no seq_len for models whose input size is their own)."""
    r = spec["reshard"]
    raf = "true" if r is True else "false" if r is False else str(r)
    args = ["--world", str(spec["world"]),
            "--set", "flavor=" + spec["flavor"],
            "--set", "wrap.type=class",
            "--set", "wrap.classes=" + json.dumps(wrap_classes, separators=(",", ":")),
            "--set", "reshard_after_forward=" + raf,
            "--set", "mixed_precision.param_dtype=" + spec["param_dtype"],
            "--set", "mixed_precision.reduce_dtype=" + spec["reduce_dtype"],
            "--set", "activation_checkpointing=" + ac_policy_value(spec["ac"]),
            "--set", "optimizer=adamw",
            "--set", "batch_size=%d" % spec["batch"]]
    if "seq" in spec:
        args += ["--set", "seq_len=%d" % spec["seq"]]
    if spec.get("overrides"):
        ov = []
        for o in spec["overrides"]:
            e = {"units": o["units"]}
            if "reshard" in o:
                e["reshard_after_forward"] = o["reshard"]
            mp = {k: o[k] for k in ("param_dtype", "reduce_dtype") if k in o}
            if mp:
                e["mixed_precision"] = mp
            ov.append(e)
        args += ["--set", "overrides=" + json.dumps(ov, separators=(",", ":"))]
    return args


# ---- the run -------------------------------------------------------------------------

# ---- CUDA (--device cuda) -------------------------------------------------------------

CUDA_COUNTERS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
                 "num_sync_all_streams")


def cuda_device(torch):
    """The CUDA device the run uses (device 0 of those visible), made current."""
    if not torch.cuda.is_available():
        raise DeviceError("--device cuda: torch %s (CUDA %s) sees no CUDA device"
                          % (torch.__version__, torch.version.cuda))
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    return dev


def cuda_memory(torch, dev, reset_peak=False):
    """The caching allocator's figures now (after a synchronize); with reset_peak, the
    peaks are reset first, so later max_memory_* cover only what follows."""
    torch.cuda.synchronize(dev)
    if reset_peak:
        torch.cuda.reset_peak_memory_stats(dev)
    stats = torch.cuda.memory_stats(dev)
    return {"allocated": int(torch.cuda.memory_allocated(dev)),
            "reserved": int(torch.cuda.memory_reserved(dev)),
            "max_allocated": int(torch.cuda.max_memory_allocated(dev)),
            "max_reserved": int(torch.cuda.max_memory_reserved(dev)),
            "peak_requested": stats.get("requested_bytes.all.peak"),
            "peak_active": stats.get("active_bytes.all.peak"),
            "counters": {k: stats.get(k) for k in CUDA_COUNTERS}}


def cuda_info(torch, dev):
    """What the CUDA figures depend on: the device, CUDA, the allocator's settings."""
    props = torch.cuda.get_device_properties(dev)
    conf = ["%s=%s" % (k, os.environ[k]) for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
            if os.environ.get(k)]
    try:
        backend = torch.cuda.get_allocator_backend()
    except Exception as e:  # noqa: BLE001
        backend = "unknown (%s)" % type(e).__name__
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"device_name": torch.cuda.get_device_name(dev),
            "capability": list(torch.cuda.get_device_capability(dev)),
            "total_memory_bytes": int(props.total_memory),
            "torch_cuda": torch.version.cuda,
            "cudnn": cudnn,
            "allocator_backend": backend,
            "alloc_conf": "; ".join(conf) if conf else "default"}


def memory_snapshot_summary(torch, snap, measured_from):
    """The caching allocator's segments after the run, and its alloc/free trace from the
    measured step's start (entry index measured_from of device 0's trace): sizes,
    streams, and the innermost Python frames of each allocation."""
    def frames(e):
        return ["%s:%s:%s" % (os.path.basename(f.get("filename", "?")), f.get("line"),
                              f.get("name")) for f in e.get("frames", [])[:6]]
    segments = [{"stream": s.get("stream"), "segment_type": s.get("segment_type"),
                 "total_size": s.get("total_size"), "allocated_size": s.get("allocated_size"),
                 "blocks": [{"size": b.get("size"), "requested_size": b.get("requested_size"),
                             "state": b.get("state")} for b in s.get("blocks", [])],
                 "frames": frames(s.get("blocks", [{}])[0]) if s.get("blocks") else []}
                for s in snap.get("segments", [])]
    trace = snap.get("device_traces", [[]])[0][measured_from:]
    return {"segments": segments,
            "trace_measured_step": [{"action": e.get("action"), "size": e.get("size"),
                                     "stream": e.get("stream"), "addr": e.get("addr"),
                                     "frames": frames(e)} for e in trace]}


def run(spec, device="cpu", snapshot_path=None):
    check_spec(spec)
    if device not in DEVICES:
        raise SpecError("unknown device '%s' (known: %s)" % (device, ", ".join(DEVICES)))
    cuda = device == "cuda"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    # MemTracker reads .grad of FSDP1's non-leaf parameter views: harmless, noisy
    warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor that is not a leaf")
    import torch
    import torch.distributed as dist
    import transformers
    from torch.profiler import ProfilerActivity, profile, record_function

    check_private_api(torch.__version__)
    dev = cuda_device(torch) if cuda else torch.device("cpu")
    family = spec["family"]
    flavor = spec["flavor"]
    W = spec["world"]
    steps = spec.get("steps", 3)
    name = spec["name"]
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    pdt, rdt = dtypes[spec["param_dtype"]], dtypes[spec["reduce_dtype"]]

    # -- the model's description (a Hugging Face config, written as config.json would be,
    # or a custom model's constructor), its inputs and its loss: workloads.py
    work = workloads.make(spec, transformers, FAMILIES, SpecError)
    config = work.config
    block_cls_names = work.block_class_names

    # -- fake process group: this process is rank 0 of W
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=W)

    recorder = CollectiveRecorder(dist)
    recorder.install()
    unit_names = {}

    def unit_of(obj):
        return unit_names.get(id(obj))

    # On CUDA the profiler only records ops (the attention kernels, the step and phase
    # windows): its memory events would be the caching allocator's, which torch.cuda's
    # counters below give directly.
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=not cuda)
    tracker = None
    cuda_at = {}
    with prof:
        # Profiler memory accounting starts here, before the model exists, so its
        # running total is absolute for everything this run allocates.
        torch.manual_seed(0)
        model = work.build()
        if config is not None and model.config._attn_implementation != "sdpa":
            raise RefusedError("configuration '%s': transformers chose attention '%s', not sdpa"
                               % (name, model.config._attn_implementation))
        model.train()
        params_total = sum(p.numel() for p in model.parameters())
        block_cls = tuple(type(next(m for m in model.modules() if type(m).__name__ == n))
                          for n in block_cls_names)
        # Routing. With the fake process group the all-gathered weights are
        # uninitialized, so the router's own logits are meaningless (on CPU they
        # send every token to the same two experts). The router's output is
        # replaced by 0 * logits + a fixed pattern: token i (flattened B*T) ranks
        # experts i % E, (i + 1) % E, ... first, so every expert gets exactly
        # B*T*k/E tokens (shardscope's "uniform" balance, its forced routing), and
        # the router's weights still get a gradient. The tokens per expert of each
        # MoE layer in the measured step are recorded (top-k of what the block sees).
        routing = {}
        if family in MOE_BLOCKS:
            top_k = int(work.cfg.num_experts_per_tok)
            for mname, mod in model.named_modules():
                if type(mod).__name__ != MOE_BLOCKS[family]:
                    continue

                def force_and_count(_m, _inp, logits, layer=mname):
                    n, e = logits.shape[0], logits.shape[-1]
                    rank = (torch.arange(e, device=logits.device)[None, :]
                            - torch.arange(n, device=logits.device)[:, None]) % e
                    # nan_to_num first: uninitialized weights can give NaN/inf logits
                    forced = logits.nan_to_num(0.0, 0.0, 0.0) * 0 + (e - rank).to(logits.dtype)
                    if recorder.active:
                        idx = torch.topk(forced.detach().float(), top_k, dim=-1).indices
                        c = torch.bincount(idx.reshape(-1), minlength=e).tolist()
                        prev = routing.get(layer)
                        routing[layer] = c if prev is None else [a + b for a, b in zip(prev, c)]
                    return forced
                mod.gate.register_forward_hook(force_and_count)
        if cuda:
            # Built on CPU as on the CPU runs (same seed, same values), then moved whole;
            # tied weights stay tied (Module.to keeps the Parameter objects).
            if snapshot_path:
                torch.cuda.memory._record_memory_history(max_entries=1000000, context="alloc",
                                                         stacks="python")
            model.to(dev)

        try:
            if flavor == "fsdp2":
                units = shard_fsdp2(torch, model, block_cls, spec, pdt, rdt, unit_names, recorder,
                                    dev)
            else:
                model, units = shard_fsdp1(torch, model, block_cls, spec, pdt, rdt, unit_names,
                                           recorder, dev)
        except (SpecError, RefusedError, ApiError):
            raise
        except Exception as e:  # noqa: BLE001
            raise RefusedError("configuration '%s': PyTorch refused to shard it (%s): %s: %s"
                               % (name, flavor, type(e).__name__, e))

        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                      weight_decay=0.01, foreach=True)
        gen = torch.Generator().manual_seed(1)
        inputs = work.inputs(torch, gen)
        if cuda:
            inputs = {k: v.to(dev) for k, v in inputs.items()}
            # Release what building the whole model on the GPU and sharding it left in
            # the cache: steps 1 and 2 then fill the cache as training does, and the
            # measured step 3 sees the steady state.
            gc.collect()
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()
            cuda_at["after_setup"] = cuda_memory(torch, dev)

        step_start_snapshot = None
        for step in range(steps):
            measured = step == steps - 1
            if measured:
                gc.collect()
                tracker = make_tracker(torch, flavor, model, optimizer, tuple(inputs.values()),
                                       recorder, dev)
                tracker.__enter__()
                step_start_snapshot = tracker.snapshot_total()
                if cuda:
                    cuda_at["step_start"] = cuda_memory(torch, dev, reset_peak=True)
                    if snapshot_path:
                        measured_from = len(torch.cuda.memory._snapshot()
                                            .get("device_traces", [[]])[0])
                recorder.active = True
                routing.clear()
            try:
                with record_function("ref::step%d" % step):
                    recorder.phase = "forward"
                    with record_function("ref::forward"):
                        loss = work.loss(model, inputs)
                    recorder.phase = "backward"
                    with record_function("ref::backward"):
                        loss.backward()
                    recorder.phase = "optimizer"
                    with record_function("ref::optimizer"):
                        optimizer.step()
                    recorder.phase = "zero_grad"
                    with record_function("ref::zero_grad"):
                        optimizer.zero_grad(set_to_none=True)
                    del loss
            except ApiError:
                raise
            except Exception as e:  # noqa: BLE001
                raise RefusedError("configuration '%s': step %d failed in %s: %s: %s\n%s"
                                   % (name, step, recorder.phase, type(e).__name__, e,
                                      traceback.format_exc()))
            finally:
                if measured:
                    recorder.active = False
                    step_end_snapshot = tracker.snapshot_total()
                    tracker.__exit__(None, None, None)
                    if cuda:
                        try:
                            cuda_at["step_end"] = cuda_memory(torch, dev)
                        except Exception as e:  # noqa: BLE001 - the step's own error wins
                            cuda_at["step_end_error"] = "%s: %s" % (type(e).__name__, e)
            recorder.phase = None

    if snapshot_path:
        with open(snapshot_path, "w") as f:
            json.dump(memory_snapshot_summary(torch, torch.cuda.memory._snapshot(),
                                              measured_from), f)
        torch.cuda.memory._record_memory_history(enabled=None)
    recorder.uninstall()
    prof_mem = profiler_memory(prof, steps - 1, memory=not cuda)
    dist.destroy_process_group()

    peak_snap = tracker.get_tracker_snapshot("peak").get(dev, {})
    breakdown = {}
    for k, v in peak_snap.items():
        breakdown[getattr(k, "value", k)] = int(v)
    total = breakdown.pop("Total", 0)
    assert total == tracker.peak_total(), (total, tracker.peak_total())

    collectives = recorder.calls
    check = recorder.check(tracker.c10d_ops)

    record = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        # A Hugging Face config (config.json), or for a custom model its constructor
        **({"config": config} if config is not None else {"model_constructor": work.constructor()}),
        "setup": {
            "flavor": flavor,
            "world": W,
            "batch": spec["batch"],
            **({"seq_len": spec["seq"]} if "seq" in spec else {}),
            **({} if work.kind == "causal_lm" else {
                "task": work.kind, "inputs": workloads.describe_inputs(inputs)}),
            "param_dtype": spec["param_dtype"],
            "reduce_dtype": spec["reduce_dtype"],
            "reshard_after_forward": spec["reshard"],
            "root_reshard_after_forward": (
                "default (None: the root is not resharded after forward)" if flavor == "fsdp2"
                else "FSDP1 never reshards the root after forward"),
            "activation_checkpointing": spec["ac"],
            "activation_checkpointing_impl": (
                "none" if spec["ac"] == "none" else
                "torchtitan v0.2.2 op-level SAC (bench/torch_reference/torchtitan_sac.py: "
                "_op_sac_save_list + _custom_policy, context_fn per call, early_stop=False) with "
                "aten._scaled_dot_product_flash_attention_for_cpu added to the save list as the "
                "CPU stand-in for the GPU SDPA kernels" if spec["ac"] == "torchtitan" else
                "checkpoint_wrapper(NO_REENTRANT) on the chosen decoder layers"),
            "wrap_classes": block_cls_names,
            "optimizer": "adamw",
            "optimizer_args": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                               "weight_decay": 0.01},
            "foreach": True,
            "zero_grad_set_to_none": True,
            **work.setup(),
            "steps": steps,
            "measured_step": steps,
            "device": "cpu",
            "process_group": "fake (rank 0 of world)",
        },
        "shardscope_args": shardscope_args(spec, block_cls_names),
        "model": {"params_total": params_total, "units": units},
        "collectives": collectives,
        "collective_totals": totals_by_op(collectives),
        "collectives_check": check,
        "attention_kernels": prof_mem["attention_ops"],
        **({"routing": {"top_k": int(work.cfg.num_experts_per_tok),
                        "tokens_per_expert": routing,
                        "forced": "router output = 0 * logits + a pattern giving token i "
                                  "experts i % E, (i + 1) % E, ... (every expert B*T*k/E "
                                  "tokens): the fake process group's weights are "
                                  "uninitialized, so real routing is meaningless here",
                        "rule": "torch.topk of each router's output in the measured step's "
                                "forward (a recompute counts again)"}}
           if family in MOE_BLOCKS else {}),
        "peak": {
            "allocated_bytes": total,
            "profiler_allocated_bytes": prof_mem.get("peak"),
            "breakdown": breakdown,
            "at": tracker.peak_at,
            "profiler_at": prof_mem.get("peak_at"),
        },
        "step_start_allocated_bytes": step_start_snapshot,
        "profiler_step_start_allocated_bytes": prof_mem.get("start"),
        "step_end_allocated_bytes": step_end_snapshot,
        "phase_peaks": tracker.phase_peaks,
        "profiler_phase_peaks": prof_mem.get("phase_peaks"),
    }
    if cuda:
        cuda_record(torch, record, dev, tracker, cuda_at, name)
    if routing:
        # shardscope's token_balance is one set of shares for every MoE layer: the
        # measured one when all layers routed alike (with the fake process group the
        # all-gathered weights are uninitialized, so the router's logits are not a
        # trained model's and routing is whatever they give).
        shares = {tuple(c / sum(cs) for c in cs) for cs in routing.values()}
        if len(shares) == 1:
            record["shardscope_args"] += ["--set", "token_balance=" + json.dumps(
                {"weights": list(next(iter(shares)))}, separators=(",", ":"))]
        else:
            record["routing"]["note"] = ("layers routed differently: shardscope_args keep "
                                         "the uniform balance")
    if spec.get("overrides"):
        # Per-unit fully_shard arguments (unit_fsdp_args); absent from files without them.
        record["setup"]["overrides"] = spec["overrides"]
    # Not recorded: the losses (meaningless: the fake all-gathers leave their outputs
    # uninitialized, so they change from run to run) and the run time; without them
    # regenerating a file gives the same bytes.
    return record


def cuda_record(torch, record, dev, tracker, cuda_at, name):
    """Turns the record of a --device cuda run into its CUDA form: what the CPU
    profiler measured of memory is left out (CPU allocations only), the caching
    allocator's figures of the measured step are added."""
    if "step_end" not in cuda_at:
        raise RefusedError("configuration '%s': reading torch.cuda's memory figures after the "
                           "step failed: %s" % (name, cuda_at.get("step_end_error")))
    setup = record["setup"]
    setup["device"] = "cuda"
    if setup["activation_checkpointing"] == "torchtitan":
        setup["activation_checkpointing_impl"] = (
            "torchtitan v0.2.2 op-level SAC (bench/torch_reference/torchtitan_sac.py: "
            "_op_sac_save_list + _custom_policy, context_fn per call, early_stop=False); on "
            "CUDA the list's GPU SDPA kernels apply (the CPU kernel it adds is never dispatched)")
    for k in ("profiler_step_start_allocated_bytes", "profiler_phase_peaks"):
        del record[k]
    start, end, setup_mem = cuda_at["step_start"], cuda_at["step_end"], cuda_at["after_setup"]
    peak = record["peak"]
    del peak["profiler_allocated_bytes"]
    del peak["profiler_at"]
    peak["cuda_allocated_bytes"] = end["max_allocated"]
    peak["cuda_reserved_bytes"] = end["max_reserved"]
    block = cuda_info(torch, dev)
    block.update({
        "placement": "model built on CPU (seed 0, as the CPU runs), moved with "
                     "model.to('cuda:0') before sharding; inputs moved after",
        "empty_cache": "torch.cuda.empty_cache() once after sharding and the optimizer's "
                       "creation, before step 1",
        "peak_window": "torch.cuda.reset_peak_memory_stats() after gc.collect() and "
                       "torch.cuda.synchronize() right before the measured step; read after "
                       "it (synchronized)",
        "peak_allocated_bytes": end["max_allocated"],
        "peak_reserved_bytes": end["max_reserved"],
        "peak_requested_bytes": end["peak_requested"],
        "peak_active_bytes": end["peak_active"],
        "after_setup_allocated_bytes": setup_mem["allocated"],
        "after_setup_reserved_bytes": setup_mem["reserved"],
        "step_start_allocated_bytes": start["allocated"],
        "step_start_reserved_bytes": start["reserved"],
        "step_end_allocated_bytes": end["allocated"],
        "step_end_reserved_bytes": end["reserved"],
        "num_alloc_retries": end["counters"]["num_alloc_retries"],
        "num_ooms": end["counters"]["num_ooms"],
        "counters_at_step_start": start["counters"],
        "counters_at_step_end": end["counters"],
        "tracker_rounding": "FSDPMemTracker/MemTracker count each CUDA storage rounded up to "
                            "512 B (peak.allocated_bytes, breakdown, phase_peaks)",
        "tracker_peak_by_device": {str(d): int(v) for d, v in sorted(
            private_attr(tracker, "_peak_mem", "the tracker's peaks per device").items(),
            key=lambda kv: str(kv[0]))},
    })
    record["cuda"] = block


# ---- sharding ----------------------------------------------------------------------

def _decoder_layers(model, block_cls):
    """(parent module, attribute name, path) of every module of the block class(es), in
    named_modules() order: registration order, which is forward order for the models
    here (a UNet's down path, middle and up path hang off different parents)."""
    parents = {}
    for mod in model.modules():
        for cname, child in mod.named_children():
            parents.setdefault(id(child), (mod, cname))
    return [parents[id(mod)] + (path,) for path, mod in model.named_modules()
            if path and isinstance(mod, block_cls)]


def _checkpoint_wrap(layers, ac):
    wrap = ac_wrapper(os.path.dirname(os.path.abspath(__file__)), ac)
    for j, (parent, cname, _) in enumerate(layers):
        if ac_checkpointed(ac, j):
            setattr(parent, cname, wrap(getattr(parent, cname)))


def shard_fsdp2(torch, model, block_cls, spec, pdt, rdt, unit_names, recorder, dev):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    mesh = init_device_mesh(dev.type, (spec["world"],))
    layers = _decoder_layers(model, block_cls)
    per_unit = unit_fsdp_args(spec, [path for _, _, path in layers] + ["<root>"])
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}

    def mp_of(a):
        # fp32 from the spec: no cast at all (param_dtype None). fp32 from an override:
        # passed explicitly, so that the unit casts its floating-point inputs to fp32
        # (cast_forward_inputs) as a user mixing precisions must: without it a bf16
        # activation from a bf16 unit meets fp32 weights and the matmul refuses.
        p = dtypes[a["param_dtype"]]
        explicit = a.get("param_dtype_overridden", False)
        return MixedPrecisionPolicy(param_dtype=None if p == torch.float32 and not explicit else p,
                                    reduce_dtype=dtypes[a["reduce_dtype"]])

    if spec["ac"] != "none":
        _checkpoint_wrap(layers, spec["ac"])  # before fully_shard: FSDP's hooks sit outside it
    unit_mods = []
    for parent, cname, path in layers:
        mod = getattr(parent, cname)
        fully_shard(mod, mesh=mesh, reshard_after_forward=per_unit[path]["reshard"],
                    mp_policy=mp_of(per_unit[path]))
        unit_mods.append((path, mod))
    root = per_unit["<root>"]
    if root["reshard"] is None:  # PyTorch's default reshard_after_forward on the root
        fully_shard(model, mesh=mesh, mp_policy=mp_of(root))
    else:
        fully_shard(model, mesh=mesh, reshard_after_forward=root["reshard"], mp_policy=mp_of(root))
    unit_mods.append(("", model))

    units = []
    for path, mod in unit_mods:
        state = private_attr(mod, "_get_fsdp_state", "FSDP2 units")()
        group = private_attr(state, "_fsdp_param_group", "FSDP2 units")
        unit_names[id(group)] = path or "<root>"
        fps = private_attr(group, "fsdp_params", "FSDP2 unit parameters") if group else []
        units.append({"name": path or "<root>",
                      "params": sum(private_attr(fp, "_orig_size", "FSDP2 unsharded sizes").numel()
                                    for fp in fps),
                      "local_numel": sum(private_attr(fp, "_sharded_param_data",
                                                      "FSDP2 padded shards").numel()
                                         for fp in fps)})

    # Which unit issues a collective: unshard() (all-gathers, prefetch included) and
    # post_backward() (reduce-scatter) run with the group as self.
    recorder.wrap_method(FSDPParamGroup, "unshard", lambda g: unit_names.get(id(g)))
    recorder.wrap_method(FSDPParamGroup, "post_backward", lambda g: unit_names.get(id(g)))
    return units


def shard_fsdp1(torch, model, block_cls, spec, pdt, rdt, unit_names, recorder, dev):
    import torch.distributed.fsdp._runtime_utils as rt
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    # Patch before wrapping: FSDP1 binds _post_backward_hook with functools.partial
    # when it registers it (lazily, in the first forward).
    recorder.wrap_function(rt, "_unshard", lambda state, handle, *a, **k: unit_names.get(id(handle)))
    recorder.wrap_function(rt, "_post_backward_hook",
                           lambda state, handle, *a, **k: unit_names.get(id(handle)))
    mp = None
    if pdt != torch.float32 or rdt != torch.float32:
        mp = MixedPrecision(param_dtype=pdt, reduce_dtype=rdt)
    strategy = ShardingStrategy.FULL_SHARD if spec["reshard"] else ShardingStrategy.SHARD_GRAD_OP
    wrapped = FSDP(model, auto_wrap_policy=ModuleWrapPolicy(set(block_cls)),
                   sharding_strategy=strategy, mixed_precision=mp, use_orig_params=True,
                   device_id=dev)
    if spec["ac"] != "none":
        # FSDP1's documented order: wrap first, then checkpoint the blocks inside the units.
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            apply_activation_checkpointing)
        blocks = [m for m in wrapped.modules() if isinstance(m, block_cls)]
        chosen = {id(m) for j, m in enumerate(blocks) if ac_checkpointed(spec["ac"], j)}
        apply_activation_checkpointing(
            wrapped, checkpoint_wrapper_fn=ac_wrapper(os.path.dirname(os.path.abspath(__file__)),
                                                      spec["ac"]),
            check_fn=lambda m: id(m) in chosen)
    units = []
    for path, mod in wrapped.named_modules():
        if isinstance(mod, FSDP):
            handle = private_attr(mod, "_handle", "FSDP1 units")
            clean = path.replace("_fsdp_wrapped_module.", "").replace("._fsdp_wrapped_module", "")
            clean = clean.replace("_checkpoint_wrapped_module.", "")
            uname = clean or "<root>"
            if handle is not None:
                unit_names[id(handle)] = uname
                fp = private_attr(handle, "flat_param", "FSDP1 flat parameters")
                units.append({"name": uname,
                              "params": int(private_attr(fp, "_unpadded_unsharded_size",
                                                         "FSDP1 unpadded sizes").numel()),
                              "local_numel": int(fp.numel())})
    # forward order: the root (outermost) unit runs first in FSDP1's listing already;
    # keep named_modules() order (root, then blocks in order).
    return wrapped, units


# ---- collectives -------------------------------------------------------------------

# torch.distributed function -> (op, output argument, input argument)
COLLECTIVES = {
    "all_gather_into_tensor": ("all_gather", "output_tensor", "input_tensor"),
    "_all_gather_base": ("all_gather", "output_tensor", "input_tensor"),
    "all_gather": ("all_gather", "tensor_list", "tensor"),
    "reduce_scatter_tensor": ("reduce_scatter", "output", "input"),
    "_reduce_scatter_base": ("reduce_scatter", "output", "input"),
    "reduce_scatter": ("reduce_scatter", "output", "input_list"),
    "all_reduce": ("all_reduce", "tensor", "tensor"),
    "broadcast": ("broadcast", "tensor", "tensor"),
    "reduce": ("reduce", "tensor", "tensor"),
    "all_to_all_single": ("all_to_all", "output", "input"),
    "barrier": ("barrier", None, None),
}
# c10d dispatcher op -> op, for the cross-check
C10D_OPS = {
    "_allgather_base_": "all_gather", "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
    "broadcast_": "broadcast", "reduce_": "reduce", "alltoall_base_": "all_to_all",
    "barrier": "barrier",
}
DTYPE_NAMES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
               "torch.int64": "i64", "torch.int32": "i32", "torch.uint8": "u8"}


def _nbytes(t):
    import torch
    if t is None:
        return 0
    if isinstance(t, (list, tuple)):
        return sum(_nbytes(x) for x in t)
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    return 0


def _dtype(t):
    if isinstance(t, (list, tuple)):
        t = t[0] if t else None
    return DTYPE_NAMES.get(str(getattr(t, "dtype", None)), str(getattr(t, "dtype", None)))


class CollectiveRecorder:
    """Wraps the torch.distributed collective functions (module attributes, which is
    what FSDP1 and FSDP2 call: dist.all_gather_into_tensor / dist.reduce_scatter_tensor
    / dist.all_reduce) and records each call of the measured step in issue order."""

    def __init__(self, dist):
        self.dist = dist
        self.calls = []
        self.active = False
        self.phase = None
        self.unit = None
        self._saved = []

    def install(self):
        for fname, (op, out_arg, in_arg) in COLLECTIVES.items():
            orig = getattr(self.dist, fname, None)
            if orig is None:
                continue
            self._saved.append((self.dist, fname, orig))
            setattr(self.dist, fname, self._make(orig, op, out_arg, in_arg))

    def _make(self, orig, op, out_arg, in_arg):
        sig = inspect.signature(orig)
        rec = self

        def wrapper(*args, **kwargs):
            if rec.active:
                b = sig.bind(*args, **kwargs)
                b.apply_defaults()
                a = b.arguments
                group = a.get("group")
                entry = {"op": op,
                         "group_size": rec.dist.get_world_size(group),
                         "dtype": _dtype(a.get(in_arg)) if in_arg else None,
                         "input_bytes": _nbytes(a.get(in_arg)) if in_arg else 0,
                         "output_bytes": _nbytes(a.get(out_arg)) if out_arg else 0,
                         "phase": rec.phase,
                         "unit": rec.unit}
                if op in ("all_reduce", "reduce_scatter", "reduce"):
                    red = a.get("op")
                    entry["reduce_op"] = str(red).split(".")[-1] if red is not None else None
                rec.calls.append(entry)
            return orig(*args, **kwargs)

        wrapper.__wrapped__ = orig
        wrapper.__signature__ = sig
        return wrapper

    def wrap_method(self, cls, mname, unit_fn):
        orig = getattr(cls, mname)
        rec = self

        def wrapper(self_, *args, **kwargs):
            saved = rec.unit
            rec.unit = unit_fn(self_)
            try:
                return orig(self_, *args, **kwargs)
            finally:
                rec.unit = saved

        self._saved.append((cls, mname, orig))
        setattr(cls, mname, wrapper)

    def wrap_function(self, module, fname, unit_fn):
        orig = getattr(module, fname)
        rec = self

        def wrapper(*args, **kwargs):
            saved = rec.unit
            rec.unit = unit_fn(*args, **kwargs)
            try:
                return orig(*args, **kwargs)
            finally:
                rec.unit = saved

        self._saved.append((module, fname, orig))
        setattr(module, fname, wrapper)

    def uninstall(self):
        for obj, attr, orig in reversed(self._saved):
            setattr(obj, attr, orig)
        self._saved.clear()

    def check(self, c10d_ops):
        """Compares the Python-level capture with the c10d ops the dispatcher saw."""
        py = [c["op"] for c in self.calls]
        disp = [C10D_OPS.get(o, "other:" + o) for o in c10d_ops]
        counts = {}
        for o in c10d_ops:
            counts[o] = counts.get(o, 0) + 1
        return {"capture": "wrappers of torch.distributed.<collective> (module attributes)",
                "cross_check": "c10d ops seen by the memory tracker's TorchDispatchMode",
                "dispatcher_ops": counts,
                "agrees": py == disp}


def totals_by_op(calls):
    out = {}
    for c in calls:
        t = out.setdefault(c["op"], {"count": 0, "input_bytes": 0, "output_bytes": 0})
        t["count"] += 1
        t["input_bytes"] += c["input_bytes"]
        t["output_bytes"] += c["output_bytes"]
    return out


# ---- memory: tracker ------------------------------------------------------------------

def _module_path(fqn):
    """ModTracker names 'FSDPLlamaForCausalLM.model.layers.1._checkpoint_wrapped_module';
    return the Hugging Face path 'model.layers.1'."""
    if fqn is None or fqn == "Global":
        return None
    parts = fqn.split(".")[1:]
    parts = [p for p in parts if p not in ("_checkpoint_wrapped_module", "_fsdp_wrapped_module")]
    return ".".join(parts) or "<root>"


def make_tracker(torch, flavor, model, optimizer, x, recorder, dev):
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    base = FSDPMemTracker if flavor == "fsdp2" else MemTracker
    # The tracker keys its figures by storage device: cpu, or cuda:0 (never plain "cuda").
    key = dev

    class RefTracker(base):
        """The PyTorch tracker, plus: where the peak happens, the peak per phase, and the
        c10d ops it sees (to cross-check the collective capture)."""

        def __init__(self, *a):
            super().__init__(*a)
            self.peak_at = {"module": None, "pass": "step start", "op": None}
            self.c10d_ops = []
            self.phase_peaks = {}
            self._func = None

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # FSDP1 with use_orig_params=True exposes the original parameters as views of
            # the unsharded flat parameter during forward (non-leaf tensors), on which
            # MemTracker's gradient hooks cannot be registered: track without them.
            return super()._track_module_params_and_buffers(
                module, install_grad_hooks=install_grad_hooks and flavor == "fsdp2")

        def snapshot_total(self):
            return int(self.get_tracker_snapshot("current").get(key, {}).get("Total", 0))

        def peak_total(self):
            return int(self._peak_mem.get(key, 0))

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self._func = func
            if recorder.active and func.namespace == "c10d":
                self.c10d_ops.append(func._opname)
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state):
            before = self._peak_mem.get(key, 0)
            super()._update_peak_stats(peak_state)
            cur = self._curr_mem_snap.get(key, {}).get("Total", 0)
            ph = recorder.phase
            if ph is not None and cur > self.phase_peaks.get(ph, 0):
                self.phase_peaks[ph] = int(cur)
            if self._peak_mem.get(key, 0) > before:
                mods = [m for m in self._mod_tracker.parents if m != "Global"]
                inner = max(mods, key=lambda m: m.count("."), default=None)
                if self._in_opt or recorder.phase == "optimizer":
                    pss = "optimizer"
                elif self._mod_tracker.is_bw:
                    pss = "backward (recompute)" if self._in_ac else "backward"
                else:
                    pss = recorder.phase or "forward"
                self.peak_at = {"module": _module_path(inner), "pass": pss,
                                "op": str(self._func) if self._func is not None else None}

    if flavor == "fsdp2":
        t = RefTracker(model, optimizer)
        for a in TRACKER_ATTRS:
            private_attr(t, a, "RefTracker reads it")
        private_attr(t._mod_tracker, "parents", "the innermost module at the peak")
        t.track_inputs(x)
    else:
        from torch.distributed._tools.mem_tracker import _MemRefType
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        t = RefTracker()
        for a in TRACKER_ATTRS:
            private_attr(t, a, "RefTracker reads it")
        private_attr(t._mod_tracker, "parents", "the innermost module at the peak")
        t.track_external(model, optimizer, x)
        # FSDP1's flat parameters are not module parameters with use_orig_params=True,
        # and the sharded flat gradient survives zero_grad(set_to_none=True) (the views
        # of the original parameters are set to None; FSDP1 drops flat_param.grad in the
        # next pre-forward): register both so the step start is complete.
        for m in model.modules():
            if isinstance(m, FSDP) and m._handle is not None:
                fp = m._handle.flat_param
                t._update_and_maybe_create_winfos(fp, _MemRefType.PARAM)
                if fp.grad is not None:
                    t._update_and_maybe_create_winfos(fp.grad, _MemRefType.GRAD)
    return t


# ---- memory: profiler ---------------------------------------------------------------

def profiler_memory(prof, measured_index, memory=True):
    """Allocator events of torch.profiler (profile_memory=True): the running total of
    CPU bytes allocated since the profiler started (before the model existed).
    memory=False (CUDA runs, profile_memory=False): only the attention ops of the
    measured step."""
    from torch._C._profiler import _EventType

    tree = prof.profiler.kineto_results.experimental_event_tree()
    allocs = []   # (time, total, size, event)
    windows = {}  # name -> [(start, end), ...]
    attn_events = []  # (time, name) of attention ops
    stack = list(tree)
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            ef = e.extra_fields
            if str(ef.device).startswith("cpu"):
                allocs.append((e.start_time_ns, ef.total_allocated, ef.alloc_size, e))
        elif e.tag in (_EventType.TorchOp, _EventType.PyCall) and e.name.startswith("ref::"):
            windows.setdefault(e.name, []).append((e.start_time_ns, e.end_time_ns))
        elif e.tag == _EventType.TorchOp and ("scaled_dot_product" in e.name
                                              or "attention" in e.name):
            attn_events.append((e.start_time_ns, e.name))
        stack.extend(e.children)
    allocs.sort(key=lambda a: (a[0], a[3].id))
    (s0, s1), = windows["ref::step%d" % measured_index]
    if not memory:
        return {"attention_ops": sorted({n for t, n in attn_events if s0 <= t <= s1})}
    start = 0
    for t, total, _, _ in allocs:
        if t >= s0:
            break
        start = total
    in_step = [a for a in allocs if s0 <= a[0] <= s1]
    peak, peak_ev = start, None
    for t, total, size, e in in_step:
        if total > peak:
            peak, peak_ev = total, e
    phase_peaks = {}
    for ph in ("forward", "backward", "optimizer", "zero_grad"):
        w = next((w for w in windows.get("ref::" + ph, []) if s0 <= w[0] <= s1), None)
        if w is None:
            continue
        before = [a[1] for a in allocs if a[0] < w[0]]
        vals = [a[1] for a in in_step if w[0] <= a[0] <= w[1]]
        phase_peaks[ph] = int(max(vals + before[-1:]))
    at = None
    if peak_ev is not None:
        chain = []
        p = peak_ev.parent
        while p is not None:
            chain.append(p.name)
            p = p.parent
        chain.reverse()
        phase = next((c[len("ref::"):] for c in chain
                      if c.startswith("ref::") and not c.startswith("ref::step")), None)
        ops = [c for c in chain if not c.startswith("ref::")]
        at = {"phase": phase, "op": ops[-1] if ops else None, "stack": ops[-6:],
              "alloc_bytes": int(peak_ev.extra_fields.alloc_size)}
    attention_ops = sorted({n for t, n in attn_events if s0 <= t <= s1})
    return {"peak": int(peak), "start": int(start), "peak_at": at, "phase_peaks": phase_peaks,
            "attention_ops": attention_ops}


# ---- command line --------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--name", help="a configuration of grid.py")
    src.add_argument("--spec", help="a JSON file holding one configuration (grid.py format)")
    src.add_argument("--check-api", action="store_true",
                     help="only check the private PyTorch APIs the harness uses, and exit")
    ap.add_argument("--out", help="the JSON file to write")
    ap.add_argument("--memory-snapshot", metavar="PATH",
                    help="--device cuda: also write the caching allocator's segments and the "
                         "measured step's alloc/free trace (torch.cuda.memory._snapshot) as JSON")
    ap.add_argument("--device", choices=DEVICES, default="cpu",
                    help="where the model runs (default cpu; cuda: CUDA device 0, see README.md)")
    a = ap.parse_args(argv)
    if a.check_api:
        import torch
        try:
            n = check_private_api(torch.__version__)
        except ApiError as e:
            print("error: %s" % e, file=sys.stderr)
            return 5
        print("torch %s: the %d private PyTorch APIs the harness uses are present"
              % (torch.__version__, n))
        return 0
    if not (a.name or a.spec) or not a.out:
        ap.error("--name or --spec, and --out, are required (or --check-api alone)")
    try:
        if a.name:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import grid
            specs = {s["name"]: s for s in grid.grid()}
            if a.name not in specs:
                raise SpecError("no configuration named '%s' in grid.py (see run_grid.py --list)"
                                % a.name)
            spec = specs[a.name]
        else:
            try:
                with open(a.spec) as f:
                    spec = json.load(f)
            except (OSError, ValueError) as e:
                raise SpecError("--spec %s: %s" % (a.spec, e))
        if a.memory_snapshot and a.device != "cuda":
            raise SpecError("--memory-snapshot needs --device cuda")
        record = run(spec, a.device, a.memory_snapshot)
    except SpecError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    except RefusedError as e:
        print("error: %s" % e, file=sys.stderr)
        return 3
    except DeviceError as e:
        print("error: %s" % e, file=sys.stderr)
        return 4
    except ApiError as e:
        print("error: %s" % e, file=sys.stderr)
        return 5
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
