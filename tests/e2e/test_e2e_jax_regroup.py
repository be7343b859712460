"""A ``jax`` gang loses its node 0, which serves JAX's coordinator, and
replaces only it, on the whole local stack: the survivor keeps its VM, one VM
is inserted for node 0, and both processes join the replacement's
coordinator on the regrouped port and go on from the saved step, ending with
the parameters of a run never stopped (examples/operators/jax_resume.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spotline.infra.localstack.stack import LocalStack
from tests.e2e.test_e2e_framework_regroup import replaced_once
from tests.e2e.test_e2e_operators import vm_log
from tests.framework_required import require_framework
from tests.frameworks.test_jax_multiprocess import finish, start_gang, trained_params

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
EPOCHS = 8  # of 10 steps each: the notice lands mid-run even on a loaded machine


def test_a_jax_gang_replaces_its_lost_coordinator_and_ends_with_a_straight_runs_params(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    """Node 0 is preempted mid-run: both processes stop after one step,
    process 0 saves, the replacement becomes node 0 and serves the
    coordinator on the new generation's port, and both resume from the save."""
    require_framework("jax", "the JAX gang's replacement", "jax")
    codes, outputs = finish(start_gang(tmp_path, step_time_s=0, epochs=EPOCHS))
    assert codes == [0, 0], outputs
    straight = trained_params(outputs[0], 0, EPOCHS)

    job = replaced_once(
        local_stack, "jax_resume.py", 0, 300, framework="jax",
        epochs=EPOCHS, hyperparameters={"step_time_s": 0.3},
    )  # fmt: skip

    assert job.status.value == "COMPLETED", job.error
    (attempt,) = job.attempts
    assert attempt.checkpoint_step is not None and 0 < attempt.checkpoint_step < EPOCHS * 10
    assert attempt.resumed_from_step == attempt.checkpoint_step
    lost, survivor = job.nodes[0].removesuffix("-g1"), job.nodes[1]
    for rank, name in enumerate([lost, survivor]):  # both stopped at the step node 0 saved
        log = vm_log(local_stack, name)
        stops = re.findall(rf"process {rank}: stopping after step (\d+)", log)
        assert stops == [str(attempt.checkpoint_step)], log[-3000:]
    for rank, name in enumerate(job.nodes):
        assert trained_params(vm_log(local_stack, name), rank, EPOCHS) == straight
