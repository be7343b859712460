"""The commands that publish: ``submit``, ``replay`` and ``cancel``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from spotline.infra.cli.connect import connect, job_of

# A spec spotline would refuse: a usage error, as argparse's own (2).
EXIT_INVALID = 2

if TYPE_CHECKING:
    from spotline.shared.domain.spec import JobSpec
    from spotline.shared.settings import Settings


def submit(args: argparse.Namespace) -> int:
    """Validate the spec as the submit function will, then publish it: a spec
    the function would refuse is never published (it would only become a line
    in ``spotline rejected``), and the person sees why at once."""
    from spotline.infra.cli.job_fields import display_spec
    from spotline.shared.adapters.pubsub_bus import PubsubBus
    from spotline.shared.domain.lifecycle import job_id_for
    from spotline.shared.topics import topics_for

    try:
        data = args.file.read_bytes()
    except OSError as err:
        print(f"cannot read {args.file}: {err.strerror or err}", file=sys.stderr)
        return EXIT_INVALID
    refused = secret_refusals(data)
    if refused:  # checked before anything is reached: a secret never leaves this machine
        print("not published: " + "; ".join(refused), file=sys.stderr)
        return EXIT_INVALID
    settings = connect(args.workdir)
    spec, problems = check_submission(data, settings)
    if spec is None or problems:
        print(f"{args.file} was not submitted; spotline would refuse it:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_INVALID
    if args.dry_run:
        print(json.dumps(display_spec(spec), indent=2, ensure_ascii=False))
        print(f"{args.file} is valid; nothing published (--dry-run)", file=sys.stderr)
        return 0
    if spec.record:
        try:
            data, spec = record_inputs(settings, data, spec)
        except (FileNotFoundError, FileExistsError) as err:
            print(f"{args.file} was not submitted: cannot record it: {err}", file=sys.stderr)
            return EXIT_INVALID
    # Exactly what `gcloud pubsub topics publish spotline-submit --message=...` sends
    # (on the user's own topic in the per-user mode).
    topics = topics_for(spec.user, settings.user_topics)
    message_id = PubsubBus(settings.project, topics).publish("submit", data)
    job_id = job_id_for(spec, message_id)
    print(f"published message {message_id} on {topics['submit']}")
    print(f"job id: {job_id}")
    if args.follow:
        return follow_job(settings, job_id)
    return 0


def follow_job(settings: Settings, job_id: str) -> int:
    """``submit --follow``: watch the job until it ends (``spotline watch``)."""
    from spotline.infra.cli.watch import follow
    from spotline.shared.adapters.firestore_listen import JobFeed
    from spotline.shared.adapters.firestore_store import FirestoreStore

    with JobFeed(FirestoreStore(settings.project), [job_id]) as feed:
        return follow(feed, [job_id])


def secret_refusals(data: bytes) -> list[str]:
    """A literal value for a secret-like env name, when the spec parses (never
    the value itself); a spec that does not parse is refused with the rest."""
    from spotline.shared.domain.errors import InvalidMessage
    from spotline.shared.domain.secret_env import env_refusals
    from spotline.shared.domain.spec import parse_spec

    try:
        return env_refusals(parse_spec(data).env)
    except InvalidMessage:
        return []


def check_submission(data: bytes, settings: Settings) -> tuple[JobSpec | None, list[str]]:
    """The spec, and why the submit function would refuse it (empty: it takes
    it): the same parsing, node bound and admission checks it runs, with this
    deployment's region and quota (functions/handlers/submit_job.py)."""
    from spotline.shared.domain.admission import refusals
    from spotline.shared.domain.catalog import load_catalog
    from spotline.shared.domain.errors import InvalidMessage
    from spotline.shared.domain.spec import parse_spec, too_many_nodes

    try:
        spec = parse_spec(data)
    except InvalidMessage as err:
        # describe_validation_error joins one problem per field with "; ".
        return None, [f"not a valid job spec: {problem}" for problem in str(err).split("; ")]
    problems = refusals(spec, load_catalog(), settings.region, settings.webhook_allowed_networks)
    too_many = too_many_nodes(spec, settings.max_active_instances)
    return spec, problems + ([too_many] if too_many else [])


def record_inputs(settings: Settings, data: bytes, spec: JobSpec) -> tuple[bytes, JobSpec]:
    """A recorded job's snapshot, copied before it is published (see
    ``spotline.shared.domain.recording``); the job gets an id now when it has none,
    since the snapshot lives under the job's storage. The message and spec
    to publish.

    Raises:
        FileNotFoundError: nothing is stored under code_uri or data_uri.
        FileExistsError: the job id's snapshot is of other sources.
    """
    from spotline.infra.cli.recording import fresh_job_id, take_snapshot
    from spotline.shared.domain.recording import record_for
    from spotline.shared.domain.spec import parse_spec

    if spec.job_id is None:
        data = json.dumps({**json.loads(data), "job_id": fresh_job_id("rec")}).encode()
        spec = parse_spec(data)
    assert spec.job_id is not None
    record = record_for(settings.job_prefix(spec.job_id), spec)
    assert record is not None
    copied = take_snapshot(record, spec)
    where = record.marker_uri.rsplit("/", 1)[0]
    if copied is None:
        print(f"recorded already: {where}")
    else:
        print(f"recorded {sum(copied.values())} file(s) into {where}")
    return data, spec


def replay(args: argparse.Namespace) -> int:
    """Submit a copy of the job: a recorded job's copy runs its snapshot, not
    the originals; ``--code-dir``/``--data-dir`` upload local folders under
    the copy's storage and run those instead."""
    from pydantic import ValidationError

    from spotline.infra.cli.recording import snapshot_complete
    from spotline.shared.adapters.pubsub_bus import PubsubBus
    from spotline.shared.domain.lifecycle import job_id_for
    from spotline.shared.domain.spec import JobSpec, describe_validation_error
    from spotline.shared.topics import topics_for

    settings, job = job_of(args)
    description = args.description or f"replay of {job.job_id}: {job.spec.description}"[:500]
    # The copy records nothing again: it runs the snapshot, which stays where it is.
    update: dict[str, object] = {"job_id": None, "description": description, "record": False}
    if job.record is not None:
        if not snapshot_complete(job.record):
            print(
                f"job {job.job_id} was recorded, but its snapshot is not whole "
                f"(no {job.record.marker_uri}): `spotline submit` makes it before publishing",
                file=sys.stderr,
            )
            return 1
        update |= {"code_uri": job.record.code_uri, "data_uri": job.record.data_uri}
    if args.wait_request_s is not None:
        update["wait_request_s"] = args.wait_request_s
    if args.code_dir or args.data_dir:
        try:
            update |= upload_inputs(settings, args.code_dir, args.data_dir)
        except FileNotFoundError as err:
            print(f"nothing replayed: {err}", file=sys.stderr)
            return EXIT_INVALID
    try:
        spec = JobSpec.model_validate({**job.spec.model_dump(by_alias=True), **update})
    except ValidationError as err:
        print(f"nothing replayed: {describe_validation_error(err)}", file=sys.stderr)
        return EXIT_INVALID
    data = spec.model_dump_json(exclude_none=True).encode()
    topics = topics_for(spec.user, settings.user_topics)
    message_id = PubsubBus(settings.project, topics).publish("submit", data)
    print(f"replaying {job.job_id} as job {job_id_for(spec, message_id)} (message {message_id})")
    return 0


def upload_inputs(
    settings: Settings, code_dir: Path | None, data_dir: Path | None
) -> dict[str, object]:
    """Local folders uploaded under a new job id's storage (``inputs/code``,
    ``inputs/data``); the spec fields that point the copy there.

    Raises:
        FileNotFoundError: a folder holds no file.
    """
    from spotline.infra.cli.recording import copy_folder, fresh_job_id

    job_id = fresh_job_id("replay")
    inputs = f"{settings.job_prefix(job_id)}/inputs"
    fields: dict[str, object] = {"job_id": job_id}
    for key, folder in (("code_uri", code_dir), ("data_uri", data_dir)):
        if folder is not None:
            target = f"{inputs}/{key.removesuffix('_uri')}"
            copied = copy_folder(folder.resolve().as_uri(), target)
            print(f"uploaded {copied} file(s) from {folder} to {target}")
            fields[key] = target
    return fields


def cancel(args: argparse.Namespace) -> int:
    """Publish a cancel for each job still active; 1 if any job does not
    exist. With ``--wait``, follow them (``spotline watch``) until they end."""
    from spotline.shared.adapters.firestore_store import FirestoreStore
    from spotline.shared.adapters.pubsub_bus import PubsubBus
    from spotline.shared.contract.events import CancelRequest
    from spotline.shared.domain.states import JobStatus
    from spotline.shared.topics import topics_for

    settings = connect(args.workdir)
    store = FirestoreStore(settings.project)
    unknown, published = [], []
    for job_id in args.jobs:
        job = store.get_job(job_id)
        if job is None:
            print(f"no job {job_id} (`spotline status` lists them)", file=sys.stderr)
            unknown.append(job_id)
            continue
        if job.status in JobStatus.terminal():
            print(f"job {job_id} has already ended: {job.status}; nothing to cancel")
            continue
        request = CancelRequest(job_id=job_id, reason=args.reason)
        # In the per-user mode, on the job's user's own topic: IAM says whether you may.
        topics = topics_for(job.user, settings.user_topics)
        message_id = PubsubBus(settings.project, topics).publish("cancel", request)
        print(f"cancel of {job_id} published (message {message_id})")
        published.append(job_id)
    if args.wait and published:
        wait_for_end(settings, published)
    return 1 if unknown else 0


def wait_for_end(settings: Settings, job_ids: list[str]) -> None:
    """Until every job has ended, through Firestore listeners; a line per change."""
    from spotline.infra.cli.watch import follow
    from spotline.shared.adapters.firestore_listen import JobFeed
    from spotline.shared.adapters.firestore_store import FirestoreStore

    with JobFeed(FirestoreStore(settings.project), job_ids) as feed:
        follow(feed, job_ids, live=False)
