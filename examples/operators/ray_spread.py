"""A Ray driver: spotline's launcher has started Ray on every node and waited
for all of them to join, and set RAY_ADDRESS, so ray.init() joins the cluster.
One task on each node (a STRICT_SPREAD placement group: one bundle a node);
prints where they ran."""

import os
import socket

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init()


@ray.remote(num_cpus=1)
def where(i: int) -> str:
    return ray.get_runtime_context().get_node_id()


alive = sum(1 for node in ray.nodes() if node["Alive"])
group = placement_group([{"CPU": 1}] * alive, strategy="STRICT_SPREAD")
ray.get(group.ready())
tasks = [
    where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote(i)
    for i in range(alive)
]
ran_on = set(ray.get(tasks))
print(
    f"ray on {socket.gethostname()}: {alive} nodes alive, {len(tasks)} tasks ran on "
    f"{len(ran_on)} nodes (RAY_ADDRESS={os.environ['RAY_ADDRESS']})",
    flush=True,
)
