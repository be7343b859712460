"""The environment each framework expects on each node of a multi-node job.

The names follow what each framework reads (and AIchor's operators):
PyTorch's env:// rendezvous, TensorFlow's TF_CONFIG, XGBoost's tracker
variables, JAX's coordinator (under JAX's names and AIchor's Jax-Operator
``JAXOPERATOR_*`` names), Ray's head address. One process per node: a node's
rank is its index in the job's node list; node 0 is the master/coordinator
(Ray's head). ``NODES`` is the do-it-yourself recipe's: the VM names, space
separated, in which a script finds its rank by its own hostname.
"""

from __future__ import annotations

import json
import zlib

# The ports a gang's rendezvous is drawn from: _PORTS_FROM and the _PORTS after.
_PORTS_FROM, _PORTS = 20000, 12000


def master_port(job_id: str, attempt: int) -> int:
    """A port from the job and attempt, so two gangs sharing a host (locally)
    do not collide, and a new attempt never meets a stale rendezvous."""
    return _port(f"{job_id}/{attempt}")


def _port(key: str) -> int:
    """A port drawn from ``key``: below Linux's ephemeral range (32768+),
    where other programs' ports come from."""
    return _PORTS_FROM + zlib.crc32(key.encode()) % _PORTS


# The ports one generation of a gang may use from its own: a rank's, a Ray
# head's three (GCS, client server, spotline's control), TensorFlow's one a worker.
PORT_SPAN = 64


def gang_port(job_id: str, attempt: int, generation: int) -> int:
    """The rendezvous port of a gang's ``generation`` (each regroup after a
    replaced node is one): a regrouped gang never meets a stale rendezvous,
    and its ports are at least ``PORT_SPAN`` from the generation before's,
    which a node that has not died yet may still hold."""
    port = master_port(job_id, attempt)
    for later in range(1, generation + 1):
        before = port
        port = _port(f"{job_id}/{attempt}/g{later}")
        if abs(port - before) < PORT_SPAN:
            port = _PORTS_FROM + (before - _PORTS_FROM + 2 * PORT_SPAN) % _PORTS
    return port


def cluster_env(
    framework: str,
    hosts: list[str],
    rank: int,
    port: int,
    nodes: list[str] | None = None,
) -> dict[str, str]:
    """Variables for the node of ``rank`` among ``hosts`` (index = rank).

    ``nodes``: the VMs' names, for ``NODES`` (their hostnames on Compute
    Engine); by default ``hosts``.
    """
    if not 0 <= rank < len(hosts):
        raise ValueError(f"rank {rank} is not in a cluster of {len(hosts)}")
    names = hosts if nodes is None else nodes
    if len(names) != len(hosts):
        raise ValueError(f"{len(names)} node names for {len(hosts)} hosts")
    world = str(len(hosts))
    master = hosts[0]
    env = {
        # Every framework gets the basics, so a plain command can use them too.
        "SPOTLINE_NODE_RANK": str(rank),
        "SPOTLINE_NUM_NODES": world,
        "SPOTLINE_NODE_HOSTS": ",".join(hosts),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": world,
        "RANK": str(rank),
        "NODES": " ".join(names),
    }
    if framework in ("pytorch", "command"):
        env |= {"LOCAL_RANK": "0", "NODE_RANK": str(rank)}
    elif framework == "tensorflow":
        workers = [f"{host}:{port + i}" for i, host in enumerate(hosts)]
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
        )
    elif framework == "xgboost":
        env |= {
            "WORKER_PORT": str(port),
            "WORKER_ADDRS": ",".join(hosts[1:]),
        }
    elif framework == "jax":
        env |= {
            "JAX_COORDINATOR_ADDRESS": f"{master}:{port}",
            "JAX_NUM_PROCESSES": world,
            "JAX_PROCESS_ID": str(rank),
            # AIchor's Jax-Operator names, for scripts written against it.
            "JAXOPERATOR_COORDINATOR_ADDRESS": f"{master}:{port}",
            "JAXOPERATOR_NUM_PROCESSES": world,
            "JAXOPERATOR_PROCESS_ID": str(rank),
        }
    elif framework == "ray":
        # ray.init() with no argument joins the cluster at RAY_ADDRESS; the
        # AIchor's Ray-Operator calls the same address RAY_SERVER.
        env |= {"RAY_ADDRESS": f"{master}:{port}", "RAY_SERVER": f"{master}:{port}"}
    return env
