"""What a VM is told to do: the JSON document in its ``spotline-job`` metadata.

The VM needs no Firestore access: this document, the Pub/Sub topics and its
checkpoint folder are all it uses.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from spotline.shared.domain.recording import Record
from spotline.shared.domain.spec import JobSpec
from spotline.shared.topics import TOPICS, VM_EVENT_KEYS


class Regroup(BaseModel):
    """What a gang's nodes are told when a lost node's replacement joins (the
    ``spotline-regroup`` metadata item): the node list's generation, its VMs
    by rank, the addresses they reach each other at, and the rendezvous port."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    generation: int
    nodes: list[str]
    hosts: list[str]
    master_port: int


class Assignment(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    job_id: str
    attempt: int
    project: str
    spec: JobSpec
    checkpoint_dir: str  # fsspec URL shared by every attempt of the job
    output_dir: str
    heartbeat_s: float = 30.0
    # Multi-node jobs: every node's VM name (index = rank), the address others
    # reach it at, and the rendezvous port. Empty for a single node.
    nodes: list[str] = []
    hosts: list[str] = []
    master_port: int = 0
    # How many times the attempt's gang regrouped around a replaced node
    # (``Regroup``): 0 for the gang as first placed.
    generation: int = 0
    # The GPUs of the machine this VM is (catalog): how many trainer processes
    # a node runs by default (``ranks.processes_per_node``). 0: a CPU machine,
    # or an assignment from before the field.
    gpus: int = 0
    # A recorded job's snapshot, which every attempt runs (vm_image/agent/recorded.py).
    record: Record | None = None
    # The topics this VM publishes its events on, by key (``"epoch_done"``),
    # where they are not the shared ones: its user's own, in the per-user mode
    # (``spotline.shared.topics.vm_topics_for``). Only those are open to it.
    topics: dict[str, str] = {}

    def event_topics(self) -> dict[str, str]:
        """Every topic by key, this VM's own event topics in place of the shared ones."""
        own = {key: name for key, name in self.topics.items() if key in VM_EVENT_KEYS}
        return {**TOPICS, **own}

    def regrouped(self, regroup: Regroup) -> Assignment:
        """The assignment with the gang's node list after ``regroup``."""
        return self.model_copy(
            update={
                "nodes": list(regroup.nodes),
                "hosts": list(regroup.hosts),
                "master_port": regroup.master_port,
                "generation": regroup.generation,
            }
        )

    def node_rank(self, instance: str) -> int:
        """The rank of ``instance`` in the job's gang (0 for a single node).

        Raises:
            ValueError: the instance is not one of the gang's nodes.
        """
        return self.nodes.index(instance) if self.nodes else 0
