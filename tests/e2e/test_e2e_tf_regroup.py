"""A TensorFlow gang loses one node and replaces only it, on the whole local
stack: examples/operators/keras_multiworker_resume.py as a 2-node
``tensorflow`` job (MultiWorkerMirroredStrategy over the TF_CONFIG each node
gets). Node 1 is preempted mid-run: both workers stop after one step, the
chief saves it, the survivor keeps its VM, one VM is inserted for node 1,
and both workers start again on the regrouped TF_CONFIG from the saved step."""

from __future__ import annotations

import re

import pytest

from spotline.infra.localstack.stack import LocalStack
from tests.e2e.test_e2e_framework_regroup import replaced_once
from tests.e2e.test_e2e_operators import vm_log
from tests.framework_required import require_framework

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

EPOCHS, STEPS_PER_EPOCH = 8, 8  # examples/operators/keras_multiworker_resume.py


def test_a_tensorflow_gang_replaces_its_lost_worker_and_resumes_at_the_saved_step(
    local_stack: LocalStack,
) -> None:
    require_framework("tensorflow", "the TensorFlow gang's replacement", "tensorflow")
    job = replaced_once(
        local_stack, "keras_multiworker_resume.py", 1, 420, framework="tensorflow",
        epochs=EPOCHS, hyperparameters={"step_time_s": 0.4},
    )  # fmt: skip

    assert job.status.value == "COMPLETED", job.error
    (attempt,) = job.attempts
    steps = EPOCHS * STEPS_PER_EPOCH
    assert attempt.checkpoint_step is not None and 0 < attempt.checkpoint_step < steps
    assert attempt.resumed_from_step == attempt.checkpoint_step
    weights = set()
    for rank, name in enumerate(job.nodes):
        log = vm_log(local_stack, name)
        assert f"worker {rank} resumed at step {attempt.checkpoint_step}" in log, log[-3000:]
        found = re.findall(rf"keras worker {rank} trained {steps} steps weights=(\w+)", log)
        assert found, log[-3000:]
        weights.add(found[-1])
    assert len(weights) == 1  # one model, mirrored on both workers
    survivor = vm_log(local_stack, job.nodes[0])
    assert f"worker 0 stopping after step {attempt.checkpoint_step}" in survivor
