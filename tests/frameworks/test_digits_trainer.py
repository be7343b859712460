"""The built-in digits trainer, run as the agent runs it, and its checkpoint helpers."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spotline.torch import (
    PreemptionFlag,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_latest_checkpoint,
    save_checkpoint,
)

REPO = Path(__file__).resolve().parents[2]
# Two samples a batch gives ~720 steps an epoch (about half a second): room to
# land a signal inside an epoch after seeing the previous one end.
SMALL_BATCHES = {"SPOTLINE_BATCH_SIZE": "2", "SPOTLINE_SEED": "7"}


@dataclass
class TrainerRun:
    """One trainer process with its checkpoint folder and events file."""

    process: subprocess.Popen[str]
    checkpoint_dir: Path
    events_path: Path
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = field(default=None)

    def wait(self, timeout: float = 60) -> int:
        if self.returncode is None:
            self.stdout, self.stderr = self.process.communicate(timeout=timeout)
            self.returncode = self.process.returncode
        return self.returncode

    def events(self, kind: str) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text().splitlines()
        return [event for event in map(json.loads, lines) if event["type"] == kind]

    def wait_for_event(self, found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"trainer exited early: {self.process.communicate()}")
            for kind in ("epoch", "checkpoint"):
                for event in self.events(kind):
                    if found(event):
                        return event
            time.sleep(0.002)
        raise AssertionError("no such event within 60 s")


def start_trainer(workdir: Path, epochs: int, **settings: str) -> TrainerRun:
    """Start the trainer with the agent's environment contract, rooted at ``workdir``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOTLINE_")}
    checkpoint_dir = workdir / "checkpoints"
    events_path = workdir / "events.jsonl"
    env |= {
        "SPOTLINE_JOB_ID": "job-test",
        "SPOTLINE_ATTEMPT": "1",
        "SPOTLINE_EPOCHS": str(epochs),
        "SPOTLINE_CHECKPOINT_URL": checkpoint_dir.as_uri(),
        "SPOTLINE_EVENTS": str(events_path),
        "SPOTLINE_VALIDATION_SPLIT": "0.2",
        "SPOTLINE_HYPERPARAMETERS": json.dumps({"lr": 0.01, "hidden": 64}),
        **settings,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.vm_image.trainers.digits_mlp"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return TrainerRun(process, checkpoint_dir, events_path)


def assert_same_result(run: TrainerRun, reference: TrainerRun) -> None:
    """Same final step, metrics and weights, each within 1e-6."""
    last, expected = run.events("epoch")[-1], reference.events("epoch")[-1]
    assert (last["epoch"], last["step"]) == (expected["epoch"], expected["step"])
    assert last["metrics"].keys() == expected["metrics"].keys()
    for name, value in expected["metrics"].items():
        assert abs(last["metrics"][name] - value) <= 1e-6, name
    weights = load_latest_checkpoint(str(run.checkpoint_dir))
    expected_weights = load_latest_checkpoint(str(reference.checkpoint_dir))
    assert weights is not None and expected_weights is not None
    assert weights.step == expected_weights.step
    for name, tensor in expected_weights.model.items():
        assert (weights.model[name] - tensor).abs().max().item() <= 1e-6, name


@pytest.fixture(scope="module")
def uninterrupted_4_epochs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrainerRun]:
    """A 4-epoch run with small batches, started early so it overlaps other runs."""
    run = start_trainer(tmp_path_factory.mktemp("reference"), epochs=4, **SMALL_BATCHES)
    yield run
    if run.process.poll() is None:
        run.process.kill()
        run.process.communicate()


@pytest.mark.frameworks
def test_three_epochs_learn_keep_two_checkpoints_and_rerun_exits_at_once(tmp_path: Path) -> None:
    run = start_trainer(tmp_path, epochs=3)
    assert run.wait() == 0, run.stderr

    epochs = run.events("epoch")
    assert [event["epoch"] for event in epochs] == [1, 2, 3]
    assert all(event["epochs"] == 3 for event in epochs)
    assert [event["step"] for event in epochs] == sorted({event["step"] for event in epochs})
    # Seeds 0-9 all reach 0.91-0.97 by epoch 3; chance is 0.1.
    assert epochs[-1]["metrics"]["val_accuracy"] > 0.9
    assert epochs[-1]["metrics"]["train_loss"] < epochs[0]["metrics"]["train_loss"]
    assert "epoch 3/3 step " in run.stdout
    kept = sorted(path.name for path in run.checkpoint_dir.iterdir())
    assert kept == [checkpoint_name(epochs[1]["step"]), checkpoint_name(epochs[2]["step"])]
    assert epochs[-1]["checkpoint_uri"] == (run.checkpoint_dir / kept[-1]).as_uri()

    again = start_trainer(tmp_path, epochs=3)
    assert again.wait() == 0, again.stderr
    assert len(again.events("epoch")) == 3
    assert "all 3 epochs done" in again.stdout


@pytest.mark.frameworks
def test_resume_after_two_epochs_matches_uninterrupted_run(
    tmp_path: Path, uninterrupted_4_epochs: TrainerRun
) -> None:
    first = start_trainer(tmp_path, epochs=2, **SMALL_BATCHES)
    assert first.wait() == 0, first.stderr
    saved_step = first.events("epoch")[-1]["step"]
    second = start_trainer(tmp_path, epochs=4, **SMALL_BATCHES)
    assert second.wait() == 0, second.stderr

    assert [event["epoch"] for event in second.events("epoch")] == [1, 2, 3, 4]
    assert f"resumed_from_step={saved_step} epoch=3/4 step_in_epoch=0 " in second.stdout
    assert uninterrupted_4_epochs.wait() == 0, uninterrupted_4_epochs.stderr
    assert_same_result(second, uninterrupted_4_epochs)


@pytest.mark.frameworks
def test_sigusr1_then_sigterm_mid_epoch_and_resume_from_that_step(
    tmp_path: Path, uninterrupted_4_epochs: TrainerRun
) -> None:
    run = start_trainer(tmp_path, epochs=4, **SMALL_BATCHES)
    steps_per_epoch = run.wait_for_event(lambda event: event.get("epoch") == 1)["step"]
    run.process.send_signal(signal.SIGUSR1)
    on_request = run.wait_for_event(lambda event: event.get("reason") == "sigusr1")
    # A step takes about a millisecond and epoch 2 about half a second: after
    # this pause the trainer is some steps into epoch 2 and far from its end.
    time.sleep(0.05)
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == 143, run.stderr

    on_exit = run.events("checkpoint")[-1]
    assert on_exit["reason"] == "sigterm"
    # SIGUSR1 may land before the trainer's check right after epoch 1's
    # checkpoint, which then serves it.
    assert steps_per_epoch <= on_request["step"] < on_exit["step"] < 2 * steps_per_epoch
    assert [event["epoch"] for event in run.events("epoch")] == [1]
    saved = load_checkpoint(on_exit["uri"])
    assert (saved.epoch, saved.step_in_epoch) == (1, on_exit["step"] - steps_per_epoch)

    resumed = start_trainer(tmp_path, epochs=4, **SMALL_BATCHES)
    assert resumed.wait() == 0, resumed.stderr
    assert f"resumed_from_step={on_exit['step']} epoch=2/4 " in resumed.stdout
    assert [event["epoch"] for event in resumed.events("epoch")] == [1, 2, 3, 4]
    assert uninterrupted_4_epochs.wait() == 0, uninterrupted_4_epochs.stderr
    assert_same_result(resumed, uninterrupted_4_epochs)


def make_training_state(seed: int = 0) -> tuple[torch.nn.Linear, torch.optim.Adam]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def save_at(directory: str, step: int, **kwargs: Any) -> str:
    model, optimizer = make_training_state()
    return save_checkpoint(
        directory,
        model=model,
        optimizer=optimizer,
        epoch=0,
        step=step,
        step_in_epoch=step,
        **kwargs,
    )


def test_empty_or_missing_folder_has_no_checkpoint(tmp_path: Path) -> None:
    for directory in (str(tmp_path), str(tmp_path / "missing"), (tmp_path / "m2").as_uri()):
        assert list_checkpoints(directory) == []
        assert latest_checkpoint(directory) is None
        assert load_latest_checkpoint(directory) is None


@pytest.mark.frameworks
def test_round_trip_restores_model_optimizer_scheduler_and_rngs(tmp_path: Path) -> None:
    model, optimizer = make_training_state()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    optimizer.step()
    scheduler.step()
    uri = save_checkpoint(
        tmp_path.as_uri(),
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        epoch=3,
        step=1234,
        step_in_epoch=34,
        extra={"note": "hello"},
    )
    expected_draws = (torch.rand(3), np.random.rand(3), random.random())
    assert uri == (tmp_path / "ckpt-000000001234.pt").as_uri()

    fresh_model, fresh_optimizer = make_training_state(seed=1)
    fresh_scheduler = torch.optim.lr_scheduler.StepLR(fresh_optimizer, step_size=1, gamma=0.5)
    loaded = load_latest_checkpoint(str(tmp_path))
    assert loaded is not None
    loaded.restore(fresh_model, fresh_optimizer, fresh_scheduler)

    assert (loaded.uri, loaded.epoch, loaded.step, loaded.step_in_epoch) == (uri, 3, 1234, 34)
    assert loaded.extra == {"note": "hello"}
    for name, tensor in model.state_dict().items():
        assert torch.equal(fresh_model.state_dict()[name], tensor)
    assert fresh_optimizer.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]
    assert torch.equal(
        fresh_optimizer.state_dict()["state"][0]["exp_avg"],
        optimizer.state_dict()["state"][0]["exp_avg"],
    )
    assert fresh_scheduler.state_dict() == scheduler.state_dict()
    assert torch.equal(torch.rand(3), expected_draws[0])
    assert np.array_equal(np.random.rand(3), expected_draws[1])
    assert random.random() == expected_draws[2]


def test_keeps_the_newest_by_step_and_names_sort_by_step(tmp_path: Path) -> None:
    for step in (9, 10, 200):
        save_at(str(tmp_path), step, keep=3)
    assert [Path(uri).name for uri in list_checkpoints(str(tmp_path))] == [
        "ckpt-000000000009.pt",
        "ckpt-000000000010.pt",
        "ckpt-000000000200.pt",
    ]
    # A lower step (a run restarted from scratch) is kept: its URL was just returned.
    save_at(str(tmp_path), 3, keep=3)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "ckpt-000000000003.pt",
        "ckpt-000000000010.pt",
        "ckpt-000000000200.pt",
    ]

    save_at(str(tmp_path), 201)
    assert [Path(uri).name for uri in list_checkpoints(str(tmp_path))] == [
        "ckpt-000000000200.pt",
        "ckpt-000000000201.pt",
    ]
    with pytest.raises(ValueError):
        save_at(str(tmp_path), 202, keep=0)


def test_leftover_temporary_and_cut_short_files_are_passed_over(tmp_path: Path) -> None:
    save_at(str(tmp_path), 5)
    whole = (tmp_path / checkpoint_name(5)).read_bytes()
    (tmp_path / f".tmp-dead-{checkpoint_name(9)}").write_bytes(whole[:100])
    (tmp_path / checkpoint_name(8)).write_bytes(whole[: len(whole) // 2])

    assert latest_checkpoint(str(tmp_path)) == (tmp_path / checkpoint_name(8)).as_uri()
    loaded = load_latest_checkpoint(str(tmp_path))
    assert loaded is not None and loaded.step == 5


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1024)  # 4 MB a file, so a plain write would be seen midway
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    directory = str(tmp_path)
    done = threading.Event()
    loaded_steps: list[int] = []

    def read_until_done() -> None:
        while not done.is_set():
            uri = latest_checkpoint(directory)
            if uri is not None:
                loaded_steps.append(load_checkpoint(uri).step)

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for step in range(1, 16):
            save_checkpoint(
                directory, model=model, optimizer=optimizer, epoch=0, step=step, step_in_epoch=0,
                keep=100,
            )  # fmt: skip
    finally:
        done.set()
        reader.join()
    assert loaded_steps == sorted(loaded_steps)
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".tmp-")]


def test_saves_through_any_fsspec_filesystem() -> None:
    directory = "memory://spotline-test/job-1/checkpoints"
    uri = save_at(directory, 7)
    assert uri.startswith("memory://") and uri.endswith("/job-1/checkpoints/ckpt-000000000007.pt")
    loaded = load_latest_checkpoint(directory)
    assert loaded is not None and loaded.step == 7 and loaded.uri == uri
    assert load_checkpoint(uri).step == 7


def test_preemption_flag_only_sets_flags_and_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionFlag() as flag:
        assert (flag.pending, flag.reason) == (False, None)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert (flag.checkpoint_requested, flag.exit_requested, flag.reason) == (
            True,
            False,
            "sigusr1",
        )
        flag.clear_checkpoint_request()
        assert not flag.pending
        os.kill(os.getpid(), signal.SIGTERM)
        assert (flag.pending, flag.exit_requested, flag.reason) == (True, True, "sigterm")
    assert signal.getsignal(signal.SIGTERM) == before
