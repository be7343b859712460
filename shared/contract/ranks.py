"""Several trainer processes on one node: how many, and what each is told.

A common multi-GPU recipe (``mp.spawn``) starts one process per GPU on each
node and computes a global rank as ``node_rank * gpus_per_node +
local_rank``; torchrun does the same and tells each process in variables.
The agent plays that launcher: with ``processes_per_node`` (ppn) above 1 it
starts ppn processes, each with the node's cluster variables
(``cluster.cluster_env``) overlaid by its own rank. With ppn 1 nothing here
applies and the node runs one process as before.
"""

from __future__ import annotations

import json

from spotline.shared.contract.cluster import cluster_env
from spotline.shared.domain.spec import KERAS_TRAINERS, JobSpec

# A trainer's exit after saving its state on request: what a shell reports for
# a process ended by SIGTERM, and what the built-in trainers return. On a gang
# every rank exits so when any node got the notice (the ranks agree on a step).
EXIT_STOPPED = 143

# One process of these drives all of its node's GPUs (TensorFlow's mirrored
# strategies, JAX's local devices, XGBoost's tracker takes one worker a node):
# by default they get one, whatever the GPU count.
ONE_PROCESS_FRAMEWORKS = ("tensorflow", "jax", "xgboost", "ray")


def processes_per_node(spec: JobSpec, gpus: int) -> int:
    """How many processes each node of ``spec`` runs on a machine with ``gpus``
    GPUs: the spec's own number, else one per GPU (at least one) for PyTorch
    and command jobs, else one. A container job runs one process (its
    image's entrypoint starts the ranks, torchrun-style)."""
    if spec.processes_per_node is not None:
        return spec.processes_per_node
    if spec.image is not None:
        return 1
    if spec.trainer in KERAS_TRAINERS or spec.framework in ONE_PROCESS_FRAMEWORKS:
        return 1
    return max(gpus, 1)


def rank_env(
    framework: str,
    hosts: list[str],
    node_rank: int,
    port: int,
    ppn: int,
    local_rank: int,
    gpus: int,
    nodes: list[str] | None = None,
) -> dict[str, str]:
    """The variables of process ``local_rank`` on node ``node_rank`` of ``hosts``
    (``nodes``: the VMs' names, for ``NODES``, as ``cluster_env`` takes them).

    RANK and WORLD_SIZE count processes, not nodes; every rank sees all the
    node's GPUs (CUDA_VISIBLE_DEVICES, absent on a CPU machine) and takes
    ``cuda:LOCAL_RANK``, as a script written for torchrun expects.
    """
    if not 0 <= local_rank < ppn:
        raise ValueError(f"local rank {local_rank} is not in a node of {ppn} processes")
    rank = node_rank * ppn + local_rank
    world = len(hosts) * ppn
    env = cluster_env(framework, hosts, node_rank, port, nodes) | {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(ppn),
        "NODE_RANK": str(node_rank),
        "SPOTLINE_LOCAL_RANK": str(local_rank),
        "SPOTLINE_PROCESSES_PER_NODE": str(ppn),
    }
    if gpus > 0:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in range(gpus))
    if framework == "tensorflow":
        # One worker per process; ports as cluster_env numbers them (port + index),
        # so that processes sharing a host (one node, or loopback) do not collide.
        workers = [f"{hosts[i // ppn]}:{port + i}" for i in range(world)]
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
        )
    elif framework == "jax":
        env |= {"JAX_NUM_PROCESSES": str(world), "JAX_PROCESS_ID": str(rank)}
    return env
