"""CPU checks of the Hopper recording scripts (scripts/device-hopper runs them
on a GPU): tiny sizes, gloo, so that a GPU session's minutes are not spent
on a script error. Run by scripts/test-python (needs torch and transformers;
not in CI)."""
import gzip
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HOPPER = os.path.dirname(HERE)


def run(args, cwd):
    return subprocess.run([sys.executable] + args, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_record_llama_writes_runs_and_a_shaped_two_step_trace(tmp_path):
    out = tmp_path / "out"
    r = run([os.path.join(HOPPER, "record_llama.py"), "--out-dir", str(out), "--device", "cpu",
             "--tiny", "--layers", "1", "--seq", "16", "--steps", "1", "--warmup", "0",
             "--batch2", "2", "--policies", "none,full"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.load(open(out / "llama.json"))
    runs = [(x["policy"], x["batch"]) for x in d["runs"]]
    assert runs == [("none", 1), ("full", 1), ("none", 2), ("full", 2)]
    # Checkpointing recomputes; it must not change the numbers.
    assert d["runs"][0]["losses"] == d["runs"][1]["losses"]
    assert [x.get("trace") for x in d["runs"]] == ["llama-none-b1.json.gz",
                                                   "llama-full-b1.json.gz", None, None]
    ev = json.load(gzip.open(out / "llama-none-b1.json.gz"))["traceEvents"]
    steps = sorted(e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#1", "ProfilerStep#2"]
    mms = [e for e in ev if e.get("name") == "aten::mm"]
    assert mms and all("Input Dims" in e["args"] for e in mms)


def test_record_llama_refuses_an_unknown_policy(tmp_path):
    r = run([os.path.join(HOPPER, "record_llama.py"), "--out-dir", str(tmp_path), "--device",
             "cpu", "--tiny", "--layers", "1", "--policies", "none,selective"], tmp_path)
    assert r.returncode != 0 and "unknown policy 'selective'" in r.stderr


def test_opbench_quick_rows(tmp_path):
    out = tmp_path / "ob.json"
    r = run([os.path.join(HOPPER, "opbench.py"), "--out", str(out), "--quick", "--device", "cpu",
             "--reps", "1", "--warmup", "0", "--sections", "gemm,memory,optimizer,fsdp"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.load(open(out))["rows"]
    errors = [x for x in rows if "error" in x]
    assert not errors, errors[:3]
    gemm = [x for x in rows if x["kind"] == "gemm"]
    # 3 GPT-2 linears x 2 dtypes + 2 Llama linears, 3 directions each.
    assert len(gemm) == (3 * 2 + 2) * 3
    first = gemm[0]
    assert first["flops"] == 2 * 64 * 64 * 192
    names = {(x["kind"], x["name"]) for x in rows}
    for want in (("memory", "rmsnorm"), ("memory", "cross_entropy"), ("optimizer", "adamw"),
                 ("fsdp", "all_gather_copy_in"), ("fsdp", "chunk_cat")):
        assert want in names
