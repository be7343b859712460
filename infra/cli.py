"""The ``spotline`` command."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

DEFAULT_WORKDIR = Path(".spotline")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return int(args.run(args) or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spotline", description=__doc__)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help="where `spotline up` keeps logs, storage and its stack file",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run the whole system locally until Ctrl-C")
    up.add_argument("--tick-s", type=float, default=10.0, help="reaper tick period")
    up.add_argument("--heartbeat-s", type=float, default=5.0)
    up.set_defaults(run=_up)

    submit = sub.add_parser("submit", help="publish a job spec to spotline-submit")
    submit.add_argument("file", type=Path)
    submit.set_defaults(run=_submit)

    status = sub.add_parser("status", help="the jobs table, or one job's timeline")
    status.add_argument("job", nargs="?")
    status.set_defaults(run=_status)

    demo = sub.add_parser("demo", help="start the local stack, run the digits job, stop")
    demo.add_argument("--spec", type=Path, default=Path("examples/digits.json"))
    demo.add_argument("--timeout-s", type=float, default=300.0)
    demo.set_defaults(run=_demo)

    schema = sub.add_parser("schema", help="print the job spec's JSON Schema")
    schema.set_defaults(run=_schema)
    return parser


def _connect(workdir: Path) -> None:
    """Point the clients at the running local stack, unless the environment
    already names a project (then they talk to it, emulator or real)."""
    from infra.local_stack import read_stack_env

    if os.environ.get("FIRESTORE_EMULATOR_HOST") or os.environ.get("SPOTLINE_COMPUTE") == "gce":
        return
    env = read_stack_env(workdir)
    if env is None:
        raise SystemExit(
            f"no local stack in {workdir}: run `spotline up` first "
            "(or set SPOTLINE_PROJECT and credentials for a real project)"
        )
    os.environ.update(env)


def _up(args: argparse.Namespace) -> int:
    from infra.local_stack import LocalStack, StackOptions

    options = StackOptions(tick_s=args.tick_s, heartbeat_s=args.heartbeat_s)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalStack(args.workdir, options) as stack:
        print(f"spotline is up in {stack.timings['ready_s']:.1f} s; workdir {stack.workdir}")
        for name, value in stack.client_env().items():
            print(f"export {name}={value}")
        print("Ctrl-C to stop.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


def _submit(args: argparse.Namespace) -> int:
    from shared.bus import Bus
    from shared.config import Settings

    _connect(args.workdir)
    data = args.file.read_bytes()
    # Exactly what `gcloud pubsub topics publish spotline-submit --message=...` sends.
    message_id = Bus(Settings.from_env().project).publish("submit", data)
    print(f"published message {message_id}")
    job_id = _job_id(data, message_id)
    if job_id:
        print(f"job id: {job_id}")
    return 0


def _job_id(data: bytes, message_id: str) -> str | None:
    from shared.errors import InvalidMessage
    from shared.lifecycle import job_id_for
    from shared.spec import parse_spec

    try:
        return job_id_for(parse_spec(data), message_id)
    except InvalidMessage as err:
        print(f"warning: the function will reject this message: {err}", file=sys.stderr)
        return None


def _status(args: argparse.Namespace) -> int:
    from infra.report import job_detail, jobs_table
    from shared.config import Settings
    from shared.store import Store

    _connect(args.workdir)
    store = Store(Settings.from_env().project)
    if args.job:
        job = store.get_job(args.job)
        if job is None:
            print(f"no job {args.job}", file=sys.stderr)
            return 1
        print(job_detail(job, store.list_epochs(job.job_id)))
    else:
        print(jobs_table(store.list_jobs()))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from infra.demo import run_demo

    workdir = args.workdir / "demo"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return run_demo(workdir, args.spec, args.timeout_s)


def _schema(args: argparse.Namespace) -> int:
    from shared.spec import JobSpec

    print(json.dumps(JobSpec.model_json_schema(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
