"""The event tokens a test's VM events carry, found as a VM finds its own: in
the metadata the functions handed the attempt's VMs (``spotline-event-token``
beside the ``spotline-job`` assignment), read off the local cloud's recorded
insert, bulkInsert and setMetadata requests, so that a VM deleted since (a
late event) still has its token. Nothing here bypasses the check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY, JOB_METADATA_KEY


def _metadata_sent(body: Any) -> Iterator[dict[str, str]]:
    """Every metadata map in a request body: an insert's, a bulkInsert's
    ``instanceProperties``', a setMetadata's own items."""
    if not isinstance(body, dict):
        return
    for holder in (
        body,
        body.get("metadata"),
        (body.get("instanceProperties") or {}).get("metadata"),
    ):
        if isinstance(holder, dict) and isinstance(holder.get("items"), list):
            yield {str(i.get("key")): str(i.get("value", "")) for i in holder["items"]}


def tokens_for(cloud: LocalCloud, job_id: str, attempt: int, instance: str = "") -> list[str]:
    """Every token handed to a VM of the job's attempt (``instance``: to
    that one), oldest first."""
    found = []
    for request in cloud.requests:
        if request.method != "POST":
            continue
        if instance and instance not in _names(request.path, request.body):
            continue
        for items in _metadata_sent(request.body):
            token = items.get(EVENT_TOKEN_METADATA_KEY)
            try:
                assignment = json.loads(items.get(JOB_METADATA_KEY, ""))
            except ValueError:
                continue
            if token and (assignment.get("job_id"), assignment.get("attempt")) == (job_id, attempt):
                found.append(token)
    return found


def assignments_sent(cloud: LocalCloud, job_id: str) -> list[dict[str, Any]]:
    """Every ``spotline-job`` assignment handed to a VM of the job, oldest first."""
    found = []
    for request in cloud.requests:
        if request.method != "POST":
            continue
        for items in _metadata_sent(request.body):
            try:
                assignment = json.loads(items.get(JOB_METADATA_KEY, ""))
            except ValueError:
                continue
            if isinstance(assignment, dict) and assignment.get("job_id") == job_id:
                found.append(assignment)
    return found


def token_for(cloud: LocalCloud, job_id: str, attempt: int, instance: str = "") -> str:
    """The newest token handed to the job's attempt (``instance``: to that
    VM, as a gang's replacement holds its own; else the attempt's newest);
    "" when none was."""
    found = tokens_for(cloud, job_id, attempt, instance)
    if instance and not found:
        found = tokens_for(cloud, job_id, attempt)
    return found[-1] if found else ""


def _names(path: str, body: Any) -> set[str]:
    """The VMs a request hands its metadata to: an insert's, a bulkInsert's
    (its named instances), a setMetadata's (its path)."""
    if path.endswith("/setMetadata"):
        return {path.rsplit("/", 2)[-2]}
    if not isinstance(body, dict):
        return set()
    if isinstance(body.get("perInstanceProperties"), dict):
        return set(body["perInstanceProperties"])
    return {str(body["name"])} if body.get("name") else set()


def vm_token(cloud: LocalCloud, name: str) -> str:
    """The token in a VM's metadata now, as its agent reads it."""
    vm = cloud.get(name)
    assert vm is not None, f"no VM {name}"
    return str(vm["metadata"].get(EVENT_TOKEN_METADATA_KEY, ""))
