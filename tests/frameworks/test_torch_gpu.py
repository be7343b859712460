"""``spotline.torch`` on a GPU: a run saved on the notice and restored in a
fresh model and optimizer ends bit for bit where the run never stopped ends,
dropout's CUDA random stream included; and a checkpoint from a machine with
more GPUs than this one (a fallback machine id) still restores.

Needs a CUDA device: skipped on machines without one (CI's); run on a GPU
machine with ``pytest tests/frameworks/test_torch_gpu.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from spotline.torch import load_latest_checkpoint, save_checkpoint

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here"),
]

STEPS = 20
SAVED_AT = 11


def make(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.3),  # draws from the CUDA generator every step
        torch.nn.Linear(64, 4),
    ).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: range) -> None:
    data = torch.Generator(device="cuda")
    for step in steps:
        data.manual_seed(step)  # the batch of a step is the same in every attempt
        x = torch.randn(16, 32, device="cuda", generator=data)
        y = torch.randint(0, 4, (16,), device="cuda", generator=data)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


def test_a_restored_run_ends_where_the_uninterrupted_run_ends(tmp_path: Path) -> None:
    model, optimizer = make(seed=1)
    torch.cuda.manual_seed(7)
    train(model, optimizer, range(STEPS))
    expected = [p.detach().clone() for p in model.parameters()]

    model, optimizer = make(seed=1)
    torch.cuda.manual_seed(7)
    train(model, optimizer, range(SAVED_AT))
    save_checkpoint(
        str(tmp_path), model=model, optimizer=optimizer, epoch=0, step=SAVED_AT,
        step_in_epoch=SAVED_AT,
    )  # fmt: skip
    torch.cuda.manual_seed(12345)  # the next attempt's process starts elsewhere
    fresh, fresh_optimizer = make(seed=99)
    checkpoint = load_latest_checkpoint(str(tmp_path))
    assert checkpoint is not None and checkpoint.step == SAVED_AT
    checkpoint.restore(fresh, fresh_optimizer)
    train(fresh, fresh_optimizer, range(SAVED_AT, STEPS))

    for got, want in zip(fresh.parameters(), expected, strict=True):
        assert got.device.type == "cuda"
        assert torch.equal(got, want)


def test_a_checkpoint_from_a_machine_with_more_gpus_restores(tmp_path: Path) -> None:
    model, optimizer = make(seed=1)
    save_checkpoint(
        str(tmp_path), model=model, optimizer=optimizer, epoch=0, step=1, step_in_epoch=1
    )
    checkpoint = load_latest_checkpoint(str(tmp_path))
    assert checkpoint is not None
    # As if saved on a VM with one more GPU than this machine has.
    checkpoint.rng["cuda"] = [*checkpoint.rng["cuda"], checkpoint.rng["cuda"][0]]

    checkpoint.restore(model, optimizer)

    assert torch.equal(torch.cuda.get_rng_state(0), checkpoint.rng["cuda"][0])
