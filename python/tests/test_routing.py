"""shardscope_torch.routing: splitting fits traced with routed rows B*MARKER."""
import json

import pytest

from shardscope_torch import fit, routing

M, MH = routing.MARKER, routing.HELD_OUT_MARKER
GRID = [(b, t) for b in [2, 3, 4] for t in [32, 48, 64]]


def test_expert_rows_become_routed_terms():
    # an expert GEMM's output [B*R, 64] (numel 64*B*R) plus a plain 3*B*T part
    f = lambda b, t, r: 64 * b * r + 3 * b * t
    poly = fit.fit([2, 3, 4], [32, 48, 64], {(b, t): f(b, t, M) for b, t in GRID})
    plain, routed = routing.decode(poly, (1, 4, 2), {"MixtralSparseMoeBlock": (4, 2)}, "x")
    assert plain == {(1, 1): 3}
    assert routed == {(1, 0, 1, 4, 2): 64}
    assert routing.to_text(plain, routed) == "3*B*T + 64*B*routed(1,4,2)"
    assert routing.evaluate(plain, routed, 5, 80, MH) == f(5, 80, MH)


def test_all_experts_sum_is_plain():
    # E = 4 equal parts 10*B*R outside one expert: 10*k*B*T with k = 2
    poly = fit.fit([2, 3, 4], [32, 48, 64], {(b, t): 40 * b * M for b, t in GRID})
    plain, routed = routing.decode(poly, None, {"OlmoeSparseMoeBlock": (4, 2)}, "x")
    assert routing.to_text(plain, routed) == "20*B*T"


def test_unequal_parts_outside_an_expert_are_an_error():
    poly = fit.fit([2, 3, 4], [32, 48, 64], {(b, t): 41 * b * M for b, t in GRID})
    with pytest.raises(routing.RoutingError, match="not E equal parts"):
        routing.decode(poly, None, {"OlmoeSparseMoeBlock": (4, 2)}, "x")


def test_k_above_experts_is_refused():
    class Cfg:
        num_local_experts, num_experts_per_tok = 4, 5
    with pytest.raises(routing.RoutingError, match="num_experts_per_tok 5"):
        routing.from_hf_config(Cfg())


def _tiny_mixtral(tmp_path):
    pytest.importorskip("transformers")
    cfg = {"model_type": "mixtral", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
           "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 64}
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_mixtral_exports_with_routed_rows(tmp_path):
    from shardscope_torch import export, hf
    raw, cfg = hf.load_config(_tiny_mixtral(tmp_path))
    kw = hf.export_args(raw, cfg)
    assert kw["routed_blocks"]["MixtralSparseMoeBlock"] == (4, 2)
    with hf.no_padding_assumed():
        g = export(kw["model_fn"], kw["example_inputs"], routed_blocks=kw["routed_blocks"])
    shapes = [t["shape"] for t in g["tensors"]]
    for e in range(4):  # each expert's token list: B*routed(e,4,2) (slot, token) pairs
        assert ["B*routed(%d,4,2)" % e, "2"] in shapes
    # every op reads only tensors produced before it (in-place nodes attributed forward)
    produced = set(g["inputs"]) | set(g["buffers"])
    for op in g["ops"]:
        assert set(op["inputs"]) <= produced, op["name"]
        produced |= set(op["outputs"])


def test_mixtral_without_routed_blocks_names_nonzero(tmp_path):
    from shardscope_torch import ExportError, export, hf
    raw, cfg = hf.load_config(_tiny_mixtral(tmp_path))
    kw = hf.export_args(raw, cfg)
    with hf.no_padding_assumed(), pytest.raises(
            ExportError, match=r"block_sparse_moe \(aten.nonzero.default\): its result depends"):
        export(kw["model_fn"], kw["example_inputs"],
               sizes={"batch": [2, 3], "seq": [8, 12], "held_out": [4, 16]})
