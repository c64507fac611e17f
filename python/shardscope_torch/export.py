"""export(): trace a model's training step at several (B, T) sizes and write graph JSON.

The graph format is plan/graph_io.cpp's ("shardscope.graph" version 1) with the
extensions of docs/export.md: op type "aten", tensor key "requires_grad",
graph keys "buffers", "default_wrap_classes" and "exporter".
"""
import json
import time

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from . import fit as fitmod
from . import routing as routingmod
from .tracer import ExportError, Trace

# B = 1 is avoided: a size-1 dim makes some .contiguous() calls no-ops, so the op
# structure at B = 1 differs from every larger batch.
DEFAULT_SIZES = {"batch": [2, 3, 4], "seq": [32, 48, 64], "held_out": [5, 80]}


def _normalize_sizes(sizes):
    s = dict(DEFAULT_SIZES)
    if sizes:
        unknown = set(sizes) - set(DEFAULT_SIZES)
        if unknown:
            raise ValueError("sizes: unknown key(s) %s (expected batch, seq, held_out)"
                             % ", ".join(sorted(unknown)))
        s.update(sizes)
    batches, seqs, held = list(s["batch"]), s["seq"], list(s["held_out"])
    if seqs is None:
        seqs = [None]
        if len(held) == 2:
            held = [held[0], None]
        elif len(held) == 1:
            held = [held[0], None]
    seqs = list(seqs)
    for key, vals in (("batch", batches), ("seq", [x for x in seqs if x is not None])):
        if len(set(vals)) != len(vals) or any((not isinstance(v, int)) or v < 1 for v in vals):
            raise ValueError("sizes.%s: expected distinct positive integers, got %r" % (key, vals))
    if len(held) != 2 or not isinstance(held[0], int) or held[0] < 1:
        raise ValueError("sizes.held_out: expected [B, T], got %r" % (held,))
    if (held[0], held[1]) in [(b, t) for b in batches for t in seqs]:
        raise ValueError("sizes.held_out %r is one of the fitted sizes" % (held,))
    return batches, seqs, tuple(held)


def _module_tables(model):
    """The graph's module list: named_modules() order, which is pre-order (a parent
    before its children), as plan/graph.h requires."""
    names, classes, parents, containers, index, position = [], [], [], [], {}, {}
    for name, m in model.named_modules():
        index[id(m)] = position[name] = len(names)
        names.append(name)
        classes.append(type(m).__name__)
        parents.append(-1 if name == "" else position[name.rsplit(".", 1)[0]] if "." in name
                       else 0)
        containers.append(isinstance(m, (torch.nn.ModuleList, torch.nn.ModuleDict)))
    return names, classes, parents, containers, index


def _inputs_of(example_inputs, b, t):
    got = example_inputs(b, t) if t is not None else example_inputs(b)
    if isinstance(got, dict):
        return (), dict(got), list(got.items())
    if isinstance(got, torch.Tensor):
        got = (got,)
    return tuple(got), {}, [("input%d" % i, x) for i, x in enumerate(got)]


def _cast_floating(x, dtype):
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and x.dtype != dtype:
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast_floating(y, dtype) for y in x)
    if isinstance(x, dict):
        return {k: _cast_floating(v, dtype) for k, v in x.items()}
    return x


def _trace_one(model, mod_tables, params, buffers, example_inputs, loss_fn, step_fn, b, t,
               dtype, cast_inputs, routed_blocks=None, marker=routingmod.MARKER):
    names, classes, _, _, index = mod_tables
    tr = Trace(model, dtype, index)
    tr.module_names_list = names
    tr.module_classes_list = classes
    if routed_blocks:
        tr.routing = routingmod.Routing(routed_blocks, b, marker)
    for p, pi in params:
        tr.add_param(p, pi)
        p.grad = None
    args, kwargs, named = _inputs_of(example_inputs, b, t)
    for name, x in named:
        if isinstance(x, torch.Tensor):
            tr.add_leaf(x, name, "input")
    for name, buf in buffers:
        tr.add_leaf(buf, "buffer:" + name, "buffer")

    def pre(m, _inp):
        tr.stack.append(index.get(id(m), tr.stack[-1]))

    def post(m, _inp, _out):
        tr.stack.pop()

    def cast(_m, a, kw):
        # FSDP2's root pre-forward casts the floating forward inputs to param_dtype
        # (MixedPrecisionPolicy.cast_forward_inputs): a copy in the root unit.
        return _cast_floating(a, dtype), _cast_floating(kw, dtype)

    h1 = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = torch.nn.modules.module.register_module_forward_hook(post)
    h3 = model.register_forward_pre_hook(cast, with_kwargs=True) if cast_inputs else None
    try:
        with torch.autograd.graph.saved_tensors_hooks(tr.pack_hook, lambda x: x):
            with tr:
                if step_fn is not None:
                    loss = step_fn(model, kwargs if kwargs else args)
                else:
                    out = model(*args, **kwargs)
                    loss = loss_fn(out, args, kwargs) if loss_fn else _default_loss(out)
        tr.end_forward(loss)
        with tr:
            loss.backward()
        tr.end_backward()
    finally:
        h1.remove()
        h2.remove()
        if h3 is not None:
            h3.remove()
    return tr


def _default_loss(out):
    if isinstance(out, torch.Tensor):
        if out.dim() != 0:
            raise ExportError("the model returned a tensor of shape %s, not a scalar loss: pass "
                              "loss_fn" % list(out.shape))
        return out
    loss = getattr(out, "loss", None)
    if loss is None:
        raise ExportError("the model's output has no .loss and is not a scalar: pass loss_fn")
    return loss


def _name_ops(tr, mod_names):
    used = {}
    for op in tr.ops:
        base = (mod_names[op.module] + "." if mod_names[op.module] else "") + op.packet
        n = used.get(base, 0)
        used[base] = n + 1
        op.name = base if n == 0 else "%s_%d" % (base, n)
        for k, ti in enumerate(op.outputs):
            tr.tensors[ti].name = op.name + (".out" if len(op.outputs) == 1 else ".out%d" % k)


def _structure(tr, op_index):
    op = tr.ops[op_index]
    return (op.name, str(op.func), op.module, tuple(op.inputs), tuple(op.outputs),
            tuple(op.params), tuple(op.saved), len(op.bwd_temps),
            tuple(p for _, p in op.bwd_temps),
            tuple((tr.tensors[i].dtype, tr.tensors[i].precision, len(tr.tensors[i].shape),
                   tr.tensors[i].requires_grad) for i in op.outputs))


def export(model_fn, example_inputs, loss_fn=None, out=None, wrap_classes=None, sizes=None,
           dtype=torch.bfloat16, model_name=None, max_seq_len=None, vocab_size=0,
           source=None, verbose=False, step_fn=None, cast_inputs=True, routed_blocks=None):
    """Trace model_fn()'s training step and return (and write to `out`) the graph JSON.

    model_fn: () -> nn.Module, called under FakeTensorMode (no weights are allocated);
      its parameters are cast to `dtype` (bf16: FSDP2's mixed-precision forward; fp32 for
      graphs of fp32 runs), its buffers keep their dtype.
    example_inputs: (B, T) -> tuple, dict or tensor of model inputs, for models with a
      sequence axis; (B) -> ... when sizes["seq"] is None.
    loss_fn: (output, args, kwargs) -> scalar loss; None: the output itself or output.loss.
    step_fn: (model, inputs) -> scalar loss, instead of model(*inputs) and loss_fn, for a
      step whose inputs are not all the model's (a diffusion target); inputs as
      example_inputs returned them.
    cast_inputs: cast the model call's floating inputs to dtype, as FSDP2's root does.
    wrap_classes: module class names FSDP units wrap by default (default_wrap_classes).
    sizes: {"batch": [...], "seq": [...] or None, "held_out": [B, T]}: the fitted grid and
      the size the fit is checked at (DEFAULT_SIZES).
    routed_blocks: {module class name: (E, k)}: routed mixture-of-experts blocks traced
      under the token-balance assumption (routing.py); hf.export_args gives them.
    """
    batches, seqs, held = _normalize_sizes(sizes)
    t0 = time.time()
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = model_fn()
        if not isinstance(model, torch.nn.Module):
            raise ExportError("model_fn returned %s, not an nn.Module" % type(model).__name__)
        model.train()
        mod_tables = _module_tables(model)
        names, classes, parents, containers, index = mod_tables
        params, param_json, by_id = [], [], {}
        for name, p in model.named_parameters(remove_duplicate=False):
            if id(p) in by_id:
                continue  # tied: the first name declares it
            if p.dtype.is_floating_point and p.dtype != dtype:
                p.data = p.data.to(dtype)
            by_id[id(p)] = len(param_json)
            owner = name.rsplit(".", 1)[0] if "." in name else ""
            param_json.append({"name": name, "shape": [int(d) for d in p.shape], "dtype": "f32",
                               "module": names.index(owner)})
            params.append((p, by_id[id(p)]))
        buffers = list(model.named_buffers())
        traces = {}
        for b in batches:
            for t in seqs:
                traces[(b, t)] = _trace_one(model, mod_tables, params, buffers, example_inputs,
                                            loss_fn, step_fn, b, t, dtype, cast_inputs,
                                            routed_blocks)
        traces[held] = _trace_one(model, mod_tables, params, buffers, example_inputs, loss_fn,
                                  step_fn, held[0], held[1], dtype, cast_inputs, routed_blocks,
                                  routingmod.HELD_OUT_MARKER)
    for tr in traces.values():
        _name_ops(tr, names)
    if verbose:
        print("traced %d sizes in %.1f s" % (len(traces), time.time() - t0))
    graph = _assemble(traces, batches, seqs, held, names, classes, parents, containers,
                      param_json, dtype, routed_blocks or {})
    graph["model_name"] = model_name or (source or type(model).__name__)
    graph["max_seq_len"] = int(max_seq_len or max([t for t in seqs if t] or [1]))
    graph["vocab_size"] = int(vocab_size)
    if wrap_classes:
        missing = [c for c in wrap_classes if c not in classes]
        if missing:
            raise ExportError("wrap_classes: %s matches no module of the model (classes: %s)"
                              % (", ".join(missing), ", ".join(sorted(set(classes)))))
        graph["default_wrap_classes"] = list(wrap_classes)
    exporter = {"torch": torch.__version__,
                "traced_sizes": [[b, t] if t is not None else [b] for (b, t) in traces],
                "param_dtype": "bf16" if dtype == torch.bfloat16 else str(dtype).replace("torch.", "")}
    try:
        import transformers
        exporter["transformers"] = transformers.__version__
    except ImportError:
        pass
    if source:
        exporter["source"] = source
    graph["exporter"] = exporter
    ordered = {k: graph[k] for k in ("format", "version", "model_name", "family", "max_seq_len",
                                     "vocab_size", "default_wrap_classes", "exporter", "modules",
                                     "params", "tensors", "buffers", "ops", "inputs", "loss")
               if k in graph}
    if out:
        with open(out, "w") as f:
            json.dump(ordered, f, indent=1)
            f.write("\n")
    return ordered


def _assemble(traces, batches, seqs, held, names, classes, parents, containers, param_json,
              dtype, routed=None):
    keys = list(traces)
    ref = traces[keys[0]]
    for key in keys[1:]:
        tr = traces[key]
        where = "B=%s,T=%s" % key if key[1] is not None else "B=%s" % key[0]
        ref_where = "B=%s,T=%s" % keys[0] if keys[0][1] is not None else "B=%s" % keys[0][0]
        for i in range(max(len(ref.ops), len(tr.ops))):
            if i >= len(ref.ops) or i >= len(tr.ops) or _structure(ref, i) != _structure(tr, i):
                op = (ref.ops if i < len(ref.ops) else tr.ops)[i]
                raise ExportError(
                    "op %d %s (%s): structure differs between %s and %s (%d vs %d ops): the graph "
                    "depends on data or size; trace at sizes where it does not (sizes=)"
                    % (i, op.func, op.name, ref_where, where, len(ref.ops), len(tr.ops)))
        if len(tr.tensors) != len(ref.tensors) or tr.inputs != ref.inputs or \
                tr.buffers != ref.buffers or tr.loss != ref.loss:
            raise ExportError("tensors differ in structure between %s and %s" % (ref_where, where))

    def fitted(get, what, context=None):
        """get's values fitted; with routed blocks, a routed part under context (e, E, k)."""
        vals = {k: get(traces[k]) for k in keys}
        try:
            poly = fitmod.fit(batches, seqs, {k: v for k, v in vals.items() if k != held})
            plain, rterms = routingmod.decode(poly, context, routed, what) \
                if routed else (poly, {})
        except (fitmod.FitError, routingmod.RoutingError) as e:
            raise ExportError("%s: %s (values %s)" % (what, e, vals)) from None
        text = routingmod.to_text(plain, rterms)
        hb, ht = held
        predicted = routingmod.evaluate(plain, rterms, hb, ht, routingmod.HELD_OUT_MARKER)
        if predicted != vals[held]:
            raise ExportError(
                "%s: the fit %s predicts %d at the held-out size B=%s,T=%s but the trace has %d "
                "(size dependence of higher degree than the grid: add sizes)"
                % (what, text, predicted, hb, ht, vals[held]))
        if any(c < 0 for c in list(plain.values()) + list(rterms.values())):
            raise ExportError("%s: %s has a negative coefficient, which the graph format cannot "
                              "hold (e.g. a slice x[:, :-1] made contiguous)" % (what, text))
        return text

    tensors = []
    for i, t in enumerate(ref.tensors):
        label = "tensor %d '%s'" % (i, t.name)
        ctx = ref.ops[t.producer].routed if t.producer >= 0 else None
        shape = [fitted(lambda tr, i=i, d=d: tr.tensors[i].shape[d], "%s dim %d" % (label, d), ctx)
                 for d in range(len(t.shape))]
        if len(set(len(traces[k].tensors[i].shape) for k in keys)) != 1:
            raise ExportError("%s: rank differs between traced sizes" % label)
        jt = {"name": t.name, "shape": shape, "dtype": t.dtype}
        if t.precision and t.precision != "compute":
            jt["precision"] = t.precision
        if t.dtype == "f32" and not t.requires_grad:
            jt["requires_grad"] = False
        tensors.append(jt)
    ops = []
    for i, op in enumerate(ref.ops):
        label = "op %d %s (%s)" % (i, op.name, op.func)
        jo = {"name": op.name, "type": "aten", "module": op.module, "inputs": op.inputs,
              "outputs": op.outputs, "params": op.params, "saved": op.saved}
        for field in ("fwd_flops", "bwd_flops", "fwd_bytes", "bwd_bytes"):
            jo[field] = fitted(lambda tr, i=i, f=field: getattr(tr.ops[i], f),
                               "%s %s" % (label, field), op.routed)
        jo["workspace_bytes"] = "0"
        jo["attrs"] = {"aten": str(op.func), "kind": op.kind}
        if op.bwd_temps:
            jo["bwd_temps"] = [
                {"numel": fitted(lambda tr, i=i, k=k: tr.ops[i].bwd_temps[k][0],
                                 "%s backward temporary %d" % (label, k), op.routed),
                 "precision": prec} for k, (_, prec) in enumerate(op.bwd_temps)]
        ops.append(jo)
    modules = [{"name": n, "class_name": c, "parent": p, "is_container": bool(ct)}
               for n, c, p, ct in zip(names, classes, parents, containers)]
    used = set(p for op in ref.ops for p in op.params)
    unused = [param_json[p]["name"] for p in range(len(param_json)) if p not in used]
    if unused:
        raise ExportError("parameter(s) %s are read by no op of the step (FSDP would still shard "
                          "and gather them; the graph format needs every parameter used)"
                          % ", ".join(unused[:5]))
    return {"format": "shardscope.graph", "version": 1, "family": "exported",
            "modules": modules, "params": param_json, "tensors": tensors,
            "buffers": ref.buffers, "ops": ops, "inputs": ref.inputs, "loss": ref.loss}
