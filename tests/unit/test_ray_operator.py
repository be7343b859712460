"""The Ray launcher's pure parts, and what the agent hands each framework's
trainer on a node of a gang (its command and environment)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.spec import JobSpec
from spotline.vm_image.agent.ray_operator import (
    RayLaunchError,
    RayNode,
    main,
    ray_start_args,
    wait_for_nodes,
)
from spotline.vm_image.agent.trainer_process import trainer_command, trainer_env

NODES = ["sl-j-a1-n0", "sl-j-a1-n1"]


def assignment(**spec: object) -> Assignment:
    fields: dict[str, object] = {"user": "u", "machine_ids": ["g2-standard-4"], "nodes": 2}
    return Assignment(
        job_id="j",
        attempt=1,
        project="p",
        spec=JobSpec.model_validate({**fields, **spec}),
        checkpoint_dir="/c",
        output_dir="/o",
        nodes=NODES,
        hosts=["127.0.0.1", "127.0.0.1"],  # local "VMs" share loopback
        master_port=26379,
    )


def env_of(job: Assignment, instance: str) -> dict[str, str]:
    return trainer_env(job, Path("/w/events.jsonl"), {"PATH": "/bin"}, instance)


def test_a_ray_job_runs_its_command_through_the_launcher() -> None:
    job = assignment(framework="ray", command=["python", "driver.py"])
    assert trainer_command(job) == [
        sys.executable, "-m", "spotline.vm_image.agent.ray_operator", "--", "python", "driver.py",
    ]  # fmt: skip
    assert trainer_command(assignment(framework="pytorch", command=["x"])) == ["x"]


def test_each_node_learns_its_ray_role_from_the_agent_env() -> None:
    job = assignment(framework="ray", command=["python", "driver.py"], ray_join_timeout_s=45)
    head = RayNode.from_env(env_of(job, "sl-j-a1-n0"))
    worker = RayNode.from_env(env_of(job, "sl-j-a1-n1"))
    assert (head.is_head, worker.is_head) == (True, False)
    assert worker == RayNode(rank=1, nodes=2, head="127.0.0.1", port=26379, join_timeout_s=45)
    assert env_of(job, "sl-j-a1-n1")["RAY_ADDRESS"] == "127.0.0.1:26379"


def test_nodes_names_the_vms_not_the_loopback_hosts() -> None:
    env = env_of(assignment(framework="jax", command=["x"]), "sl-j-a1-n1")
    assert env["NODES"] == "sl-j-a1-n0 sl-j-a1-n1"
    assert (env["JAXOPERATOR_PROCESS_ID"], env["JAXOPERATOR_NUM_PROCESSES"]) == ("1", "2")
    assert env["JAXOPERATOR_COORDINATOR_ADDRESS"] == "127.0.0.1:26379"


def test_head_and_worker_start_commands() -> None:
    head = RayNode(rank=0, nodes=2, head="10.0.0.2", port=26379, join_timeout_s=60)
    worker = RayNode(rank=1, nodes=2, head="10.0.0.2", port=26379, join_timeout_s=60)
    small = {"SPOTLINE_RAY_NUM_CPUS": "1", "SPOTLINE_RAY_OBJECT_STORE_BYTES": "80000000"}
    head_args = ray_start_args(head, "/tmp/r", small)
    assert {"--head", "--port=26379", "--include-dashboard=false", "--block"} <= set(head_args)
    assert {"--num-cpus=1", "--object-store-memory=80000000"} <= set(head_args)
    worker_args = ray_start_args(worker, "/tmp/r", {})
    assert "--address=10.0.0.2:26379" in worker_args and "--head" not in worker_args
    assert not any(arg.startswith("--num-cpus") for arg in worker_args)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_head_waits_until_every_node_joined() -> None:
    clock, counts = FakeClock(), iter([1, 1, 2, 3])
    said: list[str] = []
    wait_for_nodes(lambda: next(counts), 3, 60, "h:1", clock, clock.sleep, said.append)
    assert said[-1] == "ray_address=h:1, node_count=3, expected_node_count=3"
    assert said[0].startswith("ray_address=h:1, node_count=1, expected_node_count=3; retrying")
    assert clock.now == 6.0


def test_nodes_missing_at_the_timeout_fail_naming_how_many_joined() -> None:
    clock = FakeClock()
    with pytest.raises(RayLaunchError, match=r"only 2 of 3 Ray nodes joined the head at h:1 "):
        wait_for_nodes(lambda: 2, 3, 10, "h:1", clock, clock.sleep, lambda _: None)
    assert clock.now >= 10


def test_bad_cluster_env_and_no_command_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RayLaunchError, match=r"not valid: invalid literal"):
        RayNode.from_env({"MASTER_PORT": "not-a-port"})
    assert main(["--"]) == 2
    assert "no command to run on the head" in capsys.readouterr().err
