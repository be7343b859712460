"""How long a checkpoint takes once the 30 s Spot notice arrives.

For models of about 100 MB and 1 GB of float32 parameters (plus Adam's two
moment buffers, so the checkpoint is about three times that), a timer thread
sends SIGUSR1 at a random point of a training loop; the loop, polling a
PreemptionFlag at each step boundary as the trainers do, then calls
spotline.torch.save_checkpoint into a local folder (file://, same disk as the
repo). Reported, 3 runs each, median and max: notice -> step boundary, the
save split into torch.save (straight into the temporary file) / rename / the
rest, notice ->
checkpoint written, an fsync afterwards (not in the total) and read-back.
Then the step-boundary delay alone, for a loop of ~10 ms steps.

Prints numbers; asserts nothing (the machines are shared and noisy).
Run: .venv/bin/python benchmarks/bench_checkpoint.py [--runs 3] [--sizes-mb 100 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from fsspec.implementations.local import LocalFileSystem

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from spotline.torch import (  # noqa: E402
    PreemptionFlag,
    load_checkpoint,
    save_checkpoint,
)

MB = 10**6
BATCH = 8


@dataclass
class Run:
    """The seconds each part of one notice -> checkpoint took."""

    parts: dict[str, float] = field(default_factory=dict)


def build(target_bytes: int, width: int) -> tuple[torch.nn.Sequential, torch.optim.Adam]:
    """Square Linear layers whose float32 parameters come to about ``target_bytes``."""
    layer_bytes = 4 * (width * width + width)
    layers = max(1, round(target_bytes / layer_bytes))
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def tensor_bytes(state: Any) -> int:
    """Bytes of every tensor in a (nested) state dict."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(tensor_bytes(value) for value in state.values())
    if isinstance(state, list | tuple):
        return sum(tensor_bytes(value) for value in state)
    return 0


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, width: int) -> None:
    optimizer.zero_grad(set_to_none=True)
    model(torch.randn(BATCH, width)).pow(2).mean().backward()
    optimizer.step()


@contextlib.contextmanager
def timing(owner: Any, name: str, into: dict[str, float], label: str) -> Iterator[None]:
    """Add the time spent in ``owner.name`` to ``into[label]`` while inside."""
    original = getattr(owner, name)
    was_own = name in vars(owner)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into[label] = into.get(label, 0.0) + time.perf_counter() - started

    setattr(owner, name, timed)
    try:
        yield
    finally:
        if was_own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


class StampedFlag(PreemptionFlag):
    """A PreemptionFlag that also notes when its handler ran (the flag was set)."""

    set_at = 0.0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.set_at = time.perf_counter()
        super()._on_signal(signum, frame)


def notice_after(delay_s: float, sent: list[float]) -> threading.Timer:
    """A timer that records the time and sends this process SIGUSR1 after ``delay_s``."""

    def fire() -> None:
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGUSR1)

    timer = threading.Timer(delay_s, fire)
    timer.start()
    return timer


def checkpoint_on_notice(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    width: int,
    folder: str,
    step: int,
    step_s: float,
) -> tuple[Run, int, str]:
    """Train until a notice sent at a random point; checkpoint at the next boundary."""
    run = Run()
    sent: list[float] = []
    with StampedFlag() as flag:
        timer = notice_after(random.uniform(0.0, 2.0 * step_s), sent)
        while not flag.pending:
            train_step(model, optimizer, width)
            step += 1
        noticed = time.perf_counter()
        timer.join()
        with (
            timing(torch, "save", run.parts, "serialize"),
            timing(LocalFileSystem, "mv", run.parts, "rename"),
        ):
            uri = save_checkpoint(
                folder,
                model=model,
                optimizer=optimizer,
                epoch=0,
                step=step,
                step_in_epoch=step,
                keep=1,
            )
        written = time.perf_counter()
    named = sum(run.parts.values())
    run.parts["boundary"] = noticed - sent[0]
    run.parts["save"] = written - noticed
    run.parts["other"] = run.parts["save"] - named
    run.parts["total"] = written - sent[0]
    return run, step, uri


def direct_save_seconds(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path
) -> float:
    """For comparison: torch.save of the same states straight into a file, no buffer."""
    path = folder / "direct.pt"
    started = time.perf_counter()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    elapsed = time.perf_counter() - started
    path.unlink()
    return elapsed


def fsync_seconds(uri: str) -> float:
    started = time.perf_counter()
    fd = os.open(uri.removeprefix("file://"), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - started


def load_seconds(uri: str) -> float:
    started = time.perf_counter()
    checkpoint = load_checkpoint(uri)
    elapsed = time.perf_counter() - started
    del checkpoint
    gc.collect()
    return elapsed


def available_bytes() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def scratch_parent() -> str | None:
    """The temp folder when it is on the repo's disk, else the repo itself."""
    temp = tempfile.gettempdir()
    return None if os.stat(temp).st_dev == os.stat(REPO).st_dev else str(REPO)


ROWS = [
    ("boundary", "notice -> step boundary"),
    ("serialize", "torch.save into the temporary file"),
    ("rename", "rename into place (mv)"),
    ("other", "rest (state_dict, RNG, listing, prune)"),
    ("save", "save_checkpoint total"),
    ("total", "notice -> checkpoint written"),
    ("fsync", "fsync afterwards (not in total)"),
    ("load", "load_checkpoint (warm page cache)"),
    ("direct", "compare: torch.save straight to a file"),
]


def bench_size(target_mb: int, runs: int) -> None:
    width = 2048 if target_mb < 500 else 4096
    model, optimizer = build(target_mb * MB, width)
    # Peak: parameters, gradients, two Adam moments and load_checkpoint's read
    # of the 3x file: about 8x the parameters.
    needed = 8 * tensor_bytes(model.state_dict())
    if available_bytes() < needed + 2 * 1024**3:
        print(f"\nskipping {target_mb} MB: needs ~{needed / 2**30:.1f} GiB free")
        return
    step = 0
    warm = time.perf_counter()
    train_step(model, optimizer, width)  # allocates Adam's moments
    train_step(model, optimizer, width)
    step_s = (time.perf_counter() - warm) / 2
    param_bytes = tensor_bytes(model.state_dict())
    optimizer_bytes = tensor_bytes(optimizer.state_dict())
    results: list[Run] = []
    file_bytes = 0
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-", dir=scratch_parent()) as tmp:
        folder = Path(tmp).as_uri()
        for _ in range(runs):
            run, step, uri = checkpoint_on_notice(model, optimizer, width, folder, step, step_s)
            file_bytes = os.path.getsize(uri.removeprefix("file://"))
            run.parts["fsync"] = fsync_seconds(uri)
            run.parts["load"] = load_seconds(uri)
            run.parts["direct"] = direct_save_seconds(model, optimizer, Path(tmp))
            results.append(run)
            gc.collect()
    layers = len(model)
    del model, optimizer
    gc.collect()

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"\n{layers} x Linear({width}, {width}): parameters {param_bytes:,} B "
        f"({param_bytes / MB:.1f} MB), Adam moments {optimizer_bytes:,} B, "
        f"checkpoint file {file_bytes:,} B ({file_bytes / MB:.1f} MB)"
    )
    print(f"step (batch {BATCH}) ~{step_s:.3f} s; peak RSS so far {peak / 2**30:.2f} GiB")
    print(f"  {'seconds, ' + str(runs) + ' runs':<40}{'median':>9}{'max':>9}")
    for key, label in ROWS:
        values = [run.parts.get(key, 0.0) for run in results]
        print(f"  {label:<40}{statistics.median(values):9.3f}{max(values):9.3f}")
    save_median = statistics.median(run.parts["save"] for run in results)
    print(f"  save throughput (median) {file_bytes / MB / save_median:.0f} MB/s")


def boundary_delay(trials: int, threads: int, target_step_s: float = 0.010) -> None:
    """Notice -> boundary for a loop of ~``target_step_s`` steps on ``threads`` threads."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    width = 512
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = 8

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(torch.randn(batch, width)).pow(2).mean().backward()
        optimizer.step()

    def median_step_s(n: int = 20) -> float:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    def typical_step_s() -> float:
        # Other tenants stall a core now and then; the least of a few medians
        # is the step time when nothing else runs.
        return min(median_step_s() for _ in range(3))

    median_step_s(5)
    while batch < 4096 and (measured := typical_step_s()) < target_step_s:
        batch *= 2
    batch = max(8, round(batch * target_step_s / measured))
    step_s = typical_step_s()
    delivery, polled, total = [], [], []
    flag = StampedFlag()
    with flag:
        for _ in range(trials):
            sent: list[float] = []
            timer = notice_after(random.uniform(0.0, 5.0 * step_s), sent)
            while not flag.pending:
                step()
            noticed = time.perf_counter()
            timer.join()
            delivery.append(flag.set_at - sent[0])
            polled.append(noticed - flag.set_at)
            total.append(noticed - sent[0])
            flag.clear_checkpoint_request()
    torch.set_num_threads(previous_threads)
    print(
        f"\nstep-boundary delay: steps of ~{1000 * step_s:.1f} ms "
        f"(batch {batch}, {threads} torch threads), {trials} notices, ms"
    )
    print(f"  {'':<36}{'median':>9}{'p90':>9}{'max':>9}")
    for label, values in (
        ("signal sent -> flag set (handler)", delivery),
        ("flag set -> loop noticed", polled),
        ("signal sent -> loop noticed", total),
    ):
        ms = sorted(1000 * value for value in values)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        print(f"  {label:<36}{statistics.median(ms):9.1f}{p90:9.1f}{ms[-1]:9.1f}")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes-mb", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--trials", type=int, default=30, help="notices for the 10 ms loop")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    for target_mb in args.sizes_mb:
        bench_size(target_mb, args.runs)
    for threads in sorted({torch.get_num_threads(), 1}, reverse=True):
        boundary_delay(args.trials, threads)


if __name__ == "__main__":
    main()
