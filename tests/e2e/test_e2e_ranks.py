"""Several processes per node on the whole local stack: the real agent starts
``processes_per_node`` ranks of a command job (examples/ranks_job), which
all_reduce over gloo on loopback; a crashing rank ends its node; the
preemption notice reaches every rank and the job resumes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from spotline.vm_image.agent.transfers import upload_folder
from tests.e2e.test_e2e_recovery import epochs_of, preempt_once, submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ranks_job"
STEPS_PER_EPOCH = 20  # examples/ranks_job/all_reduce.py


def submit_ranks(stack: LocalStack, tmp_path: Path, **fields: Any) -> str:
    assert stack.storage is not None
    code_uri = f"{stack.storage.root}/code/{tmp_path.name}"
    assert upload_folder(EXAMPLE, code_uri) >= 1
    return submit(
        stack, trainer=None, command=["python", "all_reduce.py"], code_uri=code_uri,
        framework="command", **{"processes_per_node": 2, **fields},
    )  # fmt: skip


def trainer_lines(stack: LocalStack, vm: str) -> list[str]:
    """What the VM's trainer processes printed, from the agent's JSON log lines."""
    lines = []
    for raw in Path(stack.workdir, "vms", f"{vm}.log").read_text().splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("stream") == "trainer":
            lines.append(str(record.get("message", "")))
    return lines


def rank_envs(stack: LocalStack, vms: list[str]) -> list[dict[str, str]]:
    found = [
        json.loads(line.split("rank-env ", 1)[1])
        for vm in vms
        for line in trainer_lines(stack, vm)
        if line.startswith("rank-env ")
    ]
    return sorted(found, key=lambda env: int(env["RANK"]))


def expected_envs(nodes: int, ppn: int) -> list[dict[str, str]]:
    return [
        {
            "RANK": str(node * ppn + local),
            "WORLD_SIZE": str(nodes * ppn),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(ppn),
            "NODE_RANK": str(node),
        }
        for node in range(nodes)
        for local in range(ppn)
    ]


def test_two_ranks_on_one_node_all_reduce(local_stack: LocalStack, tmp_path: Path) -> None:
    store = FirestoreStore(local_stack.options.project)
    job_id = submit_ranks(local_stack, tmp_path, epochs=2)

    job = wait_for_job(store, job_id, 180, echo=False)

    assert job.status == JobStatus.COMPLETED, job.error
    # Every step each rank adds rank + 1: 1 + 2 per step, 40 steps; rank 0 reports.
    assert job.metrics == {"total": 2 * STEPS_PER_EPOCH * 3.0, "world_size": 2}
    assert epochs_of(store, job_id, 2) == [1, 2]
    assert job.instance is not None
    assert rank_envs(local_stack, [job.instance]) == expected_envs(nodes=1, ppn=2)
    wait_no_vms(local_stack, job_id)


def test_two_nodes_of_two_ranks(local_stack: LocalStack, tmp_path: Path) -> None:
    store = FirestoreStore(local_stack.options.project)
    job_id = submit_ranks(local_stack, tmp_path, epochs=1, nodes=2)

    job = wait_for_job(store, job_id, 240, echo=False)

    assert job.status == JobStatus.COMPLETED, job.error
    assert job.metrics == {"total": STEPS_PER_EPOCH * (1 + 2 + 3 + 4.0), "world_size": 4}
    assert rank_envs(local_stack, list(job.nodes)) == expected_envs(nodes=2, ppn=2)
    wait_no_vms(local_stack, job_id)


def test_a_crashing_rank_ends_its_node_with_its_exit_code(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    store = FirestoreStore(local_stack.options.project)
    # Rank 1 exits before the rendezvous: rank 0 would wait in it for 30 minutes.
    job_id = submit_ranks(local_stack, tmp_path, epochs=2, env={"CRASH_RANK": "1"})

    started = time.monotonic()
    job = wait_for_job(store, job_id, 120, echo=False)

    assert job.status == JobStatus.FAILED
    assert "exited with code 7" in (job.error or "")
    assert "local rank 1 of 2 exited with code 7" in (job.error or "")
    assert "rank 1: crashing on purpose" in (job.error or "")  # the failing rank's lines
    assert time.monotonic() - started < 90
    wait_no_vms(local_stack, job_id)


def test_the_notice_reaches_every_rank_and_the_job_resumes(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    store = FirestoreStore(local_stack.options.project)
    job_id = submit_ranks(local_stack, tmp_path, epochs=4, hyperparameters={"step_time_s": 0.1})
    preempt = preempt_once(local_stack)

    job = wait_for_job(store, job_id, 240, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first, second = job.attempts[:2]
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    assert second.resumed_from_step == first.checkpoint_step
    # Nothing lost or counted twice across the stop: the sum of a straight run.
    assert job.metrics == {"total": 4 * STEPS_PER_EPOCH * 3.0, "world_size": 2}
    lines = trainer_lines(local_stack, first.instance)
    step = first.checkpoint_step
    # Both stop at one step (whichever rank's signal the collective saw
    # first), and the notice reached both: each had its SIGTERM by the end.
    assert sorted(line.split(", sigterm")[0] for line in lines if "stopping at" in line) == [
        f"rank 0: stopping at step {step}",
        f"rank 1: stopping at step {step}",
    ]
    assert sorted(line for line in lines if ": stopped," in line) == [
        "rank 0: stopped, sigterm=True",
        "rank 1: stopped, sigterm=True",
    ]
    wait_no_vms(local_stack, job_id)


def test_a_notice_on_node_1_stops_the_gang_at_one_step_and_node_0_saves_it(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    """Only node 1 (ranks 2 and 3) is preempted: its ranks tell node 0's in the
    step's collective, rank 0 saves that step, node 0's other rank exiting
    first kills nobody, and node 0's agent reports that its gang stopped (not
    a failed run): the next attempt resumes there."""
    store = FirestoreStore(local_stack.options.project)
    job_id = submit_ranks(
        local_stack,
        tmp_path,
        epochs=4,
        nodes=2,
        hyperparameters={"step_time_s": 0.1},
        replace_node_timeout_s=0,  # the whole gang relaunched
    )
    preempt = preempt_once(local_stack, node=1)

    job = wait_for_job(store, job_id, 240, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first, second = job.attempts[:2]
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    assert first.checkpoint_step % STEPS_PER_EPOCH != 0  # the notice's save, not an epoch's
    assert second.resumed_from_step == first.checkpoint_step
    assert job.preemptions == 1 and job.restarts_on_errors == job.restarts_on_exit_codes == 0
    # Nothing lost or counted twice across the stop: the sum of a straight run.
    assert job.metrics == {"total": 4 * STEPS_PER_EPOCH * (1 + 2 + 3 + 4.0), "world_size": 4}
    node0, node1 = (trainer_lines(local_stack, vm) for vm in first.node_names)
    step = first.checkpoint_step
    assert sorted(line for line in node0 if "stopping at" in line) == [
        f"rank {rank}: stopping at step {step}, sigterm=False" for rank in (0, 1)
    ]
    assert sorted(line.split(", sigterm")[0] for line in node1 if "stopping at" in line) == [
        f"rank {rank}: stopping at step {step}" for rank in (2, 3)
    ]
    assert sorted(line for line in node1 if ": stopped," in line) == [
        f"rank {rank}: stopped, sigterm=True" for rank in (2, 3)
    ]
    wait_no_vms(local_stack, job_id)


def test_a_command_gang_replaces_its_lost_node_and_loses_no_step(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    """The same command job (the stop flag, two ranks a node) with node 1
    preempted and the default ``replace_node_timeout_s``: node 0 keeps its
    VM, one VM replaces node 1, every rank restarts from the step rank 0
    saved, and the sum the ranks reduce is a straight run's."""
    assert local_stack.cloud is not None
    store = FirestoreStore(local_stack.options.project)
    job_id = submit_ranks(
        local_stack, tmp_path, epochs=4, nodes=2, hyperparameters={"step_time_s": 0.1}
    )
    preempt = preempt_once(local_stack, node=1)

    job = wait_for_job(store, job_id, 240, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    n0, n1 = f"sl-{job_id}-a1-n0", f"sl-{job_id}-a1-n1"
    assert (job.attempt, job.preemptions, job.nodes) == (1, 1, [n0, f"{n1}-g1"])
    (attempt,) = job.attempts
    assert attempt.checkpoint_step is not None and attempt.checkpoint_step % STEPS_PER_EPOCH != 0
    assert attempt.resumed_from_step == attempt.checkpoint_step
    assert job.restarts_on_errors == job.restarts_on_exit_codes == 0
    assert job.metrics == {"total": 4 * STEPS_PER_EPOCH * (1 + 2 + 3 + 4.0), "world_size": 4}
    node0 = trainer_lines(local_stack, n0)
    assert sorted(line for line in node0 if "stopping at" in line) == [
        f"rank {rank}: stopping at step {attempt.checkpoint_step}, sigterm=False" for rank in (0, 1)
    ]
    wait_no_vms(local_stack, job_id)
