"""Where a job's output is read from: the local VMs' files, or Cloud Logging.

Both answer the same question, "the lines of this attempt on this node that
were not shown yet", so that ``spotline logs`` prints a finished attempt and
``spotline logs --follow`` a running one with the same code.

Locally each VM is a process whose output is a file in the stack's workdir
(a cooling VM's file holds several jobs; the agent's JSON lines name theirs).
In the cloud the VM's Ops Agent sends the agent's JSON lines to Cloud Logging
(vm_image/ops-agent.yaml), read here through google-cloud-logging with the
query each attempt records: all its VMs' instance ids, the job and the
attempt, so the logs outlive the VMs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from spotline.shared.domain.documents import AttemptRecord

# Lines before the attempt's start (clock skew between the VM and Firestore)
# are still its own.
_SKEW = timedelta(minutes=5)
_PAGE_SIZE = 1000
# Cloud Logging may list an entry some seconds after a later one (each VM's
# agent flushes on its own, and ingestion is not ordered): a follow asks again
# from this far back and drops the entries it has shown.
_LATE = timedelta(seconds=30)


@dataclass(frozen=True)
class LogLine:
    attempt: int
    node: int
    instance: str
    at: datetime | None  # None: a line with no time (not one of the agent's records)
    message: str

    def to_json(self) -> dict[str, Any]:
        at = None if self.at is None else self.at.isoformat()
        return {
            "attempt": self.attempt,
            "node": self.node,
            "instance": self.instance,
            "at": at,
            "message": self.message,
        }


class Source(Protocol):
    # How long a follow keeps reading after the job ended: lines still on
    # their way (Cloud Logging's ingestion), none locally.
    settle_s: float
    # How often a follow asks for more.
    poll_s: float

    def new_lines(self, job_id: str, attempt: AttemptRecord, node: int | None) -> list[LogLine]:
        """The attempt's lines (on ``node``, or on every node) not returned before."""
        ...


def node_instance(attempt: AttemptRecord, node: int) -> str:
    """The VM name of ``node`` in the attempt (node 0 is the attempt's instance)."""
    return attempt.node_names[node] if attempt.node_names else attempt.instance


@dataclass
class LocalSource:
    vms: Path  # the stack's folder of VM output files
    settle_s: float = 0.0
    poll_s: float = 0.5
    # Per (attempt, VM): how far its file was read, up to the last full line.
    _read: dict[tuple[int, str], int] = field(default_factory=dict)

    def new_lines(self, job_id: str, attempt: AttemptRecord, node: int | None) -> list[LogLine]:
        lines: list[LogLine] = []
        for rank in range(attempt.nodes) if node is None else [node]:
            for instance in rank_instances(attempt, rank):
                key = (attempt.attempt, instance)
                path = self.vms / f"{instance}.log"
                text, self._read[key] = _full_lines(path, self._read.get(key, 0))
                lines += file_lines(text, job_id, attempt, rank, instance)
        return lines


def rank_instances(attempt: AttemptRecord, node: int) -> list[str]:
    """Every VM that ran ``node`` in the attempt, in order: those a gang
    replaced (``replaced_nodes``), then the one it runs on now."""
    replaced = [r.lost for r in attempt.replaced_nodes if r.rank == node]
    return [*replaced, node_instance(attempt, node)]


def _full_lines(path: Path, start: int) -> tuple[str, int]:
    """The file's complete lines from byte ``start``, and where they end: a
    line the VM is still writing is left for the next read."""
    try:
        with path.open("rb") as file:
            file.seek(start)
            data = file.read()
    except FileNotFoundError:
        return "", start
    end = data.rfind(b"\n") + 1
    return data[:end].decode("utf-8", errors="replace"), start + end


def file_lines(
    text: str, job_id: str, attempt: AttemptRecord, node: int, instance: str
) -> Iterator[LogLine]:
    """One job attempt's lines of a local VM's output (a cooling VM runs several
    jobs): the agent's JSON records of it, and every line that is not one."""
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            yield LogLine(attempt.attempt, node, instance, None, line)
        elif (
            record.get("job_id", job_id) == job_id
            and record.get("attempt", attempt.attempt) == attempt.attempt
        ):
            yield LogLine(
                attempt.attempt,
                node,
                instance,
                _time(record.get("time")),
                str(record.get("message", line)),
            )


def _time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


@dataclass
class CloudSource:
    project: str
    settle_s: float = 15.0
    poll_s: float = 5.0
    # Per attempt: the time to ask from next, and the entries shown since then.
    _since: dict[int, datetime] = field(default_factory=dict)
    _shown: dict[int, dict[str, datetime]] = field(default_factory=dict)

    def new_lines(self, job_id: str, attempt: AttemptRecord, node: int | None) -> list[LogLine]:
        """The attempt's entries not returned before, oldest first.

        The filter is bounded by a time: without a timestamp term the client
        library adds "the last 24 hours", and an older job's logs would look
        empty. Each call asks again from ``_LATE`` before the newest entry
        seen, for the entries that reach Cloud Logging late.

        Raises:
            GoogleAPIError, GoogleAuthError: Cloud Logging cannot be read.
        """
        if not attempt.logs_query:
            return []
        since = self._since.get(attempt.attempt, attempt.started_at - _SKEW)
        shown = self._shown.setdefault(attempt.attempt, {})
        query = f'({attempt.logs_query}) AND timestamp>="{since.strftime("%Y-%m-%dT%H:%M:%SZ")}"'
        if node is not None:
            query += f" AND jsonPayload.node={node}"
        lines = []
        for entry in self._entries(query):
            key = entry.insert_id or f"{entry.timestamp}/{entry.payload}"
            if key in shown:
                continue
            shown[key] = entry.timestamp
            payload = entry.payload
            if not isinstance(payload, dict):  # a text line (not one of the agent's)
                payload = {"message": payload}
            message = payload.get("message", json.dumps(payload))
            rank = payload.get("node", 0)
            rank = rank if isinstance(rank, int) and 0 <= rank < attempt.nodes else 0
            instance = node_instance(attempt, rank)
            lines.append(LogLine(attempt.attempt, rank, instance, entry.timestamp, str(message)))
        if shown:
            newest = max(shown.values())
            # Whole seconds, as the query writes it: what is dropped below is
            # exactly what the next question cannot return again.
            self._since[attempt.attempt] = max(since, (newest - _LATE).replace(microsecond=0))
            for insert_id, at in list(shown.items()):
                if at < self._since[attempt.attempt]:
                    del shown[insert_id]  # older than the next question: never listed again
        return lines

    def _entries(self, query: str) -> Iterator[Any]:
        from google.cloud import logging

        yield from self._client.list_entries(
            resource_names=[f"projects/{self.project}"],
            filter_=query,
            order_by=logging.ASCENDING,
            page_size=_PAGE_SIZE,
        )

    @cached_property
    def _client(self) -> Any:
        """One client for every attempt and every round of a follow (it keeps
        its credentials and connections)."""
        from google.cloud import logging

        from spotline.infra.endpoints import Endpoints, client_options

        return logging.Client(
            project=self.project,
            _use_grpc=False,  # REST: the same requests against Google or a local double
            **client_options(Endpoints.from_env().logging, None),
        )
