"""The commands that publish: ``submit``, ``replay`` and ``cancel``."""

from __future__ import annotations

import argparse
import sys

from infra.cli.connect import connect, job_of


def submit(args: argparse.Namespace) -> int:
    from shared.adapters.pubsub_bus import PubsubBus

    settings = connect(args.workdir)
    data = args.file.read_bytes()
    # Exactly what `gcloud pubsub topics publish spotline-submit --message=...` sends.
    message_id = PubsubBus(settings.project).publish("submit", data)
    print(f"published message {message_id}")
    job_id = _job_id(data, message_id)
    if job_id:
        print(f"job id: {job_id}")
    return 0


def _job_id(data: bytes, message_id: str) -> str | None:
    from shared.domain.errors import InvalidMessage
    from shared.domain.lifecycle import job_id_for
    from shared.domain.spec import parse_spec

    try:
        return job_id_for(parse_spec(data), message_id)
    except InvalidMessage as err:
        print(f"warning: the function will reject this message: {err}", file=sys.stderr)
        return None


def replay(args: argparse.Namespace) -> int:
    from shared.adapters.pubsub_bus import PubsubBus
    from shared.domain.lifecycle import job_id_for

    settings, job = job_of(args)
    description = args.description or f"replay of {job.job_id}: {job.spec.description}"[:500]
    spec = job.spec.model_copy(update={"job_id": None, "description": description})
    data = spec.model_dump_json(exclude_none=True).encode()
    message_id = PubsubBus(settings.project).publish("submit", data)
    print(f"replaying {job.job_id} as job {job_id_for(spec, message_id)} (message {message_id})")
    return 0


def cancel(args: argparse.Namespace) -> int:
    from shared.adapters.firestore_store import FirestoreStore
    from shared.adapters.pubsub_bus import PubsubBus
    from shared.contract.events import CancelRequest
    from shared.domain.states import JobStatus

    settings = connect(args.workdir)
    job = FirestoreStore(settings.project).get_job(args.job)
    if job is None:
        print(f"no job {args.job} (`spotline status` lists them)", file=sys.stderr)
        return 1
    if job.status in JobStatus.terminal():
        print(f"job {args.job} has already ended: {job.status}; nothing to cancel")
        return 0
    request = CancelRequest(job_id=args.job, reason=args.reason)
    message_id = PubsubBus(settings.project).publish("cancel", request)
    print(f"cancel of {args.job} published (message {message_id})")
    return 0
