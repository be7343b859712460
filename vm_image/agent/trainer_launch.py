"""Everything between a fetched job and its running trainer: the account it
runs as, its secrets resolved, its folder handed over, its environment."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.contract.assignment import Assignment
from shared.contract.ranks import processes_per_node
from vm_image.agent.metadata import Metadata
from vm_image.agent.privileges import AccountMissing, TrainerAccount
from vm_image.agent.rank_group import RankGroup, rank_events_path, start_ranks
from vm_image.agent.secret_access import SecretUnavailable, resolve_env
from vm_image.agent.trainer_process import (
    CannotStart,
    TrainerProcess,
    trainer_command,
    trainer_env,
)
from vm_image.agent.workspace import hand_over

EVENTS_FILE = "events.jsonl"


def launch_trainer(
    assignment: Assignment,
    account: TrainerAccount | AccountMissing,
    metadata: Metadata,
    job_dir: Path,
    code_dir: Path,
    instance: str,
    on_report: Callable[[dict[str, Any]], None],
) -> TrainerProcess | RankGroup:
    """Start the job's trainer as ``account`` in ``code_dir``: one process, or
    one per rank where the node runs several (``rank_group``).

    Secret Manager references in the spec's env are resolved here, last, and
    go only into the trainer's environment (and the list of values its
    relayed output is masked with).

    Raises:
        CannotStart: no trainer account, a secret that cannot be read, or a
            program that cannot run; the message names what, never a value.
    """
    if isinstance(account, AccountMissing):
        raise CannotStart(str(account), 126)
    try:
        secrets = resolve_env(assignment.spec.env, assignment.project, metadata)
    except SecretUnavailable as err:
        raise CannotStart(f"cannot start the trainer: {err}", 126) from None
    events_path = job_dir / EVENTS_FILE
    ppn = processes_per_node(assignment.spec, assignment.gpus)
    for local_rank in range(1, ppn):  # made before the folder is handed over
        rank_events_path(events_path, local_rank).touch()
    env = trainer_env(assignment, events_path, dict(os.environ), instance)
    env.update(secrets)
    env.update(hand_over(job_dir, account, events_path))
    if ppn > 1:
        return start_ranks(
            ppn, assignment, instance, trainer_command(assignment), env, code_dir,
            events_path, on_report, account, list(secrets.values()),
        )  # fmt: skip
    return TrainerProcess(
        trainer_command(assignment),
        env,
        code_dir,
        events_path,
        on_report,
        labels={"job_id": assignment.job_id, "attempt": assignment.attempt},
        account=account,
        secrets=list(secrets.values()),
    )
