"""Processes per node (spotline.shared.contract.ranks, the spec, admission, placement): pure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.ranks import processes_per_node, rank_env
from spotline.shared.domain.admission import refusals
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.placement import (
    build_gang_request,
    build_vm_request,
    node_names,
    options,
)
from spotline.shared.domain.spec import JobSpec, parse_spec
from spotline.shared.domain.vms import JOB_METADATA_KEY

BASE: dict[str, Any] = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


def spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({**BASE, **fields})


def test_by_default_a_node_runs_one_process_per_gpu() -> None:
    assert processes_per_node(spec(), gpus=4) == 4
    assert processes_per_node(spec(), gpus=1) == 1
    assert processes_per_node(spec(), gpus=0) == 1  # a CPU machine
    assert processes_per_node(spec(processes_per_node=3), gpus=4) == 3
    assert processes_per_node(spec(processes_per_node=2), gpus=0) == 2
    command = spec(trainer=None, command=["python", "t.py"], framework="command")
    assert processes_per_node(command, gpus=8) == 8


@pytest.mark.parametrize("framework", ["tensorflow", "jax", "xgboost", "ray"])
def test_frameworks_whose_one_process_drives_every_gpu_default_to_one(framework: str) -> None:
    job = spec(trainer=None, command=["python", "t.py"], framework=framework)
    assert processes_per_node(job, gpus=4) == 1


def test_the_keras_trainer_runs_one_process_that_mirrors_across_the_gpus() -> None:
    assert processes_per_node(spec(trainer="keras_ffnn", framework="tensorflow"), gpus=4) == 1
    with pytest.raises(InvalidMessage, match=r"processes_per_node: .*keras_ffnn.*MirroredStrategy"):
        parse_spec(json.dumps({**BASE, "trainer": "keras_ffnn", "processes_per_node": 2}).encode())


def test_a_container_job_runs_one_process_and_starts_its_ranks_itself() -> None:
    image = {**BASE, "trainer": None, "command": ["torchrun", "t.py"], "image": "ghcr.io/a/b:1"}
    assert processes_per_node(JobSpec.model_validate(image), gpus=4) == 1
    with pytest.raises(InvalidMessage, match=r"processes_per_node: a container job .*torchrun"):
        parse_spec(json.dumps({**image, "processes_per_node": 2}).encode())


def test_spec_bounds_and_xgboost_are_named() -> None:
    for bad in (0, 17, "two"):
        with pytest.raises(InvalidMessage, match="processes_per_node"):
            parse_spec(json.dumps({**BASE, "processes_per_node": bad}).encode())
    xgb = {**BASE, "trainer": None, "command": ["x"], "framework": "xgboost"}
    with pytest.raises(InvalidMessage, match="processes_per_node: xgboost"):
        parse_spec(json.dumps({**xgb, "processes_per_node": 2}).encode())
    ray = {**xgb, "framework": "ray"}
    with pytest.raises(InvalidMessage, match="processes_per_node: a Ray node runs one launcher"):
        parse_spec(json.dumps({**ray, "processes_per_node": 2}).encode())


def test_each_rank_gets_what_torchrun_would_set() -> None:
    hosts = ["n0", "n1"]
    env = rank_env("pytorch", hosts, node_rank=1, port=29500, ppn=2, local_rank=1, gpus=2)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert (env["NODE_RANK"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("1", "n0", "29500")
    # Every rank sees the node's GPUs and takes cuda:LOCAL_RANK, as under torchrun.
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (env["SPOTLINE_NODE_RANK"], env["SPOTLINE_NUM_NODES"]) == ("1", "2")
    assert (env["SPOTLINE_LOCAL_RANK"], env["SPOTLINE_PROCESSES_PER_NODE"]) == ("1", "2")
    first = rank_env("command", ["127.0.0.1"], node_rank=0, port=20001, ppn=2, local_rank=0, gpus=0)
    assert (first["RANK"], first["WORLD_SIZE"], first["NODE_RANK"]) == ("0", "2", "0")
    assert "CUDA_VISIBLE_DEVICES" not in first  # a CPU machine


def test_tensorflow_and_jax_count_processes_not_nodes() -> None:
    hosts = ["n0", "n1"]
    tf = rank_env("tensorflow", hosts, node_rank=1, port=29500, ppn=2, local_rank=0, gpus=2)
    config = json.loads(tf["TF_CONFIG"])
    assert config["cluster"]["worker"] == ["n0:29500", "n0:29501", "n1:29502", "n1:29503"]
    assert config["task"] == {"type": "worker", "index": 2}
    jax = rank_env("jax", hosts, node_rank=1, port=29500, ppn=2, local_rank=1, gpus=2)
    assert (jax["JAX_NUM_PROCESSES"], jax["JAX_PROCESS_ID"]) == ("4", "3")
    assert jax["JAX_COORDINATOR_ADDRESS"] == "n0:29500"


def test_a_rank_outside_the_node_is_refused() -> None:
    with pytest.raises(ValueError, match="local rank 2 is not in a node of 2"):
        rank_env("pytorch", ["n0"], node_rank=0, port=1, ppn=2, local_rank=2, gpus=0)


def test_the_keras_batch_must_split_evenly_across_every_machines_gpus() -> None:
    catalog = load_catalog()
    keras = spec(trainer="keras_ffnn", machine_ids=["g2-standard-4", "g2-standard-48"])
    found = refusals(keras.model_copy(update={"batch_size": 30}), catalog, "us-central1")
    assert found == [
        "batch_size: 30 is not a multiple of the 4 GPUs of g2-standard-48: the keras_ffnn "
        "trainer's MirroredStrategy splits each batch evenly across them (try 28 or 32)"
    ]
    assert refusals(keras.model_copy(update={"batch_size": 32}), catalog, "us-central1") == []
    # Only the built-in Keras trainer: others split batches their own way.
    digits = spec(machine_ids=["g2-standard-48"], batch_size=30)
    assert refusals(digits, catalog, "us-central1") == []


def test_each_vm_is_told_its_machines_gpus() -> None:
    job = spec(machine_ids=["g2-standard-48", "e2-standard-4"], nodes=2)
    assignment = Assignment(
        job_id="j1",
        attempt=1,
        project="p",
        spec=job,
        checkpoint_dir="file:///c",
        output_dir="file:///o",
        nodes=node_names("j1", 1, 2),
    )
    four, none = options(job.machine_ids, ["z-a"], load_catalog())
    told = json.loads(build_vm_request(four, assignment, "img", "alice").metadata[JOB_METADATA_KEY])
    assert told["gpus"] == 4
    cpu = build_vm_request(none, assignment, "img", "alice").metadata[JOB_METADATA_KEY]
    assert json.loads(cpu)["gpus"] == 0
    gang = build_gang_request(four, assignment, "img", "alice", "us-central1", ["z-a"])
    assert {json.loads(n.metadata[JOB_METADATA_KEY])["gpus"] for n in gang.nodes} == {4}
