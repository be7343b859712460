"""A job's data set on the whole local stack: the built-in trainer trains on
the ``.npz`` the test puts in the storage emulator (not the digits), and a
data set larger than the VM's disk ends the job FAILED with both sizes, on
its first VM (not retried VM after VM)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_recovery import submit

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def test_the_built_in_trainer_trains_on_the_jobs_data_set(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    assert local_stack.storage is not None
    # 3 features (the digits have 64: the model is made for this data) and
    # one class, 4: the trainer can only reach accuracy 1.0 on this set.
    rng = np.random.default_rng(1)
    x, x_val = rng.random((48, 3)), rng.random((6, 3))
    buffer = io.BytesIO()
    np.savez(buffer, x=x, y=np.full(48, 4), x_val=x_val, y_val=np.full(6, 4))
    data_uri = f"{local_stack.storage.root}/data/{tmp_path.name}/data.npz"
    with fsspec.open(data_uri, "wb") as remote:
        remote.write(buffer.getvalue())

    job_id = submit(
        local_stack, data_uri=data_uri, epochs=3, batch_size=8,
        hyperparameters={"lr": 0.1, "hidden": 8},
    )  # fmt: skip
    store = FirestoreStore(local_stack.options.project)
    job = wait_for_job(store, job_id, 180, echo=False)

    assert job.status == JobStatus.COMPLETED, job.error
    assert job.metrics["train_accuracy"] == 1.0 and job.metrics["val_accuracy"] == 1.0


def test_a_data_set_larger_than_the_disk_fails_the_job_on_its_first_vm(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    huge = tmp_path / "huge.npz"
    size = shutil.disk_usage(local_stack.workdir).free + 2**30
    with huge.open("wb") as sparse:  # no space taken: only its size is huge
        sparse.truncate(size)

    job_id = submit(local_stack, data_uri=str(huge), max_attempts=3)
    store = FirestoreStore(local_stack.options.project)
    job = wait_for_job(store, job_id, 120, echo=False)

    assert job.status == JobStatus.FAILED
    assert job.error is not None and f"holds {size} bytes" in job.error, job.error
    assert "free on this VM's disk" in job.error
    assert len(job.attempts) == 1
