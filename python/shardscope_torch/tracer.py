"""One training step (forward, loss, backward) traced on fake tensors.

Trace.run() executes the step under FakeTensorMode with a TorchDispatchMode on
top and records, in concrete integers for the one (B, T) it ran at:

- every aten op that allocates a new storage (a view or an in-place op
  allocates none: its result is mapped to its base storage, so a graph tensor
  is one storage allocation);
- the module whose forward was running (global forward pre/post hooks);
- which parameters (tied ones once), buffers, graph inputs and earlier
  tensors each op reads;
- what autograd saved for backward, read from the autograd nodes themselves
  (their _saved_* fields; saved_tensors for custom autograd.Functions), every
  autograd node being mapped to the forward op that was running when it was
  created; the saved-tensor pack hook cross-checks that every packed tensor
  was attributed;
- FLOPs from torch.utils.flop_counter's registry, bytes read and written;
- in backward, the aten ops each autograd node ran
  (torch._C._current_autograd_node()), their FLOPs and bytes, and the
  storages they allocated that the node does not return as a gradient (the
  op's backward temporaries).

Units: sizes in elements, FLOPs as counted by flop_counter (multiply-add = 2),
bytes in fp32 units (numel * 4), as the graph format wants them.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count


class ExportError(RuntimeError):
    """A model the exporter cannot trace faithfully; the message names the op and module."""


GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "convolution", "_convolution",
            "cudnn_convolution", "mkldnn_convolution", "convolution_overrideable"}

DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
          torch.int64: "i64", torch.int32: "i32", torch.bool: "bool", torch.uint8: "u8"}
# A one-element torch.rand draw is traced as the value RANDOM_DRAW_VALUE, the
# stated assumption of docs/export.md: OPT's LayerDrop test
# `torch.rand([]) < layerdrop` then keeps every layer when layerdrop is 0 (every
# published config), whatever the draw. Any other value read is an error.
RANDOM_DRAW_VALUE = 0.5


def _fake_constant(value, shape, dtype):
    """A fake tensor whose value FakeTensorMode knows (it propagates such constants)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    with unset_fake_temporarily():
        real = torch.full(shape, value, dtype=dtype)
    return mode.fake_tensor_converter.from_real_tensor(mode, real, make_constant=True)


def _numel(size):
    n = 1
    for d in size:
        n *= int(d)
    return n

INT_DTYPES = {"i64": 8, "i32": 4, "bool": 1, "u8": 1}


def op_kind(packet_name):
    if packet_name in GEMM_OPS:
        return "gemm"
    if packet_name.startswith("_scaled_dot_product") or packet_name in (
            "_flash_attention_forward", "_efficient_attention_forward"):
        return "attention"
    return "memory"


def _skey(t):
    return t.untyped_storage()._cdata


def _tensors(tree):
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


class TracedTensor:
    __slots__ = ("name", "shape", "dtype", "precision", "requires_grad", "producer", "kind")

    def __init__(self, name, shape, dtype, precision, kind, producer=-1):
        self.name, self.shape, self.dtype, self.precision = name, shape, dtype, precision
        self.kind, self.producer = kind, producer
        self.requires_grad = False


class TracedOp:
    def __init__(self, func, module):
        self.func = func
        self.packet = func._overloadpacket.__name__
        self.kind = op_kind(self.packet)
        self.module = module
        self.inputs, self.params, self.outputs, self.saved = [], [], [], []
        self.fwd_flops = self.bwd_flops = self.fwd_bytes = self.bwd_bytes = 0
        self.bwd_allocs = []  # (storage key, numel, dtype name) in allocation order
        self.bwd_returned = set()  # storage keys of the gradients its nodes returned
        self.bwd_temps = []  # (numel, precision)
        self.name = None
        self.routed = None  # (e, E, k): the expert token list it ran after (routing.py)


def _gqa_shape(query, t):
    """t's shape with its heads (dim 1) widened to query's: grouped-query attention costs
    what attention over the query's heads costs."""
    return (t.shape[0], query.shape[1], t.shape[2], t.shape[3])


def _cpu_flash_flops(func, args):
    """flop_counter's SDPA formulas for PyTorch's CPU flash kernel, which its registry lacks
    (the kernel fake CPU tensors dispatch to). None for any other op."""
    name = func._overloadpacket.__name__
    if name == "_scaled_dot_product_flash_attention_for_cpu":
        q, k, v = args[:3]
        return sdpa_flop_count(q.shape, _gqa_shape(q, k), _gqa_shape(q, v))
    if name == "_scaled_dot_product_flash_attention_for_cpu_backward":
        grad_out, q, k, v = args[:4]
        return sdpa_backward_flop_count(grad_out.shape, q.shape, _gqa_shape(q, k),
                                        _gqa_shape(q, v))
    return None


def _flops(func, args, kwargs, out):
    special = _cpu_flash_flops(func, args)
    if special is not None:
        return int(special)
    fn = flop_registry.get(func._overloadpacket)
    if fn is None:
        return 0
    return int(fn(*args, **kwargs, out_val=out))


class Trace(TorchDispatchMode):
    """Records one step. compute_dtype: the parameters' dtype while tracing (bf16: FSDP2's
    mixed-precision view; fp32 for graphs of fp32 runs)."""

    def __init__(self, model, compute_dtype, module_names):
        super().__init__()
        self.model = model
        self.compute_dtype = compute_dtype
        self.modules = module_names  # id(module) -> index in the graph's module list
        self.stack = [0]
        self.tensors, self.ops = [], []
        self.storage = {}  # storage key -> tensor index
        self.param_of = {}  # storage key -> param index
        self.keep = []  # every tensor seen: keeps storage keys from being reused
        self.pending = []  # (output tensor, op index) whose grad_fn is read at the next op
        self.node_op = {}  # autograd node -> forward op index
        self.packed = []  # (storage key, op index current when packed)
        self.phase = "forward"
        self.unattributed_bwd_flops = 0
        self.buffers, self.inputs = [], []
        self.loss = -1
        self.routing = None  # routing.Routing: routed blocks traced under the balance assumption
        self.module_classes_list = []

    # ---- setup ---------------------------------------------------------------
    def add_param(self, p, index):
        self.param_of[_skey(p)] = index
        self.keep.append(p)

    def add_leaf(self, t, name, kind):
        """A graph input or a buffer: a tensor no op produces."""
        key = _skey(t)
        if key in self.storage or key in self.param_of:
            return self.storage.get(key)
        idx = self._new_tensor(t, name, kind, -1, None)
        (self.inputs if kind == "input" else self.buffers).append(idx)
        return idx

    def _dtype_precision(self, t, producing_func, src_dtypes, where):
        dt = DTYPES.get(t.dtype)
        if dt is None:
            raise ExportError("%s: dtype %s is not supported by the graph format" % (where, t.dtype))
        if dt in INT_DTYPES:
            return dt, None
        low = self.compute_dtype != torch.float32
        if t.dtype == self.compute_dtype:
            return "f32", "compute"
        if t.dtype == torch.float32 and low:
            # An upcast copy of a low-precision tensor: .float() of a value that already
            # is fp32 returns the same storage, so in an fp32 run it costs nothing.
            if producing_func == "_to_copy" and any(d == self.compute_dtype for d in src_dtypes):
                return "f32", "fp32_if_lowp"
            return "f32", "fp32"
        raise ExportError("%s: a %s tensor while tracing with %s parameters (only the parameter "
                          "dtype and fp32 are modelled)" % (where, t.dtype, self.compute_dtype))

    def _new_tensor(self, t, name, kind, producer, func, src_dtypes=(), where=None):
        st = t.untyped_storage()
        item = t.element_size()
        numel = st.nbytes() // item
        shape = list(t.shape) if t.numel() == numel else [numel]
        dt, prec = self._dtype_precision(t, func, src_dtypes, where or name)
        tt = TracedTensor(name, shape, dt, prec, kind, producer)
        if kind == "input":
            tt.requires_grad = bool(t.requires_grad)
        self.tensors.append(tt)
        self.storage[_skey(t)] = len(self.tensors) - 1
        self.keep.append(t)
        return len(self.tensors) - 1

    # ---- forward -------------------------------------------------------------
    def _flush_pending(self):
        for t, op in self.pending:
            gf = t.grad_fn
            idx = self.storage.get(_skey(t))
            if idx is not None and (t.requires_grad or gf is not None):
                self.tensors[idx].requires_grad = True
            if gf is not None and gf not in self.node_op:
                self.node_op[gf] = op
        self.pending.clear()

    def _module_name(self):
        return self.module_names_list[self.stack[-1]]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.phase == "backward":
            return self._backward(func, args, kwargs)
        self._flush_pending()
        try:
            routed = None if self.routing is None else self.routing.intercept(
                func, args, self.stack[-1], self.module_classes_list[self.stack[-1]],
                self._where())
            if routed is not None:
                out = routed
            elif func is torch.ops.aten.rand.default and _numel(args[0]) == 1:
                # A fake tensor with a known value: FakeTensorMode propagates constants, so a
                # test on the draw (rand < layerdrop) reads a value instead of failing.
                out = _fake_constant(RANDOM_DRAW_VALUE, list(args[0]),
                                     kwargs.get("dtype") or torch.get_default_dtype())
            else:
                out = func(*args, **kwargs)
        except Exception as e:  # data-dependent shapes or values under fake tensors
            name = type(e).__name__
            if "DataDependent" in name or "DynamicOutputShape" in name:
                raise ExportError(
                    "%s (%s): its result depends on tensor values (data-dependent control flow, "
                    "e.g. .item(), nonzero or a routed mixture of experts); the exporter traces "
                    "on fake tensors and cannot see values" % (self._where(), func)) from e
            raise
        self._forward(func, args, kwargs, out)
        return out

    def _where(self):
        return self.module_names_list[self.stack[-1]] or "<root>"

    def _forward(self, func, args, kwargs, out):
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        new, seen = [], set()
        for o in outs:
            k = _skey(o)
            if k in self.storage or k in self.param_of or k in seen:
                continue
            seen.add(k)
            new.append(o)
        current = len(self.ops) - 1
        if new:
            op = TracedOp(func, self.stack[-1])
            op.routed = self.routing.current if self.routing is not None else None
            idx = len(self.ops)
            for a in ins:
                self._read(op, a, idx)
            for k, o in enumerate(new):
                ti = self._new_tensor(o, None, "act", idx, op.packet, [a.dtype for a in ins],
                                      "%s (%s)" % (self._where(), func))
                op.outputs.append(ti)
            op.fwd_flops = _flops(func, args, kwargs, out)
            op.fwd_bytes = 4 * (sum(a.numel() for a in ins) + sum(o.numel() for o in new))
            self.ops.append(op)
            current = idx
        else:
            # A view or an in-place op: its autograd node (if any) belongs to the latest op.
            for a in ins:
                if a.grad_fn is not None and a.grad_fn not in self.node_op:
                    self.node_op[a.grad_fn] = self._producer_or(a, current)
        for o in outs:
            self.pending.append((o, max(current, 0)))

    def _producer_or(self, t, default):
        idx = self.storage.get(_skey(t))
        if idx is not None and self.tensors[idx].producer >= 0:
            return self.tensors[idx].producer
        return max(default, 0)

    def _read(self, op, a, op_idx):
        k = _skey(a)
        if k in self.param_of:
            p = self.param_of[k]
            if p not in op.params:
                op.params.append(p)
            return
        ti = self.storage.get(k)
        if ti is None:  # a constant made outside any traced op (torch.tensor in forward)
            ti = self._new_tensor(a, "const.%d" % len(self.tensors), "buffer", -1, None)
            self.buffers.append(ti)
        if a.requires_grad or a.grad_fn is not None:
            self.tensors[ti].requires_grad = True
        # A consumer sees its input's autograd node: custom autograd.Function outputs are
        # mapped here (no dispatched op created their node).
        if a.grad_fn is not None and a.grad_fn not in self.node_op:
            self.node_op[a.grad_fn] = self._producer_or(a, op_idx)
        if ti not in op.inputs:
            op.inputs.append(ti)

    def pack_hook(self, t):
        self.packed.append((_skey(t), t))
        return t

    def end_forward(self, loss):
        self._flush_pending()
        k = _skey(loss)
        if k not in self.storage or self.tensors[self.storage[k]].producer < 0:
            raise ExportError("the loss is not produced by a traced op")
        self.loss = self.storage[k]
        self.tensors[self.loss].requires_grad = True
        if loss.grad_fn is None:
            raise ExportError("the loss does not require grad: no parameter reaches it")
        if loss.grad_fn not in self.node_op:
            self.node_op[loss.grad_fn] = self.tensors[self.loss].producer
        self._map_unreached_nodes(loss.grad_fn)
        self._collect_saved()
        self.finished = set()  # nodes whose function returned: later work is accumulation
        for node, op in self.node_op.items():
            node.register_hook(self._node_hook(node, op))
        self.phase = "backward"

    def _map_unreached_nodes(self, root):
        # Nodes no op output carried (intermediate nodes of a chain of views): the op of
        # the node the gradient reaches them from.
        stack, seen = [root], {root}
        while stack:
            n = stack.pop()
            for nxt, _ in n.next_functions:
                if nxt is None or nxt in seen or type(nxt).__name__ == "AccumulateGrad":
                    continue
                seen.add(nxt)
                if nxt not in self.node_op:
                    self.node_op[nxt] = self.node_op[n]
                stack.append(nxt)

    def _collect_saved(self):
        attributed = set()
        for node, op_idx in list(self.node_op.items()):
            op = self.ops[op_idx]
            saved = []
            if hasattr(node, "saved_tensors") and not hasattr(node, "_saved_self"):
                try:
                    saved.extend(_tensors(list(node.saved_tensors)))
                except RuntimeError:
                    pass
            for attr in dir(node):
                if attr.startswith("_saved_"):
                    try:
                        saved.extend(_tensors(getattr(node, attr)))
                    except RuntimeError:
                        pass  # freed or not a tensor field
            # An in-place op's node (w /= w.sum(), index_add_) can be mapped to the op that
            # produced w, which runs before the tensors the node saves: it belongs to the
            # latest op producing one of them (an op reads only earlier tensors).
            latest = max([self.tensors[self.storage[_skey(t)]].producer for t in saved
                          if _skey(t) in self.storage] + [op_idx])
            if latest > op_idx:
                op_idx = self.node_op[node] = latest
                op = self.ops[op_idx]
            for t in saved:
                k = _skey(t)
                attributed.add(k)
                if k in self.param_of:
                    continue
                ti = self.storage.get(k)
                if ti is None:
                    continue
                if ti not in op.saved:
                    op.saved.append(ti)
                if ti not in op.inputs and ti not in op.outputs:
                    op.inputs.append(ti)
        for k, t in self.packed:
            if k not in attributed and k not in self.param_of and k in self.storage:
                raise ExportError(
                    "tensor %s (shape %s) was packed for backward but no autograd node lists it "
                    "(a custom autograd.Function saving through ctx attributes?)"
                    % (self.tensors[self.storage[k]].name, list(t.shape)))
        for op in self.ops:
            op.saved.sort()

    def _node_hook(self, node, op_idx):
        def hook(grad_inputs, grad_outputs):
            self.finished.add(node)
            for g in grad_inputs:
                if isinstance(g, torch.Tensor):
                    self.ops[op_idx].bwd_returned.add(_skey(g))
        return hook

    # ---- backward ------------------------------------------------------------
    def _backward(self, func, args, kwargs):
        node = torch._C._current_autograd_node()
        out = func(*args, **kwargs)
        op_idx = self.node_op.get(node) if node is not None else None
        if op_idx is None or node in self.finished:
            # Engine work outside a node's function (the loss's seed gradient, the sum of
            # two gradients of one tensor after the node returned, accumulation into
            # leaves): the liveness model counts gradients and their sums itself.
            return out
        op = self.ops[op_idx]
        ins, outs = _tensors((args, kwargs)), _tensors(out)
        seen = set()
        new = []
        for o in outs:
            k = _skey(o)
            if k in self.storage or k in self.param_of or k in seen:
                continue
            seen.add(k)
            new.append(o)
            self.keep.append(o)
            op.bwd_allocs.append((k, o.untyped_storage().nbytes() // o.element_size(),
                                  DTYPES.get(o.dtype, str(o.dtype))))
        op.bwd_flops += _flops(func, args, kwargs, out)
        op.bwd_bytes += 4 * (sum(a.numel() for a in ins) + sum(o.numel() for o in new))
        return out

    def end_backward(self):
        low = self.compute_dtype != torch.float32
        for op in self.ops:
            for k, numel, dt in op.bwd_allocs:
                if k in op.bwd_returned:
                    continue
                if dt == "f32":
                    op.bwd_temps.append((numel, "fp32" if low else "compute"))
                elif dt in ("bf16", "f16"):
                    op.bwd_temps.append((numel, "compute"))
                elif dt in ("i64", "i32"):  # integer scratch, written as fp32 elements
                    op.bwd_temps.append((numel * INT_DTYPES[dt] // 4, "fp32"))
                # bool and u8 scratch (masks) is not modelled: docs/export.md
        self.phase = "done"
