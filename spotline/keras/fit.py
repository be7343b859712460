"""``spotline.keras.fit``: train a compiled Keras model on a Spot VM in one call.

The call saves the model (``model.save``) and the arrays into a folder,
submits a ``keras_model`` job with that folder as its data, shows the epochs
as they end, and returns the job id, the trained model and a
``keras.callbacks.History`` whose ``history`` is what ``model.fit`` returns.
A preemption costs nothing but time: the next VM goes on from the step saved
on the notice, so the model and the history are those of a run never stopped.
"""

from __future__ import annotations

import getpass
import math
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import keras

from spotline.vm_image.trainers import keras_inputs

if TYPE_CHECKING:
    from spotline.infra.client.job import Job
    from spotline.shared.domain.documents import EpochDoc

TRAINER = "keras_model"
# How long the epochs' records may trail the job's finish.
EPOCHS_RECORDED_WITHIN_S = 30.0
# fit() arguments that fit's own parameters carry.
OWN_ARGUMENTS = frozenset(
    {"x", "y", "batch_size", "epochs", "validation_data", "callbacks", "initial_epoch"}
)


class FitResult(NamedTuple):
    """What ``fit`` returns; unpacks as ``job_id, model, history``."""

    job_id: str
    model: keras.Model
    history: keras.callbacks.History


def fit(
    model: keras.Model,
    x: Any,
    y: Any,
    *,
    machine_ids: Sequence[str],
    epochs: int,
    batch_size: int,
    validation_data: tuple[Any, Any] | None = None,
    fit_kwargs: Mapping[str, Any] | None = None,
    description: str = "",
    cool_down_period_s: int = 0,
    directory_to_save_ckpt: str | Path | None = None,
    directory_to_save_log: str | Path | None = None,
    wait_request_s: int | None = None,
    record: bool = False,
    seed: int = 0,
    user: str | None = None,
    spec: Mapping[str, Any] | None = None,
    workdir: str | Path | None = None,
) -> FitResult:
    """Train ``model`` on ``x`` and ``y`` on the first of ``machine_ids`` that can be had.

    Args:
        model: a compiled Keras model (``model.compile`` called); it is not
            changed: the trained model is a new one, loaded from the job's output.
        x, y: what ``model.fit`` takes: arrays, or lists or dicts of arrays for
            a model with several inputs or outputs.
        machine_ids: tried in order; ``NAME`` is Spot, ``NAME.od`` on demand
            (``spotline.machines()`` lists them).
        epochs, batch_size, validation_data: as ``model.fit`` takes them;
            ``validation_data`` is ``(x_val, y_val)``.
        fit_kwargs: more ``model.fit`` arguments, as JSON can hold them
            (``shuffle``, ``validation_split``, ``class_weight``...).
        description: shown by ``spotline status``, ``watch`` and the dashboard.
        cool_down_period_s: keep the VM this long afterwards, for your next job
            on the same machine id.
        directory_to_save_ckpt: download the job's checkpoints here at the end.
        directory_to_save_log: download the job's TensorBoard logs here.
        wait_request_s: seconds each machine id is asked for before the next.
        record: keep a snapshot of the inputs, for ``spotline.replay``.
        seed: seeds the order of the batches, the same in every attempt.
        user: the job's owner; default the name you are logged in as.
        spec: more job spec fields (``max_preemptions``, ``env``...).
        workdir: the local stack's folder, as for ``spotline.submit``.

    Returns:
        ``FitResult(job_id, model, history)``.

    Raises:
        ValueError: the model is not compiled, or an argument ``fit`` cannot send.
        spotline.SpotlineError: the job was refused, failed or was canceled
            (the message names the cause).
        KeyboardInterrupt: you interrupted the call; it asked first whether to
            cancel the job or leave it running.
    """
    import spotline

    fields = _job_fields(
        model,
        machine_ids=machine_ids,
        epochs=epochs,
        batch_size=batch_size,
        fit_kwargs=dict(fit_kwargs or {}),
        description=description,
        cool_down_period_s=cool_down_period_s,
        wait_request_s=wait_request_s,
        record=record,
        seed=seed,
        user=user or getpass.getuser(),
        spec=dict(spec or {}),
    )
    with tempfile.TemporaryDirectory(prefix="spotline-fit-") as folder:
        data_dir = Path(folder)
        model.save(data_dir / keras_inputs.MODEL_FILE)
        keras_inputs.save(data_dir, keras_inputs.FitArrays(x, y, validation_data))
        job = spotline.submit(fields, data_dir=data_dir, workdir=workdir)
    _follow(job)
    return result(
        job.id,
        directory_to_save_ckpt=directory_to_save_ckpt,
        directory_to_save_log=directory_to_save_log,
        workdir=workdir,
    )


def result(
    job_id: str,
    *,
    directory_to_save_ckpt: str | Path | None = None,
    directory_to_save_log: str | Path | None = None,
    workdir: str | Path | None = None,
) -> FitResult:
    """The trained model and history of a ``fit`` job that has COMPLETED, e.g. one
    left running when its call was interrupted.

    Raises:
        spotline.SpotlineError: the job did not complete (the message says how it ended).
    """
    import spotline

    job = spotline.Job(job_id, workdir=workdir)
    status = job.wait()
    if status.status != "COMPLETED":
        raise spotline.SpotlineError(
            f"job {job_id} ended {status.status}: {status.error or 'no reason recorded'}"
        )
    with tempfile.TemporaryDirectory(prefix="spotline-fit-") as folder:
        outputs = job.outputs(folder)
        found = [path for path in outputs if path.name == "model.keras"]
        if not found:
            raise spotline.SpotlineError(
                f"job {job_id} completed without a trained model in its outputs; "
                "was it submitted by spotline.keras.fit?"
            )
        trained = keras.models.load_model(found[0])
    if directory_to_save_ckpt is not None:
        job.checkpoints(directory_to_save_ckpt)
    if directory_to_save_log is not None:
        job.tensorboard(directory_to_save_log)
    return FitResult(job_id, trained, history_of(_all_epochs(job, status.epochs), trained))


def history_of(epochs: Sequence[EpochDoc], model: keras.Model | None = None) -> Any:
    """A ``keras.callbacks.History`` from a job's epoch records: per epoch, the
    record of the last attempt that reported it (a resumed attempt reports
    the epoch it went on with again)."""
    latest: dict[int, EpochDoc] = {}
    for record in sorted(epochs, key=lambda record: (record.epoch, record.attempt)):
        latest[record.epoch] = record
    history = keras.callbacks.History()
    history.epoch = [number - 1 for number in sorted(latest)]
    history.history = {}
    for number in sorted(latest):
        for name, value in latest[number].metrics.items():
            history.history.setdefault(name, []).append(math.nan if value is None else value)
    if model is not None:
        history.set_model(model)
    return history


def _all_epochs(job: Job, count: int) -> list[EpochDoc]:
    """The job's epoch records once every epoch has one: each travels on its
    own event, which may be recorded after the job's finish."""
    deadline = time.monotonic() + EPOCHS_RECORDED_WITHIN_S
    while True:
        records = job.epochs()
        if {record.epoch for record in records} >= set(range(1, count + 1)):
            return records
        if time.monotonic() >= deadline:
            missing = sorted(set(range(1, count + 1)) - {record.epoch for record in records})
            print(f"job {job.id}: no record of epoch(s) {missing}; history lacks them")
            return records
        time.sleep(0.5)


def _job_fields(model: keras.Model, **given: Any) -> dict[str, Any]:
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        raise ValueError("model: compile it first (model.compile(optimizer=..., loss=...))")
    fit_kwargs = given["fit_kwargs"]
    own = sorted(OWN_ARGUMENTS & fit_kwargs.keys())
    if own:
        raise ValueError(f"fit_kwargs: {own} are fit's own parameters; pass them to fit itself")
    fields = {
        **given["spec"],
        "user": given["user"],
        "machine_ids": list(given["machine_ids"]),
        "trainer": TRAINER,
        "epochs": given["epochs"],
        "batch_size": given["batch_size"],
        "seed": given["seed"],
        "validation_split": fit_kwargs.pop("validation_split", 0.0),
        "fit_kwargs": fit_kwargs,
        "description": given["description"],
        "cool_down_period_s": given["cool_down_period_s"],
        "record": given["record"],
    }
    if given["wait_request_s"] is not None:
        fields["wait_request_s"] = given["wait_request_s"]
    return fields


def _follow(job: Job) -> None:
    """Show the job's progress until it ends; on Ctrl-C, ask what to do with it."""
    try:
        job.watch()
    except KeyboardInterrupt:
        try:
            answer = input(f"\ncancel job {job.id}? [y/N] ")
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() in ("y", "yes"):
            job.cancel()
            print(f"job {job.id} canceled", file=sys.stderr)
        else:
            print(
                f"job {job.id} goes on; its model later: spotline.keras.result({job.id!r})",
                file=sys.stderr,
            )
        raise
