"""A checkpoint folder is writable by more than the job that reads it (every
VM of the project, in the shared-account mode): a file planted there must
not run code inside the job that resumes from it. A genuine checkpoint, and
one written before the RNG states were stored as tensors, still resume.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from spotline.torch import (
    UnsafeCheckpoint,
    checkpoint_name,
    load_checkpoint,
    load_latest_checkpoint,
    save_checkpoint,
)


class _RunsCode:
    """Unpickling this calls os.system: what a planted checkpoint would do."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.mark}",))


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.slow
def test_a_planted_checkpoint_that_runs_code_is_refused(tmp_path: Path) -> None:
    model, optimizer = _model()
    genuine = save_checkpoint(
        str(tmp_path), model=model, optimizer=optimizer, epoch=1, step=10, step_in_epoch=0
    )
    mark = tmp_path / "code-ran"
    # Newer than the genuine one, so it would be the one resumed from.
    planted = tmp_path / checkpoint_name(20)
    torch.save({"step": 20, "model": _RunsCode(mark)}, planted)

    with pytest.raises(UnsafeCheckpoint, match=r"could run code"):
        load_checkpoint(str(planted))
    assert not mark.exists(), "loading the planted file ran its code"

    resumed = load_latest_checkpoint(str(tmp_path))
    assert not mark.exists()
    assert resumed is not None and resumed.uri.endswith(genuine.rsplit("/", 1)[-1])
    assert resumed.step == 10


@pytest.mark.slow
def test_a_genuine_checkpoint_resumes_with_its_random_states(tmp_path: Path) -> None:
    model, optimizer = _model()
    np.random.seed(7)
    random.seed(7)
    torch.manual_seed(7)
    uri = save_checkpoint(
        str(tmp_path), model=model, optimizer=optimizer, epoch=2, step=5, step_in_epoch=1,
        extra={"settings": {"lr": 0.1, "hidden": [4, 5]}, "best": torch.tensor(0.5)},
    )  # fmt: skip
    expected = (np.random.rand(), random.random(), torch.rand(1).item())

    np.random.seed(99)
    random.seed(99)
    torch.manual_seed(99)
    fresh = torch.nn.Linear(3, 2)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1)
    checkpoint = load_checkpoint(uri)
    checkpoint.restore(fresh, fresh_optimizer)

    assert (np.random.rand(), random.random(), torch.rand(1).item()) == expected
    assert torch.equal(fresh.state_dict()["weight"], model.state_dict()["weight"])
    assert checkpoint.extra["settings"] == {"lr": 0.1, "hidden": [4, 5]}


def test_an_older_checkpoint_with_numpys_own_state_still_loads(tmp_path: Path) -> None:
    model, optimizer = _model()
    np.random.seed(3)
    state = np.random.get_state()
    expected = np.random.rand()
    older = {
        "format": 1, "step": 4, "epoch": 1, "step_in_epoch": 0,
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": None,
        "rng": {"torch": torch.get_rng_state(), "numpy": state, "python": random.getstate()},
        "extra": {},
    }  # fmt: skip
    path = tmp_path / checkpoint_name(4)
    torch.save(older, path)

    checkpoint = load_checkpoint(str(path))
    np.random.seed(0)
    checkpoint.restore(model, optimizer)
    assert np.random.rand() == expected


def test_extra_that_would_not_load_back_is_refused_when_saved(tmp_path: Path) -> None:
    model, optimizer = _model()
    with pytest.raises(TypeError, match=r"extra\['when'\] is a \w*Path"):
        save_checkpoint(
            str(tmp_path), model=model, optimizer=optimizer, epoch=0, step=1, step_in_epoch=1,
            extra={"when": tmp_path},
        )  # fmt: skip
