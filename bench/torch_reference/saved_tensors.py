"""What autograd keeps for backward after one forward of a grid model: every
saved storage that is no parameter, with the module and the aten op that made
it and the autograd nodes that keep it. Run as the harness builds the model
(from_config, SDPA, dropouts 0, use_cache False, the forced MoE routing), as a
plain model in the compute dtype, without FSDP: FSDP2 changes where the
parameters live, not what the ops save.

    python bench/torch_reference/saved_tensors.py --model phi3-h128-l2-gqa2-sw64 \\
        [--dtype bf16] [--batch 2] [--seq 128] [--module model.layers.0.self_attn] \\
        [--set '{"sliding_window": null}']

Prints the total, then per module the saved storages (op, bytes, dtype,
shape, keeping nodes). Needs torch and transformers (the harness's pins); not
run in CI.
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a key of grid.py's MODELS")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--module", default="", help="only modules whose name starts with this")
    ap.add_argument("--set", default="{}", help="config keys to override, as a JSON object")
    a = ap.parse_args(argv)

    import torch
    import transformers
    from torch.utils._python_dispatch import TorchDispatchMode

    import grid
    import harness

    if a.model not in grid.MODELS:
        ap.error("unknown --model %r (grid.py MODELS: %s)" % (a.model, ", ".join(grid.MODELS)))
    family, kwargs = grid.MODELS[a.model]
    cfg_cls, _, _, zero_dropout = harness.FAMILIES[family]
    kwargs = dict(kwargs, **zero_dropout, use_cache=False)
    kwargs.update(json.loads(a.set))
    cfg = getattr(transformers, cfg_cls)(**kwargs)
    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model = model.to(dtype).train()
    if family in harness.MOE_BLOCKS:  # harness.py's forced routing
        for mod in model.modules():
            if type(mod).__name__ == harness.MOE_BLOCKS[family]:
                def force(_m, _i, logits):
                    n, e = logits.shape[0], logits.shape[-1]
                    rank = (torch.arange(e)[None, :] - torch.arange(n)[:, None]) % e
                    return logits.nan_to_num(0.0, 0.0, 0.0) * 0 + (e - rank).to(logits.dtype)
                mod.gate.register_forward_hook(force)

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack = ["<root>"]

    def leave(_m, _i, _o):
        stack.pop()  # returns None: the module's output stays as it is

    for name, mod in model.named_modules():
        mod.register_forward_pre_hook(lambda _m, _i, n=name: stack.append(n))
        mod.register_forward_hook(leave)

    born = {}  # live storage address -> (module, op, bytes, dtype, shape)

    class Births(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else [out]
            rets = func._schema.returns
            for i, o in enumerate(outs):
                # A new storage (not an alias of an input): its latest birth is the live one.
                if isinstance(o, torch.Tensor) and (i >= len(rets) or rets[i].alias_info is None):
                    s = o.untyped_storage()
                    if s.data_ptr() not in params and s.nbytes() > 0:
                        born[s.data_ptr()] = (stack[-1], func.__name__, s.nbytes(), str(o.dtype),
                                              tuple(o.shape))
            return out

    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=gen)
    mask = torch.ones(a.batch, a.seq, dtype=torch.int64)  # as the harness passes it
    with Births():
        loss = model(input_ids=x, attention_mask=mask, labels=x).loss

    keepers = collections.defaultdict(list)  # storage address -> "Node.field"
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:  # freed or not a tensor
                continue
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor):
                    keepers[t.untyped_storage().data_ptr()].append(node.name() + "." + attr[7:])
        todo.extend(f for f, _ in node.next_functions)

    rows = collections.defaultdict(list)
    for addr, nodes in keepers.items():
        if addr in born and born[addr][0].startswith(a.module):
            rows[born[addr][0]].append(born[addr][1:] + (sorted(set(nodes)),))
    print("saved bytes (no parameters)%s: %d" % (
        " under " + a.module if a.module else "",
        sum(r[1] for rs in rows.values() for r in rs)))
    for mod in sorted(rows):
        print("%s  %d" % (mod or "<root>", sum(r[1] for r in rows[mod])))
        for op, nbytes, dt, shape, nodes in rows[mod]:
            print("    %-48s %9d %-15s %-18s %s" % (op, nbytes, dt, shape, ", ".join(nodes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
