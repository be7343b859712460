"""The built-in trainer: an MLP on scikit-learn's 8x8 digits, resumable to the step.

Run as ``python -m spotline.vm_image.trainers.digits_mlp`` with the ``SPOTLINE_*``
variables the agent sets. Every epoch visits the training set in an order drawn
from ``(seed, epoch)`` alone, so a run resumed from a checkpoint taken in the
middle of an epoch skips to the same batch and ends with the same weights as a
run that was never stopped.

Signals: SIGUSR1 saves a checkpoint at the next step boundary and training goes
on; SIGTERM saves one and exits with 143. On several nodes (a gang) the Spot
notice reaches one node's ranks only: every step the ranks share whether any of
them was sent SIGTERM (one flag in a collective), so the whole gang stops at
the same step and rank 0 saves it, whichever node was noticed.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
from torch import nn

from spotline.report import report_checkpoint, report_epoch, report_resumed
from spotline.torch import (
    PreemptionFlag,
    load_latest_checkpoint,
    save_checkpoint,
)
from spotline.vm_image.trainers.contract import (
    RunSettings,
    RunSettingsError,
    classes_of,
    training_split,
)

# What a shell reports for a process ended by SIGTERM; the agent reads it as
# "stopped on request, checkpoint saved".
EXIT_PREEMPTED = 143
EXIT_BAD_SETTINGS = 2

DEFAULT_EPOCHS = 5
DEFAULT_BATCH_SIZE = 32
DEFAULT_LR = 0.01
DEFAULT_HIDDEN = 64


@dataclass(frozen=True)
class Settings:
    """The run as the agent describes it in ``SPOTLINE_*`` variables."""

    job_id: str
    attempt: int
    epochs: int
    batch_size: int
    seed: int
    validation_split: float
    lr: float
    hidden: int
    checkpoint_dir: str
    # Extra seconds per step, standing in for a model that takes real compute:
    # digits trains in a blink, too fast to watch a preemption land mid-epoch.
    step_time_s: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read the settings; only ``SPOTLINE_CHECKPOINT_URL`` is required.

        Raises:
            RunSettingsError: a value is missing, malformed or out of range.
        """
        run = RunSettings.from_env(env, DEFAULT_EPOCHS, DEFAULT_BATCH_SIZE)
        hyper = run.hyperparameters
        try:
            settings = cls(
                job_id=run.job_id,
                attempt=run.attempt,
                epochs=run.epochs,
                batch_size=run.batch_size,
                seed=run.seed,
                validation_split=run.validation_split,
                lr=float(hyper.get("lr", DEFAULT_LR)),
                hidden=int(hyper.get("hidden", DEFAULT_HIDDEN)),
                checkpoint_dir=run.checkpoint_dir,
                step_time_s=float(hyper.get("step_time_s", 0.0)),
            )
        except (TypeError, ValueError) as error:
            raise RunSettingsError(f"SPOTLINE_HYPERPARAMETERS: {error}") from None
        if settings.step_time_s < 0:
            raise RunSettingsError("step_time_s must not be negative")
        if settings.hidden < 1:
            raise RunSettingsError("hidden must be at least 1")
        return settings

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between attempts for a checkpoint to apply."""
        keep = ("batch_size", "seed", "validation_split", "lr", "hidden")
        return {name: value for name, value in asdict(self).items() if name in keep}


@dataclass(frozen=True)
class Digits:
    """Features scaled to [0, 1] and labels, split into train and validation."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    classes: int = 10

    @property
    def features(self) -> int:
        return int(self.x_train.shape[1])


def load_digits_split(
    seed: int, validation_split: float, env: Mapping[str, str] | None = None
) -> Digits:
    """The job's data set (``SPOTLINE_DATA_DIR`` in ``env``: see
    ``contract.training_split``), else the 1797 digits, shuffled by ``seed``
    and split into train and validation."""
    split = training_split(seed, validation_split, env or {})
    return Digits(
        torch.from_numpy(split.x_train),
        torch.from_numpy(split.y_train),
        torch.from_numpy(split.x_val),
        torch.from_numpy(split.y_val),
        classes=classes_of(split),
    )


def build_model(hidden: int, features: int = 64, classes: int = 10) -> nn.Sequential:
    """``features`` inputs (the digits' 64 pixels) -> ``hidden`` ReLU units ->
    ``classes`` logits."""
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def batch_order(seed: int, epoch: int, size: int) -> torch.Tensor:
    """The order of the training samples in 0-based ``epoch``: a function of its inputs."""
    return torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(size))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on ``(x, y)``."""
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return loss, accuracy


def train(settings: Settings, flag: PreemptionFlag) -> int:
    """Train to ``settings.epochs`` from the newest checkpoint; return the exit code."""
    torch.set_num_threads(1)
    torch.manual_seed(settings.seed)
    np.random.seed(settings.seed)
    random.seed(settings.seed)

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if settings.batch_size < world:
        print(f"batch size {settings.batch_size} < {world} nodes", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    data = load_digits_split(settings.seed, settings.validation_split, os.environ)
    model = build_model(settings.hidden, data.features, data.classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    loss_fn = nn.CrossEntropyLoss()
    n_train = len(data.y_train)
    steps_per_epoch = math.ceil(n_train / settings.batch_size)

    print(
        f"job {settings.job_id} attempt {settings.attempt}: {settings.epochs} epochs of "
        f"{steps_per_epoch} steps ({n_train} samples, batch {settings.batch_size})",
        flush=True,
    )
    epoch = step_in_epoch = step = 0
    checkpoint = load_latest_checkpoint(settings.checkpoint_dir)
    if checkpoint is not None:
        if checkpoint.extra.get("settings") != settings.fingerprint():
            print(
                f"{checkpoint.uri} was saved with {checkpoint.extra.get('settings')}, "
                f"this run has {settings.fingerprint()}",
                file=sys.stderr,
            )
            return EXIT_BAD_SETTINGS
        checkpoint.restore(model, optimizer)
        epoch, step_in_epoch, step = checkpoint.epoch, checkpoint.step_in_epoch, checkpoint.step
        print(
            # Epochs count from 1 in every log: this is the one it goes on with.
            f"resumed_from_step={step} epoch={epoch + 1}/{settings.epochs} "
            f"step_in_epoch={step_in_epoch} "
            f"from {checkpoint.uri}",
            flush=True,
        )
        if rank == 0:
            report_resumed(step, checkpoint.uri)
    net = _distributed(model, rank, world, data.x_train[:1])
    board = _tensorboard(rank)

    written: dict[int, str] = {}  # step -> its checkpoint: a stop after an epoch's save reuses it

    def save(done_epochs: int, done_in_epoch: int) -> str:
        if rank != 0:
            return ""  # one writer: rank 0 holds the same weights as every rank
        if step not in written:
            written.clear()
            written[step] = save_checkpoint(
                settings.checkpoint_dir,
                model=model,
                optimizer=optimizer,
                epoch=done_epochs,
                step=step,
                step_in_epoch=done_in_epoch,
                extra={"settings": settings.fingerprint()},
            )
        return written[step]

    while epoch < settings.epochs:
        started = time.perf_counter()
        order = batch_order(settings.seed, epoch, n_train)
        model.train()
        for batch in range(step_in_epoch, steps_per_epoch):
            stop = _stop_agreed(flag, world)
            if (stop or flag.checkpoint_requested) and _serve_signal(
                flag, step, save(epoch, batch), rank, stop
            ):
                if world > 1:
                    del net  # as at the end of training: freed after a peer left, it hung
                    _leave_group()
                return EXIT_PREEMPTED
            rows = order[batch * settings.batch_size : (batch + 1) * settings.batch_size]
            # Each node takes its share of the batch; DDP averages the gradients.
            rows = rows[rank::world]
            optimizer.zero_grad(set_to_none=True)
            loss_fn(net(data.x_train[rows]), data.y_train[rows]).backward()
            optimizer.step()
            step += 1
            if settings.step_time_s:
                time.sleep(settings.step_time_s)
        epoch, step_in_epoch = epoch + 1, 0
        trained = time.perf_counter()

        if rank != 0:
            continue  # node 0 evaluates, checkpoints and reports for the gang
        metrics = _epoch_metrics(model, data)
        uri = save(epoch, 0)
        saved = time.perf_counter()
        if board is not None:
            for name, value in metrics.items():
                board.add_scalar(name, value, step)
            board.flush()  # before the report: the agent uploads the logs on it
        report_epoch(epoch, settings.epochs, step, metrics, uri)
        # To 0.01 ms: the agent's overhead benchmark parses these times and
        # looks for differences under 1 % of an epoch.
        train_ms, save_ms = 1000 * (trained - started), 1000 * (saved - trained)
        print(
            f"epoch {epoch}/{settings.epochs} step {step} "
            + " ".join(f"{name} {value:.4f}" for name, value in metrics.items())
            + f" ({train_ms:.2f} ms train, {save_ms:.2f} ms eval+checkpoint)",
            flush=True,
        )
        # A signal that came during the epoch's last step or its evaluation is
        # served at the next epoch's first step, by the checkpoint just written
        # (``written``): every rank of a gang decides there, together.

    print(f"all {settings.epochs} epochs done at step {step}", flush=True)
    print(f"rank {rank} final weights sha256={weights_digest(model)}", flush=True)
    if world > 1:
        # The DDP wrapper is freed while every rank is still here: freed when
        # train() returned, after its peer had gone, it hung (1 run in 7-9
        # under load), and the barrier keeps any rank from leaving before then.
        del net
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


def _tensorboard(rank: int) -> Any:
    """A TensorBoard writer into SPOTLINE_TENSORBOARD_DIR (node 0 only), or None."""
    folder = os.environ.get("SPOTLINE_TENSORBOARD_DIR")
    if not folder or rank != 0:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("tensorboard is not installed: no TensorBoard logs", flush=True)
        return None
    return SummaryWriter(log_dir=folder)


def _distributed(model: nn.Module, rank: int, world: int, sample: torch.Tensor) -> nn.Module:
    """The model wrapped for data-parallel training over the job's nodes
    (MASTER_ADDR/MASTER_PORT from the agent), or as it is on one node.

    DDP lays its gradient bucket out again after its first backward pass, in
    the order the gradients came, and an element's place in the bucket sets
    the order in which the ranks' gradients are summed. A run resumed mid-way
    would sum its first step in another order than an uninterrupted run did
    that step, and with 3 ranks or more end with other weights. One backward
    pass of zeros (``sample``: any input), before any step, settles the
    layout in every run alike; it changes no weight and no optimizer state.
    """
    if world == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    torch.distributed.init_process_group(
        "gloo", init_method="env://", rank=rank, world_size=world,
        timeout=timedelta(minutes=5),
    )  # fmt: skip
    net = DistributedDataParallel(model)
    net(sample).sum().mul(0).backward()
    model.zero_grad(set_to_none=True)
    return net


def weights_digest(model: nn.Module) -> str:
    """A fingerprint of the weights, to compare nodes and runs."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def _leave_group() -> None:
    """Leave the gang's process group together once rank 0 has saved: a rank
    exiting with the group still up was aborted by gloo's threads
    ("terminate called without an active exception", exit -6 under load). A
    peer already gone (its VM taken) makes the barrier fail: the state is
    saved by then, so the stop stands."""
    try:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    except Exception as error:  # any failure here leaves the save as it is
        print(f"left the process group without its peers: {error}", flush=True)


def _stop_agreed(flag: PreemptionFlag, world: int) -> bool:
    """Whether any rank was sent SIGTERM. The ranks of a gang share it in a
    collective every step (a max over one number), so all stop at the same
    step: a rank that stopped alone would leave the others blocked in the next
    step's all-reduce, and rank 0, on a node with no notice, would save nothing."""
    if world == 1:
        return flag.exit_requested
    told = torch.tensor([float(flag.exit_requested)])
    torch.distributed.all_reduce(told, op=torch.distributed.ReduceOp.MAX)
    return bool(told.item())


def _serve_signal(flag: PreemptionFlag, step: int, uri: str, rank: int, stop: bool) -> bool:
    """Report the checkpoint a signal asked for; True when the run must stop now
    (``stop``: some rank of the job was sent SIGTERM)."""
    why = "SIGTERM" if flag.exit_requested else "another node's preemption notice"
    if rank != 0:  # nodes other than 0 save nothing: stop, or carry on
        if stop:
            print(f"stopped at step {step} ({why})", flush=True)
            return True
        flag.clear_checkpoint_request()
        return False
    # "peer": stopped for another node's notice; the agent of a node with no
    # notice of its own reports that its gang stopped, not that it was preempted.
    reason = "sigterm" if flag.exit_requested else "peer" if stop else flag.reason or ""
    report_checkpoint(step, uri, reason)
    if stop:
        print(f"stopped at step {step} ({why}), state in {uri}", flush=True)
        return True
    print(f"checkpoint on SIGUSR1 at step {step}: {uri}", flush=True)
    flag.clear_checkpoint_request()
    return False


def _epoch_metrics(model: nn.Module, data: Digits) -> dict[str, float]:
    train_loss, train_accuracy = evaluate(model, data.x_train, data.y_train)
    metrics = {"train_loss": train_loss, "train_accuracy": train_accuracy}
    if len(data.y_val):
        val_loss, val_accuracy = evaluate(model, data.x_val, data.y_val)
        metrics |= {"val_loss": val_loss, "val_accuracy": val_accuracy}
    return metrics


def main(env: Mapping[str, str] | None = None) -> int:
    """Entry point: read the settings from ``env`` (default: the process's) and train."""
    with PreemptionFlag() as flag:
        try:
            settings = Settings.from_env(os.environ if env is None else env)
        except RunSettingsError as error:
            print(f"digits_mlp: {error}", file=sys.stderr)
            return EXIT_BAD_SETTINGS
        return train(settings, flag)


if __name__ == "__main__":
    sys.exit(main())
