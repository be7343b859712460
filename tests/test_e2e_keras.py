"""The built-in Keras trainer on the whole local stack, preempted mid-epoch and
resumed. Local "VMs" run this interpreter, so it runs where the
`spotline[tensorflow]` extra is installed, and skips loudly elsewhere."""

from __future__ import annotations

import sys

import gcsfs
import pytest

from infra.cli.demo import wait_for_job
from infra.localstack.stack import LocalStack
from shared.adapters.firestore_store import FirestoreStore
from shared.domain.states import JobStatus
from tests.test_e2e_recovery import epochs_of, once, submit, wait_no_vms

try:
    import tensorflow  # noqa: F401
except ImportError:
    print("\n!!! KERAS STACK TEST SKIPPED: TensorFlow is not installed here !!!", file=sys.stderr)
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
    # Keras restores the optimizer's step exactly, and restarts the epoch.
    assert second.resumed_from_step == first.checkpoint_step
    assert epochs_of(store, job_id, 3) == [1, 2, 3]
    accuracy = next(v for k, v in job.metrics.items() if k.startswith("val_") and "acc" in k)
    assert (accuracy or 0.0) > 0.9, job.metrics  # None: not a finite number
    wait_no_vms(local_stack, job_id)
    # Keras writes through TensorFlow's own files, which cannot reach the
    # bucket: the state is mirrored there, and the agent uploads TensorBoard's.
    assert local_stack.storage is not None
    storage = gcsfs.GCSFileSystem(
        endpoint_url=local_stack.storage.url, token="anon", skip_instance_cache=True
    )
    outputs = f"{local_stack.storage.root}/jobs/{job_id}".removeprefix("gs://")
    stored = [path.removeprefix(outputs) for path in storage.find(outputs)]
    assert (job.checkpoint_uri or "").startswith("gs://"), job.checkpoint_uri
    assert "/checkpoints/latest.weights.h5" in stored, stored
    assert "/checkpoints/training_metadata.json" in stored, stored
    assert any(path.startswith("/outputs/tensorboard/train/") for path in stored), stored
