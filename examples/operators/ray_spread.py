"""A Ray driver: spotline's launcher has started Ray on every node and waited
for all of them to join, and set RAY_ADDRESS, so ray.init() joins the cluster.
One task per CPU, spread over the nodes; prints where they ran."""

import os
import socket

import ray

ray.init()


@ray.remote(num_cpus=1)
def where(i: int) -> str:
    return ray.get_runtime_context().get_node_id()


alive = sum(1 for node in ray.nodes() if node["Alive"])
cpus = int(ray.cluster_resources().get("CPU", 1))
ran_on = set(ray.get([where.options(scheduling_strategy="SPREAD").remote(i) for i in range(cpus)]))
print(
    f"ray on {socket.gethostname()}: {alive} nodes alive, {cpus} tasks ran on "
    f"{len(ran_on)} nodes (RAY_ADDRESS={os.environ['RAY_ADDRESS']})",
    flush=True,
)
