"""What a gang's shared stop flag costs a step (``digits_mlp._stop_agreed``).

Every step the ranks of a multi-node job share whether any of them got the
Spot notice: an ``all_reduce`` (MAX) of one number. Two ranks on loopback
(gloo, one thread each, as the built-in trainer runs) time, in turns, rounds
of ``--steps`` data-parallel steps of the built-in digits model (DDP, batch
32) with the flag and without it, and rounds of the flag alone. Loopback is
the flag's best case (no network between VMs): over a real network each
collective also pays a round trip, which a GPU step of a real model (tens to
hundreds of ms) dwarfs more than this CPU step does.

Prints numbers; asserts nothing (the machines are shared and noisy: compare
the two columns of one run, not runs).
Run: .venv/bin/python benchmarks/bench_stop_flag.py [--steps 400] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from spotline.shared.contract.cluster import master_port
from spotline.vm_image.trainers.digits_mlp import build_model, load_digits_split


def _flag() -> None:
    told = torch.tensor([0.0])
    dist.all_reduce(told, op=dist.ReduceOp.MAX)


def _rank(rank: int, port: int, steps: int, rounds: int, out: dict[str, list[float]]) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    data = load_digits_split(3, 0.2)
    model = build_model(64, data.features, data.classes)
    net = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    n = len(data.y_train)

    def step(i: int, flag: bool) -> None:
        if flag:
            _flag()
        start = (i * 32) % (n - 32)
        rows = torch.arange(start, start + 32)[rank::2]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(net(data.x_train[rows]), data.y_train[rows]).backward()
        optimizer.step()

    timings: dict[str, list[float]] = {"step": [], "step+flag": [], "flag": []}
    for i in range(50):  # warm-up
        step(i, True)
    for _ in range(rounds):
        for name in ("step", "step+flag", "flag"):
            dist.barrier()
            began = time.perf_counter()
            for i in range(steps):
                if name == "flag":
                    _flag()
                else:
                    step(i, name == "step+flag")
            timings[name].append((time.perf_counter() - began) / steps * 1e3)
    if rank == 0:
        out.update(timings)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    port = master_port(uuid.uuid4().hex, 1)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(port, args.steps, args.rounds, out), nprocs=2)
        timings = dict(out)
    load = os.getloadavg()[0]
    print(f"stop flag, 2 ranks, gloo on loopback, {args.steps} steps x {args.rounds} rounds")
    print(f"  load average {load:.2f}; ms per step, median of rounds (min-max)")
    for name, values in timings.items():
        spread = f"({min(values):.3f}-{max(values):.3f})"
        print(f"  {name:10s} {statistics.median(values):7.3f} {spread}")
    step, flagged = statistics.median(timings["step"]), statistics.median(timings["step+flag"])
    added = f"{flagged - step:.3f} ms to a {step:.3f} ms step ({flagged / step - 1:+.1%})"
    print(f"  the flag adds {added}")


if __name__ == "__main__":
    main()
