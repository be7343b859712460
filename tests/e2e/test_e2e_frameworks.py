"""The Hugging Face Trainer and Lightning examples (their docs pages show them) as command jobs on
the whole local stack, their code folders uploaded, each preempted in the
middle of training: the integration saves at the step of the notice, the next
attempt resumes from that very step (no step done twice), and the job ends
COMPLETED with every epoch reported.

Local "VMs" run this interpreter: each test needs its framework's extra
(``make hf``, ``make lightning``; CI installs both) and skips loudly without.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from spotline.vm_image.agent.transfers import upload_folder
from tests.e2e.test_e2e_recovery import epochs_of, once, submit, wait_no_vms
from tests.framework_required import require_framework

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def preempted_example(stack: LocalStack, example: str, epochs: int, user: str) -> None:
    """Submit ``examples/<example>`` as a command job, preempt its first VM
    once it has reported an epoch, and check how it resumed and ended."""
    assert stack.storage is not None
    code_uri = f"{stack.storage.root}/code/{example}"
    upload_folder(EXAMPLES / example, code_uri)
    job_id = submit(
        stack,
        user=user,
        trainer=None,
        command=["python", "train.py"],
        code_uri=code_uri,
        epochs=epochs,
        # Simulated compute per step, so that the notice lands mid-run; one
        # thread each (the CPUs are shared); nothing from the Hugging Face Hub.
        hyperparameters={"step_time_s": 0.05},
        env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    store = FirestoreStore(stack.options.project)

    # Spot's real 30 s notice: the agent gives the trainer's exit and the last
    # upload 20 s of it (NOTICE_SYNC_S); on 2 loaded cores a framework's exit
    # and that upload can outlast a shorter one.
    chaos = ["--workdir", str(stack.workdir), "preempt", "--notice-s", "30"]
    preempt = once(
        lambda job: cli([*chaos, job.job_id]),
        when=lambda job: job.attempt == 1 and job.epoch >= 1,
    )

    job = wait_for_job(store, job_id, 480, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first, second = job.attempts
    assert first.outcome == "preempted" and first.checkpoint_step, first
    # Saved at the step the notice stopped it at, and resumed from that step.
    assert second.resumed_from_step == first.checkpoint_step, job.attempts
    assert epochs_of(store, job_id, epochs) == list(range(1, epochs + 1))
    assert job.epoch == epochs and job.epochs == epochs
    assert job.nothing_saved is None
    wait_no_vms(stack, job_id)


def test_a_hugging_face_trainer_job_resumes_at_the_step_of_the_notice(
    local_stack: LocalStack,
) -> None:
    require_framework("transformers", "HUGGING FACE STACK TEST", "hf")
    preempted_example(local_stack, "hf_job", epochs=3, user="hf-e2e")


def test_a_lightning_job_resumes_at_the_step_of_the_notice(local_stack: LocalStack) -> None:
    require_framework("lightning", "LIGHTNING STACK TEST", "lightning")
    preempted_example(local_stack, "lightning_job", epochs=4, user="lightning-e2e")
