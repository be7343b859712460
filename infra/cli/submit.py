"""The commands that publish: ``submit``, ``replay`` and ``cancel``, over the
API (``spotline.infra.client``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.client.connection import connect
from spotline.infra.client.errors import InputsError, ReplayError, SecretInSpec, SpecError

if TYPE_CHECKING:
    from spotline.infra.client.connection import Connection
    from spotline.infra.client.packing import Pack
    from spotline.infra.client.submission import Published


def submit(args: argparse.Namespace) -> int:
    """Validate the spec as the submit function will, then publish it: a spec
    the function would refuse is never published (it would only become a line
    in ``spotline rejected``), and the person sees why at once."""
    from spotline.infra.cli.job_fields import display_spec
    from spotline.infra.client import submission

    try:
        data, source = submission.spec_bytes(args.file)
        refused = submission.secret_refusals(data)
        if refused:  # checked before anything is reached: a secret never leaves this machine
            raise SecretInSpec(refused, source)
        conn = connect(args.workdir)
        # Under --json, stdout carries the JSON only: the progress lines go to stderr.
        say_packed = _packed_to(sys.stderr if args.json else sys.stdout)
        if args.dry_run:
            _, spec, _ = submission.prepared(
                conn, args.file, args.code_dir, args.data_dir, args.upload_limit_mb, say_packed
            )
            print(json.dumps(display_spec(spec), indent=2, ensure_ascii=False))
            print(f"{args.file} is valid; nothing published (--dry-run)", file=sys.stderr)
            return 0
        published = submission.submit(
            conn,
            args.file,
            args.code_dir,
            args.data_dir,
            upload_limit_mb=args.upload_limit_mb,
            on_packed=say_packed,
        )
    except SpecError as err:  # SecretInSpec and SpecUnreadable say it in a line
        print(err, file=sys.stderr)
        return Exit.USAGE
    except InputsError as err:
        print(f"{args.file} was not submitted: {err}", file=sys.stderr)
        return Exit.USAGE
    if args.json:
        from spotline.infra.cli.output import print_json

        _say(published, sys.stderr)
        print_json(published_json(published))
        return Exit.OK
    _say(published)
    print(f"published message {published.message_id} on {published.topic}")
    print(f"job id: {published.job_id}")
    if args.follow:
        return follow_job(conn, published.job_id)
    return 0


def _packed_to(out: IO[str]) -> Callable[[str, Pack], None]:
    """Says a folder's size, before it is uploaded, on ``out``."""
    from spotline.infra.client.packing import human

    def say(field: str, pack: Pack) -> None:
        what = "code" if field == "code_uri" else "data"
        print(f"{what}: {pack.folder}: {len(pack.files)} file(s), {human(pack.size)}", file=out)

    return say


def published_json(published: Published) -> dict[str, Any]:
    """What ``submit --json`` prints: the job, its message, what was uploaded."""
    return {
        "job_id": published.job_id,
        "message_id": published.message_id,
        "topic": published.topic,
        "uploads": [
            {
                "folder": str(upload.folder),
                "target": upload.target,
                "files": upload.files,
                "bytes": upload.size,
                "written": upload.written,
            }
            for upload in published.uploads
        ],
        "recorded": published.recorded,
    }


def _say(published: Published, out: IO[str] | None = None) -> None:
    """What was copied before the message: uploads, then the snapshot."""
    out = out or sys.stdout
    for upload in published.uploads:
        if upload.written:
            what = f"uploaded {upload.written} file(s) from {upload.folder} to {upload.target}"
        else:
            what = f"{upload.folder} is unchanged since uploaded to {upload.target}"
        print(what, file=out)
    if published.recorded is None:
        return
    if published.recorded_files is None:
        print(f"recorded already: {published.recorded}", file=out)
    else:
        print(f"recorded {published.recorded_files} file(s) into {published.recorded}", file=out)


def follow_job(conn: Connection, job_id: str) -> int:
    """``submit --follow``: watch the job until it ends (``spotline watch``)."""
    from spotline.infra.cli.watch import follow
    from spotline.shared.adapters.firestore_listen import JobFeed

    with JobFeed(conn.store, [job_id]) as feed:
        return follow(feed, [job_id])


def replay(args: argparse.Namespace) -> int:
    """Submit a copy of the job: a recorded job's copy runs its snapshot, not
    the originals; ``--code-dir``/``--data-dir`` upload local folders under
    the copy's storage and run those instead."""
    from spotline.infra.client.replaying import publish_replay

    conn = connect(args.workdir)
    try:
        published = publish_replay(
            conn,
            args.job,
            args.description,
            args.code_dir,
            args.data_dir,
            args.wait_request_s,
            args.upload_limit_mb,
        )
    except ReplayError as err:
        print(err, file=sys.stderr)
        return Exit.FAILED
    except SpecError as err:
        print(f"nothing replayed: {'; '.join(err.problems)}", file=sys.stderr)
        return Exit.USAGE
    except InputsError as err:
        print(f"nothing replayed: {err}", file=sys.stderr)
        return Exit.USAGE
    _say(published)
    print(f"replaying {args.job} as job {published.job_id} (message {published.message_id})")
    return 0


def cancel(args: argparse.Namespace) -> int:
    """Publish a cancel for each job still active; 1 if any job does not
    exist. With ``--wait``, follow them (``spotline watch``) until they end;
    with ``--json``, print what became of each job (``cancel_json``)."""
    from spotline.infra.client.errors import JobNotFound
    from spotline.infra.client.job import publish_cancel
    from spotline.shared.domain.states import JobStatus

    conn = connect(args.workdir)
    outcomes: list[dict[str, Any]] = []
    for job_id in args.jobs:
        try:
            job = conn.job_doc(job_id)
        except JobNotFound as err:
            print(err, file=sys.stderr)
            outcomes.append(cancel_json(job_id, "unknown", message=str(err)))
            continue
        if job.status in JobStatus.terminal():
            said = f"job {job_id} has already ended: {job.status}; nothing to cancel"
            outcomes.append(cancel_json(job_id, "ended", status=job.status, message=said))
            if not args.json:
                print(said)
            continue
        message_id = publish_cancel(conn, job, args.reason)
        said = f"cancel of {job_id} published (message {message_id})"
        outcomes.append(
            cancel_json(job_id, "published", job.status, message_id=message_id, message=said)
        )
        if not args.json:
            print(said)
    if args.json:
        from spotline.infra.cli.output import print_json

        print_json(outcomes)
    published = [o["job_id"] for o in outcomes if o["result"] == "published"]
    if args.wait and published:
        wait_for_end(conn, published)
    return Exit.FAILED if any(o["result"] == "unknown" for o in outcomes) else Exit.OK


def cancel_json(
    job_id: str,
    result: str,
    status: str | None = None,
    message_id: str | None = None,
    message: str = "",
) -> dict[str, Any]:
    """One job of ``cancel --json``: ``result`` is ``published`` (the cancel is
    on its way), ``ended`` (nothing to cancel) or ``unknown`` (no such job);
    ``status`` is the job's when it was read."""
    return {
        "job_id": job_id,
        "result": result,
        "status": None if status is None else str(status),
        "message_id": message_id,
        "message": message,
    }


def wait_for_end(conn: Connection, job_ids: list[str]) -> None:
    """Until every job has ended, through Firestore listeners; a line per change."""
    from spotline.infra.cli.watch import follow
    from spotline.shared.adapters.firestore_listen import JobFeed

    with JobFeed(conn.store, job_ids) as feed:
        follow(feed, job_ids, live=False)
