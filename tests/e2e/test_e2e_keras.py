"""The built-in Keras trainer and a user's own Keras script on the whole local
stack, preempted mid-epoch and resumed. Local "VMs" run this interpreter, so it runs where the
`spotline[tensorflow]` extra is installed, and skips loudly elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_recovery import epochs_of, once, submit, wait_no_vms

try:
    import tensorflow  # noqa: F401
except ImportError:
    print(
        "\n!!! KERAS STACK TEST SKIPPED: TensorFlow is not installed here (make tensorflow) !!!",
        file=sys.stderr,
    )
    pytest.skip("TensorFlow is not installed (spotline[tensorflow])", allow_module_level=True)

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def test_a_keras_job_survives_a_preemption(local_stack: LocalStack) -> None:
    assert local_stack.cloud is not None
    host = local_stack.cloud
    job_id = submit(
        local_stack,
        trainer="keras_ffnn",
        framework="tensorflow",
        epochs=3,
        batch_size=4,
        hyperparameters={"lr": 0.001},
    )
    preempt = once(
        lambda job: host.preempt(job.instance or "", 15.0),
        when=lambda job: job.attempt == 1 and job.epoch >= 1,
    )
    store = FirestoreStore(local_stack.options.project)

    job = wait_for_job(store, job_id, 300, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first, second = job.attempts
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    # Keras restores the optimizer's step exactly, and goes on from the saved batch.
    assert second.resumed_from_step == first.checkpoint_step
    assert epochs_of(store, job_id, 3) == [1, 2, 3]
    accuracy = next(v for k, v in job.metrics.items() if k.startswith("val_") and "acc" in k)
    assert (accuracy or 0.0) > 0.9, job.metrics  # None: not a finite number
    wait_no_vms(local_stack, job_id)
    # Keras writes through TensorFlow's own files, which cannot reach the
    # bucket: the state is mirrored there, and the agent uploads TensorBoard's.
    assert local_stack.storage is not None
    import gcsfs  # not at collection: gcsfs reads its settings once, when imported

    storage = gcsfs.GCSFileSystem(
        endpoint_url=local_stack.storage.url, token="anon", skip_instance_cache=True
    )
    outputs = f"{local_stack.storage.root}/jobs/{job_id}".removeprefix("gs://")
    stored = [path.removeprefix(outputs) for path in storage.find(outputs)]
    assert (job.checkpoint_uri or "").startswith("gs://"), job.checkpoint_uri
    assert "/checkpoints/latest.weights.h5" in stored, stored
    assert "/checkpoints/training_metadata.json" in stored, stored
    assert any(path.startswith("/outputs/tensorboard/train/") for path in stored), stored


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "keras_job"
STEPS_PER_EPOCH = 180  # 1437 training samples of the example, in batches of 8


def straight_through(workdir: Path, **settings: str) -> tuple[dict[str, Any], list[Any]]:
    """The example run once, never stopped, as `python train.py` runs it."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOTLINE_")}
    env |= {
        "SPOTLINE_CHECKPOINT_URL": str(workdir / "state"),
        "SPOTLINE_OUTPUT_URL": str(workdir),
        "SPOTLINE_EVENTS": str(workdir / "events.jsonl"),
        **settings,
    }
    subprocess.run(
        [sys.executable, "train.py"], cwd=EXAMPLE, env=env, check=True, capture_output=True
    )
    history = json.loads((workdir / "history.json").read_text())
    return history, json.loads((workdir / "weights.json").read_text())


def test_a_users_keras_script_resumes_at_the_saved_step(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    assert local_stack.cloud is not None and local_stack.storage is not None
    host = local_stack.cloud
    job_id = submit(
        local_stack, trainer=None, command=["python", "train.py"],
        code_uri=EXAMPLE.as_uri(),  # the local form: the agent copies the folder
        epochs=3, batch_size=8, seed=4, hyperparameters={"step_time_s": 0.02},
    )  # fmt: skip

    def preempt_in_epoch_2(job: JobDoc) -> None:
        # Epoch 2 takes 180 x 0.02 s at least; epoch 1's end (a save) is over
        # a second after its report: the notice lands mid-epoch.
        time.sleep(1.0)
        host.preempt(job.instance or "", 15.0)

    preempt = once(preempt_in_epoch_2, when=lambda job: job.attempt == 1 and job.epoch >= 1)
    store = FirestoreStore(local_stack.options.project)

    job = wait_for_job(store, job_id, 400, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first, second = job.attempts
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    assert first.checkpoint_step % STEPS_PER_EPOCH, "the notice should land mid-epoch"
    assert second.resumed_from_step == first.checkpoint_step
    assert epochs_of(store, job_id, 3) == [1, 2, 3]
    steps = sorted(epoch.step for epoch in store.list_epochs(job_id))
    assert steps == [STEPS_PER_EPOCH * n for n in (1, 2, 3)]  # no batch trained twice
    wait_no_vms(local_stack, job_id)

    import gcsfs  # not at collection: gcsfs reads its settings once, when imported

    storage = gcsfs.GCSFileSystem(
        endpoint_url=local_stack.storage.url, token="anon", skip_instance_cache=True
    )
    outputs = f"{local_stack.storage.root}/jobs/{job_id}/outputs".removeprefix("gs://")
    history = json.loads(storage.cat(f"{outputs}/history.json"))
    weights = json.loads(storage.cat(f"{outputs}/weights.json"))
    expected_history, expected_weights = straight_through(
        tmp_path, SPOTLINE_EPOCHS="3", SPOTLINE_BATCH_SIZE="8", SPOTLINE_SEED="4"
    )
    assert history["epoch"] == [0, 1, 2]
    assert all(len(values) == 3 for values in history["history"].values()), history
    for name, values in expected_history["history"].items():
        assert history["history"][name] == pytest.approx(values, rel=1e-4, abs=1e-5), name
    assert len(weights) == len(expected_weights)
    for resumed, expected in zip(weights, expected_weights, strict=True):
        np.testing.assert_allclose(resumed, expected, rtol=1e-4, atol=1e-5)
