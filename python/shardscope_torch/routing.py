"""Routed mixture-of-experts blocks traced under the token-balance assumption.

transformers 4.57's routed blocks (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock,
OlmoeSparseMoeBlock) find their experts' tokens with aten.nonzero: `expert_hit`
(which of the E experts got a token; Mixtral and Qwen2-MoE) and, per expert,
torch.where(expert_mask[e]) (its (slot, token) pairs). Fake tensors have no
values, so inside a recognised block the tracer asks Routing.intercept:

- a nonzero of a 1-d [E] mask (expert_hit) returns every expert, [[0], ..., [E-1]],
  as a fake tensor whose value FakeTensorMode knows (the block's loop then indexes
  its ModuleList with it);
- a nonzero of a 2-d [k, B*T] mask (the n-th call in the block's invocation is
  expert n mod E) returns a [B*R, 2] int64 tensor: expert e's B*routed(e,E,k) rows.

The stated assumption (docs/export.md, "Mixture of experts"): every expert is hit
and expert e gets routed(e,E,k) tokens of each sequence, plan/expr.h's factor that
the policy's token_balance sets (uniform by default), as the native builder
(plan/models_moe.cpp) assumes. The values of the indices are not traced (only
their shapes matter to memory and FLOPs).

R is not a token count while tracing but the marker MARKER: a size independent of
B and T, so a traced quantity is P(B, T) + sum_i c_i * B^i * T^j * MARKER, and
decode() splits each fitted coefficient into its plain part and its routed part
(the plain part must stay below MARKER / 4 in magnitude, else an error). The
held-out size is traced with HELD_OUT_MARKER, a different value, so a wrong split
fails the fit's held-out check. Any other nonzero (outside a recognised block, or
of another rank) stays the tracer's data-dependence error naming the op.
"""
import torch

from .tracer import ExportError

# Routed block class -> the HF config key giving its number of experts E; k is
# num_experts_per_tok for all three.
ROUTED_BLOCKS = {
    "MixtralSparseMoeBlock": "num_local_experts",
    "Qwen2MoeSparseMoeBlock": "num_experts",
    "OlmoeSparseMoeBlock": "num_experts",
}
MARKER = 1 << 44
HELD_OUT_MARKER = MARKER + (1 << 20) + 7


class RoutingError(ValueError):
    pass


def from_hf_config(cfg):
    """{block class: (E, k)} for the routed blocks cfg's model can have, or None."""
    k = getattr(cfg, "num_experts_per_tok", None)
    blocks = {}
    for cls, key in ROUTED_BLOCKS.items():
        e = getattr(cfg, key, None)
        if isinstance(e, int) and isinstance(k, int):
            if not 1 <= k <= e:
                raise RoutingError("num_experts_per_tok %d: expected 1 <= k <= %s (%d)"
                                   % (k, key, e))
            blocks[cls] = (e, k)
    return blocks or None


class Routing:
    """The routed blocks of one trace: blocks {class name: (E, k)}, the batch B and the
    marker R the traced expert row counts B*R use."""

    def __init__(self, blocks, batch, marker):
        self.blocks = dict(blocks)
        self.batch = batch
        self.marker = marker
        self.calls = {}  # module index -> expert token lists returned so far
        self.current = None  # (e, E, k) of the latest expert token list, while in its block
        self.block = None  # the module name of that block

    def intercept(self, func, args, module_index, module_class, where):
        """The balanced result of aten.nonzero inside a routed block, or None (not one)."""
        if self.current is not None and where != self.block and \
                not where.startswith(self.block + "."):
            self.current = None  # an op outside the block of the latest expert token list
        if func is not torch.ops.aten.nonzero.default or module_class not in self.blocks:
            return None
        experts, top_k = self.blocks[module_class]
        mask = args[0]
        if mask.dim() == 1 and mask.shape[0] == experts:  # expert_hit: every expert
            from torch._subclasses.fake_tensor import unset_fake_temporarily
            mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
            with unset_fake_temporarily():
                real = torch.arange(experts, dtype=torch.int64).view(experts, 1)
            return mode.fake_tensor_converter.from_real_tensor(mode, real, make_constant=True)
        if mask.dim() == 2 and mask.shape[0] == top_k:
            n = self.calls.get(module_index, 0)
            self.calls[module_index] = n + 1
            self.current = (n % experts, experts, top_k)
            self.block = where
            return torch.empty((self.batch * self.marker, 2), dtype=torch.int64,
                               device=mask.device)
        raise ExportError("%s (%s): a nonzero of shape %s in a routed block of E=%d, k=%d is "
                           "neither expert_hit [E] nor an expert's [k, B*T] mask"
                           % (where, func, list(mask.shape), experts, top_k))


def decode(poly, context, blocks, what):
    """poly {(i, j): coefficient} fitted with routed rows B*MARKER -> (plain poly, routed
    terms {(i, j, e, E, k): c}). context: the (e, E, k) of the expert token list the
    quantity's op ran after, or None. An op outside one expert's rows (the block's
    zeros accumulator, whose backward gathers every expert's rows) holds E equal routed
    parts c * B^i * T^j * routed(e,E,k), one per expert, whose sum is exactly
    c * k * B^i * T^(j+1) (routed_tokens sums to T*k): a plain term."""
    plain, routed = {}, {}
    shapes = set(blocks.values())
    for (i, j), c in poly.items():
        r = (c + MARKER // 2) // MARKER  # nearest multiple of MARKER
        p = c - r * MARKER
        if r != 0 and abs(p) >= MARKER // 4:
            raise RoutingError("coefficient %d of B^%d*T^%d is too large to separate its "
                               "routed part" % (c, i, j))
        if r != 0 and context is not None:
            e, experts, top_k = context
            routed[(i, j, e, experts, top_k)] = r
        elif r != 0:
            if len(shapes) != 1 or r % next(iter(shapes))[0] != 0:
                raise RoutingError("routed rows (%d x B^%d*T^%d*R) outside one expert's rows "
                                   "that are not E equal parts" % (r, i, j))
            experts, top_k = next(iter(shapes))
            routed[(i, j, -1, experts, top_k)] = r  # the E parts' sum: to_text writes it plain
        if p != 0:
            plain[(i, j)] = plain.get((i, j), 0) + p
    return plain, routed


def evaluate(plain, routed, b, t, marker):
    v = sum(c * b ** i * (t or 0) ** j for (i, j), c in plain.items())
    return v + sum(c * b ** i * (t or 0) ** j * marker for (i, j, _, _, _), c in routed.items())


def to_text(plain, routed):
    """plan/expr.h text: plain terms, then routed terms sorted by (i, j, e, E, k)."""
    from .fit import to_text as plain_text
    plain = dict(plain)
    for (i, j, e, experts, top_k), r in routed.items():
        if e < 0:  # E equal parts: r/E * k * B^i * T^(j+1)
            plain[(i, j + 1)] = plain.get((i, j + 1), 0) + r // experts * top_k
    plain = {key: c for key, c in plain.items() if c}
    terms = [plain_text(plain)] if plain else []
    for (i, j, e, experts, top_k) in sorted(key for key in routed if key[2] >= 0):
        c = routed[(i, j, e, experts, top_k)]
        factors = [] if c == 1 else [str(c)]
        if i:
            factors.append("B" if i == 1 else "B^%d" % i)
        if j:
            factors.append("T" if j == 1 else "T^%d" % j)
        factors.append("routed(%d,%d,%d)" % (e, experts, top_k))
        terms.append("*".join(factors))
    return " + ".join(terms) or "0"
