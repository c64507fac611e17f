"""shardscope_torch.export on small modules: what the graph records, and the errors."""
import json
import subprocess
import sys
import os

import pytest
import torch

from shardscope_torch import ExportError, export

SIZES = {"batch": [2, 3, 4], "seq": [8, 12, 16], "held_out": [5, 20]}


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1 = torch.nn.Linear(c, 4 * c)
        self.fc2 = torch.nn.Linear(4 * c, c)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


class TinyLM(torch.nn.Module):
    """Embedding, two residual MLP blocks, a head tied to the embedding, an fp32 loss."""

    def __init__(self, vocab=64, c=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, c)
        self.blocks = torch.nn.ModuleList([Block(c) for _ in range(2)])
        self.head = torch.nn.Linear(c, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("scale", torch.ones(c), persistent=False)

    def forward(self, ids, labels):
        h = self.emb(ids) * self.scale.to(self.emb.weight.dtype)
        for b in self.blocks:
            h = b(h)
        logits = self.head(h).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def lm_inputs(b, t):
    return {"ids": torch.randint(0, 64, (b, t)), "labels": torch.randint(0, 64, (b, t))}


@pytest.fixture(scope="module")
def tiny():
    return export(TinyLM, lm_inputs, wrap_classes=["Block"], sizes=SIZES)


def op(g, name):
    return next(o for o in g["ops"] if o["name"] == name)


def test_graph_header(tiny):
    assert tiny["format"] == "shardscope.graph" and tiny["version"] == 1
    assert tiny["family"] == "exported"
    assert tiny["default_wrap_classes"] == ["Block"]
    assert tiny["exporter"]["traced_sizes"][-1] == [5, 20]
    assert [tiny["tensors"][i]["name"] for i in tiny["inputs"]] == ["ids", "labels"]


def test_tied_weight_is_one_parameter_read_by_two_modules(tiny):
    names = [p["name"] for p in tiny["params"]]
    assert "emb.weight" in names and "head.weight" not in names
    emb = names.index("emb.weight")
    assert emb in op(tiny, "emb.embedding")["params"]
    assert emb in op(tiny, "head.mm")["params"]
    assert len(names) == 1 + 2 * 4  # emb + 2 blocks x (fc1 w, b, fc2 w, b)


def test_linear_is_a_gemm_with_flops_and_saves_its_input(tiny):
    fc1 = op(tiny, "blocks.0.fc1.addmm")
    assert fc1["type"] == "aten"
    assert fc1["attrs"] == {"aten": "aten.addmm.default", "kind": "gemm"}
    assert fc1["fwd_flops"] == "2048*B*T"  # 2 * 16 * 64 per token
    assert fc1["bwd_flops"] == "4096*B*T"  # grad input and grad weight
    x = fc1["inputs"][0]
    assert fc1["saved"] == [x]  # the weight is a parameter: never listed
    assert tiny["tensors"][fc1["outputs"][0]]["shape"] == ["B*T", "64"]


def test_residual_add_sits_in_the_block_module(tiny):
    add = op(tiny, "blocks.1.add")
    mod = tiny["modules"][add["module"]]
    assert mod["name"] == "blocks.1" and mod["class_name"] == "Block"
    assert add["saved"] == []


def test_buffer_is_a_leaf_tensor_without_gradient(tiny):
    (b,) = tiny["buffers"]
    t = tiny["tensors"][b]
    assert t["name"] == "buffer:scale" and t["requires_grad"] is False
    assert b in op(tiny, "_to_copy")["inputs"]  # scale.to(bf16)


def test_upcast_copy_is_fp32_if_lowp_and_log_softmax_fp32(tiny):
    up = op(tiny, "_to_copy_1")
    assert tiny["tensors"][up["outputs"][0]]["precision"] == "fp32_if_lowp"
    lsm = op(tiny, "_log_softmax")
    assert tiny["tensors"][lsm["outputs"][0]]["precision"] == "fp32"
    assert lsm["saved"] == lsm["outputs"]


def test_loss_is_the_scalar_output_of_nll(tiny):
    loss = tiny["tensors"][tiny["loss"]]
    assert loss["shape"] == [] and loss["name"] == "nll_loss_forward.out0"


def test_fp32_trace_has_no_upcast(tmp_path):
    g = export(TinyLM, lm_inputs, sizes=SIZES, dtype=torch.float32,
               out=str(tmp_path / "g.json"))
    assert not [o for o in g["ops"] if o["attrs"]["aten"] == "aten._to_copy.default"]
    assert json.load(open(tmp_path / "g.json"))["ops"] == g["ops"]


class Routed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        idx = torch.nonzero(x[..., 0] > 0)  # how many rows: a property of the values
        return self.fc(x)[idx[:, 0]].sum()


def test_data_dependent_shape_is_an_error_naming_module_and_op():
    with pytest.raises(ExportError, match=r"<root> \(aten.nonzero.default\): its result depends "
                                          r"on tensor values"):
        export(Routed, lambda b, t: torch.randn(b, t, 8), sizes=SIZES)


class SizeBranch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if x.shape[1] > 10:  # control flow on a size: another graph above T = 10
            y = y * 2
        return y.sum()


def test_structure_change_between_sizes_names_the_op():
    with pytest.raises(ExportError, match=r"op 2 aten.sum.default \(sum\): structure differs "
                                          r"between B=2,T=8 and B=2,T=12"):
        export(SizeBranch, lambda b, t: torch.randn(b, t, 8), sizes=SIZES)


class Shifted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)[:, :-1].contiguous().sum()


def test_negative_coefficient_is_an_error():
    with pytest.raises(ExportError, match=r"tensor 3 'clone.out' dim 1: -1 \+ T has a negative "
                                          r"coefficient"):
        export(Shifted, lambda b, t: torch.randn(b, t, 8), sizes=SIZES)


def test_unknown_wrap_class_is_an_error():
    with pytest.raises(ExportError, match="wrap_classes: Decoder matches no module"):
        export(TinyLM, lm_inputs, wrap_classes=["Decoder"], sizes=SIZES)


def test_held_out_size_must_not_be_fitted():
    with pytest.raises(ValueError, match=r"sizes.held_out \[2, 8\] is one of the fitted sizes"):
        export(TinyLM, lm_inputs, sizes={"held_out": [2, 8], "seq": [8, 12, 16]})


def test_cli_bad_config_exits_2(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"hidden_size": 8}')
    p = subprocess.run([sys.executable, "-m", "shardscope_torch.cli", "--hf-config", str(cfg),
                        "--out", str(tmp_path / "g.json")], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(__file__)))
    assert p.returncode == 2
    assert "missing key 'model_type'" in p.stderr


class Attn(torch.nn.Module):
    """Grouped-query causal SDPA: 4 query heads over 2 key/value heads of dim 8."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(32, 32, bias=False)
        self.kv = torch.nn.Linear(32, 32, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, 2, 8).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                             enable_gqa=True)
        return o.float().sum()


def test_cpu_flash_attention_flops_count_every_query_head():
    g = export(Attn, lambda b, t: torch.randn(b, t, 32), sizes=SIZES)
    (sdpa,) = [o for o in g["ops"] if o["attrs"]["kind"] == "attention"]
    assert sdpa["attrs"]["aten"] == "aten._scaled_dot_product_flash_attention_for_cpu.default"
    # forward: 2 bmm of B*4 heads x T x T x 8 = 2 * 2*4*8 * B*T^2; backward: 5 of them
    assert sdpa["fwd_flops"] == "128*B*T^2"
    assert sdpa["bwd_flops"] == "320*B*T^2"
    # k and v are views of one kv projection output: one storage, one graph tensor
    assert len(sdpa["inputs"]) == 2
    assert sorted(sdpa["saved"]) == sorted(sdpa["inputs"] + sdpa["outputs"])


class LayerDrop(torch.nn.Module):
    """OPT's LayerDrop test, with layerdrop 0: every layer runs whatever the draw."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(2)])
        self.layerdrop = 0.0

    def forward(self, x):
        for layer in self.layers:
            if self.training and torch.rand([]) < self.layerdrop:
                continue
            x = layer(x)
        return x.float().sum()


def test_a_random_draw_is_traced_as_one_half_so_layerdrop_zero_keeps_every_layer():
    g = export(LayerDrop, lambda b, t: torch.randn(b, t, 8), sizes=SIZES)
    assert [o["name"] for o in g["ops"] if o["attrs"]["kind"] == "gemm"] == [
        "layers.0.addmm", "layers.1.addmm"]


class Denoiser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def test_step_fn_and_fsdp2_input_cast_for_a_model_without_sequence_axis():
    def batch(b):
        return {"x": torch.randn(b, 3, 8, 8), "noise": torch.randn(b, 3, 8, 8)}

    def step(model, inputs):  # the target is not a model input
        return torch.nn.functional.mse_loss(model(inputs["x"]).float(), inputs["noise"])

    g = export(Denoiser, batch, step_fn=step,
               sizes={"batch": [2, 3, 4], "seq": None, "held_out": [5]})
    assert g["exporter"]["traced_sizes"] == [[2], [3], [4], [5]]
    first = g["ops"][0]
    # FSDP2's root casts the fp32 image to bf16 before the model runs: a copy, B*192
    assert first["attrs"]["aten"] == "aten._to_copy.default" and first["module"] == 0
    assert g["tensors"][first["outputs"][0]]["shape"] == ["B", "3", "8", "8"]
    conv = g["ops"][1]
    assert conv["attrs"] == {"aten": "aten.convolution.default", "kind": "gemm"}
    assert conv["fwd_flops"] == "10368*B"  # 2 * 3*9 (in) * 3 (out) * 64 positions
    x, noise = g["inputs"]
    assert g["tensors"][noise]["precision"] == "fp32"


class Square(torch.autograd.Function):
    """A custom autograd.Function: saves its input with ctx.save_for_backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class WithCustomFunction(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return Square.apply(self.fc(x)).float().sum()


def test_custom_function_saves_and_backward_are_attributed_to_its_op():
    g = export(WithCustomFunction, lambda b, t: torch.randn(b, t, 8), sizes=SIZES)
    fc = op(g, "fc.addmm")
    (sq,) = [o for o in g["ops"] if o["attrs"]["aten"] == "aten.mul.Tensor"]
    # ctx.save_for_backward(x): the linear's output, listed on the op that ran in forward
    assert sq["saved"] == fc["outputs"] == sq["inputs"]
    # backward: 2 * x (a temporary) then * grad (the returned gradient): 2 B*T*8 products
    assert sq["bwd_temps"] == [{"numel": "8*B*T", "precision": "compute"}]
