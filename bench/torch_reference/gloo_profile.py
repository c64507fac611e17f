"""Records a small CPU-only PyTorch profiler trace (gloo, 2 processes) for
the Kineto importer's tests: tests/traces/fixtures/gloo_cpu_rank{0,1}.json.

    build/torch-venv/bin/python bench/torch_reference/gloo_profile.py OUTDIR

Each rank runs 4 profiler steps of a tiny linear model with record_shapes,
an all_reduce of the gradients (gloo) per step. Torch version: see
scripts/torch-reference (torch 2.9.1).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, world: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64)
    sched = torch.profiler.schedule(wait=0, warmup=0, active=4, repeat=1)
    path = os.path.join(out, f"gloo_cpu_rank{rank}.json")
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=sched,
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(path),
    ) as prof:
        for _ in range(4):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    mp.spawn(run, args=(2, out), nprocs=2, join=True)
