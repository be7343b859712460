"""A node's trainer as several processes, one per rank, started as torchrun would.

The contract (docs/guides/multi-node.md, "Processes per node"):

- Each rank is the job's command with its own RANK, LOCAL_RANK, WORLD_SIZE,
  LOCAL_WORLD_SIZE, NODE_RANK (``spotline.shared.contract.ranks``).
- The agent relays the reports of local rank 0 only (``SPOTLINE_EVENTS`` as
  with one process); every other rank gets a file of its own, which the agent
  does not read, so that N ranks reporting the same epoch count it once. On
  node 0 local rank 0 is global rank 0: the rank that reports epochs and the
  checkpoint (a trainer saving shards reports once every shard is saved).
- A signal from the agent (the preemption notice's SIGTERM) goes to every
  rank; each saves what it must and exits in its own time.
- The first rank to exit non-zero ends the node's run: the others get SIGTERM,
  then SIGKILL after ``RANK_STOP_GRACE_S`` (a peer blocked in a collective
  never returns to see its signal), and the node's exit code is that rank's.
  All exiting 0: 0. An exit 143 (``EXIT_STOPPED``) ends no other rank: the
  ranks stopped together for a notice, maybe another node's, and rank 0 may
  still be writing the gang's checkpoint.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spotline.shared import logs
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.cluster import master_port
from spotline.shared.contract.ranks import EXIT_STOPPED, rank_env
from spotline.vm_image.agent.privileges import TrainerAccount
from spotline.vm_image.agent.trainer_process import TAIL_CHARS, TrainerProcess

# How long the other ranks of a node have to exit after one failed: a rank
# stuck in a collective with the dead one never gets back to its signal.
RANK_STOP_GRACE_S = 10.0


def rank_events_path(events_path: Path, local_rank: int) -> Path:
    """Where ``local_rank`` writes its reports: local rank 0 the relayed file."""
    if local_rank == 0:
        return events_path
    return events_path.with_name(f"{events_path.stem}-rank{local_rank}{events_path.suffix}")


def node_layout(assignment: Assignment, instance: str) -> tuple[list[str], int, int]:
    """The hosts of the job's nodes, this node's rank, and the rendezvous port.
    A single node's ranks meet on loopback, at a port from the job and attempt."""
    if assignment.nodes:
        return list(assignment.hosts), assignment.nodes.index(instance), assignment.master_port
    return ["127.0.0.1"], 0, master_port(assignment.job_id, assignment.attempt)


class RankGroup:
    """The node's ranks, answering as one ``TrainerProcess`` does: ``signal``,
    ``wait`` (the node's exit code) and ``log_tail``."""

    def __init__(self, ranks: Sequence[TrainerProcess], stop_grace_s: float = RANK_STOP_GRACE_S):
        self.ranks = list(ranks)
        self.stop_grace_s = stop_grace_s
        # (local rank, exit code) of the first rank to exit non-zero.
        self.failed: tuple[int, int] | None = None
        self._asked_to_stop = False
        # Each exit as it happens, in order: the first to fail is the cause,
        # the others' errors (a peer gone from under a collective) its effect.
        self._exits: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        for local_rank, rank in enumerate(self.ranks):
            threading.Thread(
                target=lambda r=local_rank, p=rank: self._exits.put((r, p.process.wait())),
                daemon=True,
            ).start()

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every rank still running. After the agent's
        SIGTERM a rank's non-zero exit stops no other: each is saving."""
        if signum == signal.SIGTERM:
            self._asked_to_stop = True
        for rank in self.ranks:
            rank.signal(signum)

    def wait(self) -> int:
        """Wait for every rank; the first failure's exit code, or 0."""
        running = len(self.ranks)
        kill_at: float | None = None
        while running:
            timeout = None if kill_at is None else max(kill_at - time.monotonic(), 0.0)
            try:
                local_rank, code = self._exits.get(timeout=timeout)
            except queue.Empty:
                for rank in self.ranks:
                    rank.signal(signal.SIGKILL)
                kill_at = None
                continue
            running -= 1
            if code != 0 and self.failed is None:
                self.failed = (local_rank, code)
                if not self._asked_to_stop and running and code != EXIT_STOPPED:
                    logs.warning(
                        f"local rank {local_rank} exited with code {code}: stopping the "
                        f"node's {running} other ranks",
                        **self.ranks[local_rank].labels,
                    )
                    for rank in self.ranks:
                        rank.signal(signal.SIGTERM)
                    kill_at = time.monotonic() + self.stop_grace_s
        for rank in self.ranks:
            rank.wait()  # each has exited: this finishes copying its output and reports
        return self.failed[1] if self.failed else 0

    def log_tail(self) -> str:
        """The last lines of the rank that failed first (named), else of local rank 0."""
        if self.failed is None:
            return self.ranks[0].log_tail()
        local_rank, code = self.failed
        head = f"[local rank {local_rank} of {len(self.ranks)} exited with code {code} first]\n"
        return head + self.ranks[local_rank].log_tail()[-(TAIL_CHARS - len(head)) :]


def start_ranks(
    ppn: int,
    assignment: Assignment,
    instance: str,
    command: list[str],
    env: dict[str, str],
    workdir: Path,
    events_path: Path,
    on_report: Callable[[dict[str, Any]], None],
    account: TrainerAccount | None = None,
    secrets: Sequence[str] = (),
) -> RankGroup:
    """Start ``ppn`` ranks of ``command``: ``env`` (the node's trainer
    environment) with each rank's variables over it, its own reports file and
    log. A rank that cannot start stops those started, and its ``CannotStart``
    goes up."""
    hosts, node_rank, port = node_layout(assignment, instance)
    started: list[TrainerProcess] = []
    try:
        for local_rank in range(ppn):
            own = rank_env(
                assignment.spec.framework,
                hosts,
                node_rank,
                port,
                ppn,
                local_rank,
                assignment.gpus,
                assignment.nodes or [instance],
            )
            reports = rank_events_path(events_path, local_rank)
            started.append(
                TrainerProcess(
                    command,
                    env | own | {"SPOTLINE_EVENTS": str(reports)},
                    workdir,
                    reports,
                    on_report if local_rank == 0 else _not_relayed,
                    labels={
                        "job_id": assignment.job_id,
                        "attempt": assignment.attempt,
                        "local_rank": local_rank,
                    },
                    account=account,
                    secrets=secrets,
                    log_name="trainer.log" if local_rank == 0 else f"trainer-rank{local_rank}.log",
                )
            )
    except BaseException:
        for rank in started:
            rank.signal(signal.SIGKILL)
            rank.wait()
        raise
    return RankGroup(started)


def _not_relayed(record: dict[str, Any]) -> None:
    """Reports of ranks other than local rank 0 (see the module's docstring)."""
