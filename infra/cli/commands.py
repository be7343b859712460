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
from typing import TYPE_CHECKING

from infra.deploy import command as deploy_command

if TYPE_CHECKING:
    from shared.domain.documents import JobDoc
    from shared.domain.vms import Quota
    from shared.settings import Settings

DEFAULT_WORKDIR = Path(".spotline")


def main(argv: list[str] | None = None) -> int:
    from shared.settings import SettingsError

    args = _parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except SettingsError as err:
        # A bad variable or config value is the user's to fix: say which, no traceback.
        print(err, file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`spotline schema | head`): stop quietly, as a
        # shell's commands do (128 + SIGPIPE). Python would otherwise complain
        # again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"spotline {version('spotline')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "spotline (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spotline", description=__doc__)
    parser.add_argument("--version", action="version", version=_version())
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
    up.add_argument(
        "--preempt-rate", type=float, default=0.0, help="chaos: random preemptions per Spot VM-hour"
    )
    up.add_argument("--chaos-seed", type=int, default=None)
    up.add_argument("--notice-s", type=float, default=30.0, help="preemption notice")
    up.add_argument(
        "--quota",
        type=_quota_limit,
        action="append",
        default=[],
        metavar="METRIC=LIMIT",
        help="a regional quota limit of the local VMs, e.g. NVIDIA_L4_GPUS=1 (repeatable)",
    )
    up.set_defaults(run=_up)

    cancel = sub.add_parser("cancel", help="cancel a job: its VM is deleted")
    cancel.add_argument("job")
    cancel.add_argument("--reason", default="canceled by the user")
    cancel.set_defaults(run=_cancel)

    preempt = sub.add_parser("preempt", help="local chaos: preempt a job's VM (or a VM)")
    preempt.add_argument("target", help="job id or VM name")
    preempt.add_argument("--notice-s", type=float, default=30.0)
    preempt.add_argument(
        "--no-notice",
        action="store_true",
        help="kill it outright: a preemption the agent never sees",
    )
    preempt.add_argument(
        "--hang",
        action="store_true",
        help="freeze it instead: a hung VM that stops sending heartbeats",
    )
    preempt.set_defaults(run=_preempt)

    submit = sub.add_parser("submit", help="publish a job spec to spotline-submit")
    submit.add_argument("file", type=Path)
    submit.set_defaults(run=_submit)

    status = sub.add_parser("status", help="the jobs table, or one job's timeline")
    status.add_argument("job", nargs="?")
    status.set_defaults(run=_status)

    rejected = sub.add_parser("rejected", help="the newest submissions that were not jobs, and why")
    rejected.add_argument("--limit", type=int, default=20)
    rejected.set_defaults(run=_rejected)

    demo = sub.add_parser("demo", help="start the local stack, run the digits job, stop")
    demo.add_argument("--spec", type=Path, default=Path("examples/digits.json"))
    demo.add_argument("--timeout-s", type=float, default=300.0)
    demo.add_argument(
        "--preempt-after-epoch",
        type=int,
        default=2,
        help="preempt the first VM after this epoch (0: never)",
    )
    demo.set_defaults(run=_demo)

    logs = sub.add_parser("logs", help="a job's output, attempt by attempt")
    logs.add_argument("job")
    logs.add_argument("--attempt", type=int, default=None)
    logs.set_defaults(run=_logs)

    board = sub.add_parser("tensorboard", help="download a job's TensorBoard logs")
    board.add_argument("job")
    board.add_argument("directory", type=Path, nargs="?", default=Path("."))
    board.set_defaults(run=_tensorboard)

    replay = sub.add_parser("replay", help="submit a copy of a job's recorded spec")
    replay.add_argument("job")
    replay.add_argument("--description", default=None)
    replay.set_defaults(run=_replay)

    machines = sub.add_parser("machines", help="the machine catalog, prices and availability")
    machines.set_defaults(run=_machines)

    schema = sub.add_parser("schema", help="print the job spec's JSON Schema")
    schema.set_defaults(run=_schema)

    settings = sub.add_parser(
        "settings", help="every setting: its variable, value, where it came from, what it does"
    )
    settings.set_defaults(run=_settings)

    deploy = sub.add_parser("deploy", help="deploy (or update) spotline in a Google Cloud project")
    deploy_command.add_arguments(deploy)
    deploy.set_defaults(run=deploy_command.run)

    destroy = sub.add_parser(
        "destroy", help="remove what `spotline deploy` made (data only with --delete-data)"
    )
    deploy_command.add_destroy_arguments(destroy)
    destroy.set_defaults(run=deploy_command.run_destroy)
    return parser


def _quota_limit(text: str) -> tuple[str, float]:
    """One ``up --quota METRIC=LIMIT``."""
    metric, _, limit = text.partition("=")
    with contextlib.suppress(ValueError):
        if metric and float(limit) >= 0:
            return metric, float(limit)
    raise argparse.ArgumentTypeError(f"expected METRIC=LIMIT, e.g. NVIDIA_L4_GPUS=1: {text!r}")


def _connect(workdir: Path) -> Settings:
    """The settings of the system the CLI talks to, with its clients pointed there
    (see ``_where``); exits when there is none."""
    from infra.localstack.storage import reload_fsspec_config
    from shared.settings import Settings

    env, config_file, _ = _where(workdir)
    if env is None:
        raise SystemExit(
            f"no local stack in {workdir} and no deployed project in a config file: "
            "run `spotline up`, or `spotline deploy` (or set SPOTLINE_PROJECT and credentials)"
        )
    os.environ.update(env)
    reload_fsspec_config()  # the storage emulator's defaults for gs://, if any
    return Settings.from_env(config_file=config_file)


def _where(workdir: Path) -> tuple[dict[str, str] | None, bool, str]:
    """Where the CLI's settings come from, in this order:

    1. the environment, where it names the emulators or a compute endpoint (and
       the config file under it);
    2. else the local stack running in ``workdir``: its variables, no config file;
    3. else the project ``spotline deploy`` wrote into the config file.

    Returns the variables to add to the environment (None: no system found),
    whether to read the config file, and a line saying which it is.
    """
    from infra.localstack.stack import read_stack_env
    from shared.settings_file import config_path

    path = config_path(os.environ)
    found = path is not None and path.exists()
    if os.environ.get("FIRESTORE_EMULATOR_HOST") or os.environ.get("SPOTLINE_COMPUTE_ENDPOINT"):
        state = "read" if found else "absent"
        return {}, True, f"the environment, over the config file {path} ({state})"
    stack = read_stack_env(workdir)
    if stack is not None:
        return stack, False, f"the local stack running in {workdir} (no config file)"
    if found:
        return {}, True, f"the config file {path}, under the environment"
    return None, True, f"the defaults and the environment (no local stack in {workdir}, no {path})"


def _up(args: argparse.Namespace) -> int:
    from infra.localstack.stack import LocalStack, StackOptions

    options = StackOptions(
        tick_s=args.tick_s,
        heartbeat_s=args.heartbeat_s,
        preempt_rate_per_vm_hour=args.preempt_rate,
        chaos_seed=args.chaos_seed,
        notice_s=args.notice_s,
        quota_limits=dict(args.quota),
    )
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
    from shared.adapters.pubsub_bus import PubsubBus

    data = args.file.read_bytes()
    refused = _secret_refusals(data)
    if refused:  # not even published: Pub/Sub would keep the value for days
        print("not published: " + "; ".join(refused), file=sys.stderr)
        return 2
    settings = _connect(args.workdir)
    # Exactly what `gcloud pubsub topics publish spotline-submit --message=...` sends.
    message_id = PubsubBus(settings.project).publish("submit", data)
    print(f"published message {message_id}")
    job_id = _job_id(data, message_id)
    if job_id:
        print(f"job id: {job_id}")
    return 0


def _secret_refusals(data: bytes) -> list[str]:
    """What the submit function would refuse about the spec's env (a literal
    value for a secret-like name), when the spec parses; never a value."""
    from shared.domain.errors import InvalidMessage
    from shared.domain.secret_env import env_refusals
    from shared.domain.spec import parse_spec

    try:
        return env_refusals(parse_spec(data).env)
    except InvalidMessage:
        return []  # published: the function's rejection says what is wrong


def _job_id(data: bytes, message_id: str) -> str | None:
    from shared.domain.errors import InvalidMessage
    from shared.domain.lifecycle import job_id_for
    from shared.domain.spec import parse_spec

    try:
        return job_id_for(parse_spec(data), message_id)
    except InvalidMessage as err:
        print(f"warning: the function will reject this message: {err}", file=sys.stderr)
        return None


def _cancel(args: argparse.Namespace) -> int:
    from shared.adapters.firestore_store import FirestoreStore
    from shared.adapters.pubsub_bus import PubsubBus
    from shared.contract.events import CancelRequest
    from shared.domain.states import JobStatus

    settings = _connect(args.workdir)
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


def _preempt(args: argparse.Namespace) -> int:
    from infra.localcloud.chaos_client import ChaosClient
    from shared.adapters.firestore_store import FirestoreStore

    settings = _connect(args.workdir)
    if not settings.compute_endpoint:
        print(
            "preempt is a local chaos tool; on Compute Engine use "
            "`gcloud compute instances simulate-maintenance-event VM --zone Z`",
            file=sys.stderr,
        )
        return 2
    store = FirestoreStore(settings.project)
    job = store.get_job(args.target)
    name = job.instance if job is not None else args.target
    instance = store.get_instance(name or "")
    if instance is None:
        print(f"no job or VM named {args.target} (or it has no VM now)", file=sys.stderr)
        return 1
    compute = ChaosClient(settings.compute_endpoint, settings.project)
    if args.hang:
        compute.freeze(instance.zone, instance.name)
        print(f"froze {instance.name}: no more heartbeats")
    elif args.no_notice:
        compute.kill(instance.zone, instance.name)
        print(f"killed {instance.name} with no notice")
    else:
        compute.preempt(instance.zone, instance.name, args.notice_s)
        print(f"preempting {instance.name} with a {args.notice_s:g} s notice")
    return 0


def _settings(args: argparse.Namespace) -> int:
    """Print every setting as the other commands would read it here."""
    from infra.cli.report import settings_table
    from shared.settings import load

    env, config_file, where = _where(args.workdir)
    loaded = load({**os.environ, **(env or {})}, config_file=config_file)
    print(f"settings from {where}")
    print(settings_table(loaded))
    return 0


def _status(args: argparse.Namespace) -> int:
    from infra.cli.report import job_detail, jobs_table
    from shared.adapters.firestore_store import FirestoreStore

    store = FirestoreStore(_connect(args.workdir).project)
    if args.job:
        job = store.get_job(args.job)
        if job is None:
            print(f"no job {args.job}", file=sys.stderr)
            return 1
        print(job_detail(job, store.list_epochs(job.job_id)))
    else:
        print(jobs_table(store.list_jobs()))
    return 0


def _rejected(args: argparse.Namespace) -> int:
    from infra.cli.report import table
    from shared.adapters.firestore_store import FirestoreStore

    rejections = FirestoreStore(_connect(args.workdir).project).recent_rejections(args.limit)
    rows = [[r.message_id, f"{r.at:%Y-%m-%d %H:%M:%S}", r.reason] for r in rejections]
    print(table(["MESSAGE", "AT", "REASON"], rows))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from infra.cli.demo import run_demo

    workdir = args.workdir / "demo"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return run_demo(workdir, args.spec, args.timeout_s, args.preempt_after_epoch)


def _job(args: argparse.Namespace) -> tuple[Settings, JobDoc]:
    """The settings and the job named on the command line; exits if there is none."""
    from shared.adapters.firestore_store import FirestoreStore

    settings = _connect(args.workdir)
    job = FirestoreStore(settings.project).get_job(args.job)
    if job is None:
        raise SystemExit(f"no job {args.job}")
    return settings, job


def _logs(args: argparse.Namespace) -> int:
    from infra.localstack.stack import read_stack_workdir

    settings, job = _job(args)
    vms = read_stack_workdir(args.workdir) / "vms" if settings.compute_endpoint else None
    attempts = [a for a in job.attempts if args.attempt in (None, a.attempt)]
    if not attempts:
        print(f"job {args.job} has no attempt {args.attempt or ''} with a VM yet", file=sys.stderr)
        return 1
    for attempt in attempts:
        print(
            f"== attempt {attempt.attempt} on {attempt.instance} ({attempt.outcome or 'running'})"
        )
        local = vms / f"{attempt.instance}.log" if vms else None
        if local is not None and local.exists():
            print(_messages(local.read_text(errors="replace"), job.job_id, attempt.attempt))
        else:
            print(f"  gcloud logging read '{attempt.logs_query}' --project {settings.project}")
    return 0


def _messages(text: str, job_id: str, attempt: int) -> str:
    """The messages of one job attempt's lines (a cooling VM runs several jobs)."""
    shown = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            shown.append(line)
            continue
        if not isinstance(record, dict):
            shown.append(line)
        elif record.get("job_id", job_id) == job_id and record.get("attempt", attempt) == attempt:
            shown.append(str(record.get("message", line)))
    return "\n".join(shown)


def _tensorboard(args: argparse.Namespace) -> int:
    """The seed's get_tensorboard_logs: into DIRECTORY/logs/JOB/."""
    import fsspec

    settings, job = _job(args)
    source = f"{settings.job_prefix(job.job_id)}/outputs/tensorboard"
    fs, path = fsspec.core.url_to_fs(source)
    # gcsfs caches listings per process; the agent may have uploaded since.
    fs.invalidate_cache(path)
    if not fs.exists(path):
        print(f"job {job.job_id} has no TensorBoard logs (yet) in {source}", file=sys.stderr)
        return 1
    target = args.directory / "logs" / job.job_id
    target.mkdir(parents=True, exist_ok=True)
    fs.get(f"{path}/", f"{target}/", recursive=True)
    print(f"TensorBoard logs of {job.job_id} in {target}: tensorboard --logdir {target}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from shared.adapters.pubsub_bus import PubsubBus
    from shared.domain.lifecycle import job_id_for

    settings, job = _job(args)
    description = args.description or f"replay of {job.job_id}: {job.spec.description}"[:500]
    spec = job.spec.model_copy(update={"job_id": None, "description": description})
    data = spec.model_dump_json(exclude_none=True).encode()
    message_id = PubsubBus(settings.project).publish("submit", data)
    print(f"replaying {job.job_id} as job {job_id_for(spec, message_id)} (message {message_id})")
    return 0


def _machines(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from infra.cli.report import MachineRow, machines_table
    from shared.adapters.firestore_store import FirestoreStore
    from shared.domain.capacity import capacity
    from shared.domain.catalog import load_catalog
    from shared.domain.states import InstanceStatus
    from shared.domain.vms import Provisioning

    settings = _connect(args.workdir)
    store = FirestoreStore(settings.project)
    quotas = _region_quotas(settings)
    since = datetime.now(UTC) - timedelta(hours=24)
    live = [i.machine_id for i in store.list_instances(InstanceStatus.live())]
    rows = []
    for machine in load_catalog().values():
        for machine_id, provisioning, price in (
            (machine.machine_id, Provisioning.SPOT, machine.spot_usd_per_hour),
            (f"{machine.machine_id}.od", Provisioning.STANDARD, machine.on_demand_usd_per_hour),
        ):
            room = None if quotas is None else capacity(machine, provisioning, quotas)
            requests, successes = store.availability(machine_id, since)
            rows.append(
                MachineRow(
                    machine_id, machine, price, room, live.count(machine_id), requests, successes
                )
            )
    print(machines_table(rows, quotas_read=quotas is not None))
    return 0


def _region_quotas(settings: Settings) -> dict[str, Quota] | None:
    """The region's quotas through the settings' compute adapter, or None (and
    why, on stderr) when they cannot be read."""
    from google.auth.exceptions import GoogleAuthError

    from functions.deps import build_compute
    from shared.domain.errors import SpotlineError

    region = settings.region
    try:
        return build_compute(settings).region_quotas(region)
    except (SpotlineError, GoogleAuthError) as err:  # no credentials, no permission, down
        reason = " ".join(str(err).split())
        print(f"CAPACITY unknown: cannot read the quotas of {region}: {reason}", file=sys.stderr)
        return None


def _schema(args: argparse.Namespace) -> int:
    from shared.domain.spec import JobSpec

    print(json.dumps(JobSpec.model_json_schema(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
