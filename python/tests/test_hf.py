"""shardscope-export --hf-config end to end on tests/data/qwen2-tiny.json (needs transformers)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "shardscope_torch.cli", *args],
                          capture_output=True, text=True, cwd=os.path.join(ROOT, "python"))


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    out = tmp_path_factory.mktemp("g") / "qwen2.json"
    p = run_cli("--hf-config", os.path.join(ROOT, "tests/data/qwen2-tiny.json"), "--out",
                str(out), "--layers", "1", "--quiet")
    assert p.returncode == 0, p.stderr
    return json.load(open(out))


def test_units_and_parameters_are_transformers(qwen2):
    assert qwen2["default_wrap_classes"] == ["Qwen2DecoderLayer"]
    assert qwen2["max_seq_len"] == 128 and qwen2["vocab_size"] == 512
    names = [p["name"] for p in qwen2["params"]]
    assert "lm_head.weight" not in names  # tied to model.embed_tokens.weight
    numel = sum(eval("*".join(map(str, p["shape"]))) for p in qwen2["params"])
    # embed 512*64, 1 layer: q/k/v with biases 64*64+64 + 2*(64*32+32), o 64*64,
    # MLP 3*64*128, two norms 2*64; final norm 64
    assert numel == 512 * 64 + (64 * 64 + 64 + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128
                                + 2 * 64) + 64
    assert qwen2["exporter"]["source"] == "hf-config:qwen2-tiny.json"


def test_inputs_and_rotary_tables_have_no_gradient(qwen2):
    t = qwen2["tensors"]
    assert [t[i]["name"] for i in qwen2["inputs"]] == ["input_ids", "attention_mask", "labels"]
    (inv_freq,) = [t[i] for i in qwen2["buffers"]]
    assert inv_freq["name"] == "buffer:model.rotary_emb.inv_freq"
    cos = next(x for x in t if x["name"].startswith("model.rotary_emb.cos"))
    assert cos["requires_grad"] is False and cos["precision"] == "fp32"
    # the causal mask is SDPA's is_causal: no [B, 1, T, T] tensor anywhere
    assert not [x for x in t if x["shape"][-2:] == ["T", "T"]]


def test_unknown_model_type_exits_2(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"model_type": "no_such_model"}')
    p = run_cli("--hf-config", str(cfg), "--out", str(tmp_path / "g.json"))
    assert p.returncode == 2 and "no_such_model" in p.stderr


def test_layerdrop_is_refused_with_exit_2(tmp_path):
    cfg = dict(json.load(open(os.path.join(ROOT, "tests/data/opt-tiny.json"))), layerdrop=0.1)
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    p = run_cli("--hf-config", str(tmp_path / "c.json"), "--out", str(tmp_path / "g.json"))
    assert p.returncode == 2 and "layerdrop 0.1" in p.stderr
