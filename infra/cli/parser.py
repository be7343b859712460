"""The ``spotline`` command line: every command, its options, and the function
that runs it (``args.run``). One place to read what the CLI offers."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from spotline.infra.cli import (
    exit_codes,
    jobs_view,
    local,
    logs,
    outputs,
    reference,
    submit,
    timeline,
    watch,
)
from spotline.infra.client.packing import DEFAULT_LIMIT_MB
from spotline.infra.dashboard import command as dashboard_command
from spotline.infra.deploy import command as deploy_command

DESCRIPTION = "The ``spotline`` command."
JSON_HELP = "print JSON for scripts (keys in the docs: Submitting jobs, --json)"


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return f"spotline {installed('spotline')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "spotline (not installed)"


class Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default in its help, where it has one worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, [], (), argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


class TopHelp(argparse.RawDescriptionHelpFormatter, Help):
    """The top level's help: the exit codes' table as written."""


TRACEBACK_HELP = "on an unexpected error, show Python's traceback instead of one line"
WORKDIR_HELP = (
    "where `spotline up` keeps logs, storage and its stack file "
    "(default: $SPOTLINE_WORKDIR, else .spotline)"
)


def build() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spotline",
        description=DESCRIPTION,
        formatter_class=TopHelp,
        epilog="exit codes:\n" + exit_codes.table(),
    )
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--workdir", type=Path, default=None, help=WORKDIR_HELP)
    parser.add_argument("--traceback", action="store_true", help=TRACEBACK_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run the whole system locally until Ctrl-C")
    up.add_argument("--tick-s", type=float, default=10.0, help="reaper tick period")
    up.add_argument(
        "--heartbeat-s", type=float, default=5.0, help="seconds between a VM's heartbeats"
    )
    up.add_argument(
        "--preempt-rate", type=float, default=0.0, help="chaos: random preemptions per Spot VM-hour"
    )
    up.add_argument(
        "--chaos-seed", type=int, default=None, help="seed the random preemptions (replayable)"
    )
    up.add_argument("--notice-s", type=float, default=30.0, help="preemption notice")
    up.add_argument(
        "--quota",
        type=quota_limit,
        action="append",
        default=[],
        metavar="METRIC=LIMIT",
        help="a regional quota limit of the local VMs, e.g. NVIDIA_L4_GPUS=1 (repeatable)",
    )
    up.add_argument(
        "--user-topics",
        default="",
        metavar="USER,USER",
        help="the per-user mode (SECURITY.md): these users submit and cancel on their own topics",
    )
    up.set_defaults(run=local.up)

    cancel = sub.add_parser("cancel", help="cancel a job: its VM is deleted")
    cancel.add_argument("jobs", nargs="+", metavar="JOB", help="the job(s) to cancel")
    cancel.add_argument(
        "--reason", default="canceled by the user", help="kept on the job as its error"
    )
    cancel_then = cancel.add_mutually_exclusive_group()
    cancel_then.add_argument(
        "--wait", action="store_true", help="wait until each job has ended (CANCELED)"
    )
    cancel_then.add_argument(
        "--json",
        action="store_true",
        help="print what became of each job as JSON (job_id, result: published, ended or "
        "unknown, status, message_id, message); errors also go to stderr",
    )
    cancel.set_defaults(run=submit.cancel)

    preempt = sub.add_parser("preempt", help="local chaos: preempt a job's VM (or a VM)")
    preempt.add_argument("target", help="job id or VM name")
    preempt.add_argument(
        "--notice-s",
        type=float,
        default=30.0,
        help="seconds from the notice to the kill: the agent's time to save state (Spot gives 30)",
    )
    preempt.add_argument(
        "--node",
        type=int,
        default=0,
        help="which node of a multi-node job's gang (0, 1, ...; default 0)",
    )
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
    preempt.set_defaults(run=local.preempt)

    submit_cmd = sub.add_parser(
        "submit", help="validate a job spec, then publish it to spotline-submit"
    )
    submit_cmd.add_argument("file", type=Path, help="the job spec (JSON; `spotline schema`)")
    submit_cmd.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and print the spec as spotline reads it (defaults in); publish nothing",
    )
    submit_cmd.add_argument(
        "--code-dir",
        type=Path,
        default=None,
        help="upload this folder (what .gitignore and .spotlineignore keep; unchanged: not "
        "again) and run it as the job's code_uri; a spec's own code_dir is relative to its file",
    )
    submit_cmd.add_argument(
        "--data-dir", type=Path, default=None, help="upload this folder as the job's data_uri"
    )
    submit_cmd.add_argument(
        "--upload-limit-mb",
        type=float,
        default=DEFAULT_LIMIT_MB,
        help="refuse a folder holding more (its biggest files are named)",
    )
    then = submit_cmd.add_mutually_exclusive_group()
    then.add_argument(
        "--follow",
        action="store_true",
        help="then watch the job until it ends (exit 0 COMPLETED, 1 FAILED, 3 CANCELED)",
    )
    then.add_argument(
        "--json",
        action="store_true",
        help="print what was published as JSON (job_id, message_id, topic, uploads, "
        "recorded); the progress lines go to stderr",
    )
    submit_cmd.set_defaults(run=submit.submit)

    status = sub.add_parser(
        "status", help="the newest jobs, or one job: its spec, checkpoints, logs and timeline"
    )
    status.add_argument("job", nargs="?", help="one job's details")
    status.add_argument(
        "--limit", type=positive, default=20, help="show the newest N jobs (default 20)"
    )
    status.add_argument("--user", default=None, help="only this user's jobs")
    status.add_argument(
        "--active", action="store_true", help="only jobs still running or waiting to"
    )
    status.add_argument("--json", action="store_true", help=JSON_HELP)
    status.set_defaults(run=jobs_view.status)

    timeline.add_parser(sub, jobs_view.timeline)
    watch.add_parser(sub, jobs_view.watch)
    dashboard_command.add_parser(sub)

    rejected = sub.add_parser("rejected", help="the newest submissions that were not jobs, and why")
    rejected.add_argument("--limit", type=positive, default=20, help="show the newest N")
    rejected.add_argument("--json", action="store_true", help=JSON_HELP)
    rejected.set_defaults(run=jobs_view.rejected)

    demo = sub.add_parser("demo", help="start the local stack, run the digits job, stop")
    demo.add_argument(
        "--spec", type=Path, default=None, help="the job to run (default: examples/digits.json)"
    )
    demo.add_argument(
        "--timeout-s", type=float, default=300.0, help="give up on the job after this long"
    )
    demo.add_argument(
        "--preempt-after-epoch",
        type=int,
        default=2,
        help="preempt the first VM after this epoch (0: never)",
    )
    demo.set_defaults(run=local.demo)

    logs_cmd = sub.add_parser("logs", help="a job's output, attempt by attempt")
    logs_cmd.add_argument("job", help="the job")
    logs_cmd.add_argument("--attempt", type=int, default=None, help="only this attempt (1, 2, ...)")
    logs_cmd.add_argument(
        "--node", type=int, default=None, help="only this node of a multi-node job (0, 1, ...)"
    )
    logs_cmd.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print new lines as they come, into each new attempt, until the job ends",
    )
    logs_cmd.add_argument("--json", action="store_true", help=JSON_HELP)
    logs_cmd.set_defaults(run=logs.logs)

    board = sub.add_parser("tensorboard", help="download a job's TensorBoard logs")
    board.add_argument("job", help="the job")
    board.add_argument(
        "directory", type=Path, nargs="?", default=Path("."), help="into DIRECTORY/logs/JOB/"
    )
    board.set_defaults(run=outputs.tensorboard)

    saved = sub.add_parser(
        "checkpoints", help="download a job's saved state and outputs (into DIR/JOB/)"
    )
    saved.add_argument("job", help="the job")
    saved.add_argument(
        "directory", type=Path, nargs="?", default=Path("."), help="into DIRECTORY/JOB/"
    )
    saved.add_argument(
        "--skip",
        action="append",
        choices=("checkpoints", "outputs"),
        help="leave this part out (repeatable)",
    )
    saved.set_defaults(run=outputs.checkpoints)

    replay = sub.add_parser("replay", help="submit a copy of a job's recorded spec")
    replay.add_argument("job", help="the job whose spec to submit again")
    replay.add_argument(
        "--description", default=None, help='the copy\'s description (default: "replay of JOB")'
    )
    replay.add_argument(
        "--code-dir", type=Path, default=None, help="upload this folder and run it as the code"
    )
    replay.add_argument(
        "--data-dir", type=Path, default=None, help="upload this folder as the copy's data_uri"
    )
    replay.add_argument(
        "--upload-limit-mb",
        type=float,
        default=DEFAULT_LIMIT_MB,
        help="refuse a folder holding more (its biggest files are named)",
    )
    replay.add_argument(
        "--wait-request-s",
        type=int,
        default=None,
        help="seconds each machine option is asked for (default: the job's)",
    )
    replay.set_defaults(run=submit.replay)

    machines = sub.add_parser("machines", help="the machine catalog, prices and availability")
    machines.add_argument("--json", action="store_true", help=JSON_HELP)
    machines.add_argument(
        "--refresh-prices",
        action="store_true",
        help="rewrite the price file from the Cloud Billing Catalog API (the region's SKUs)",
    )
    machines.add_argument(
        "--prices-file", default=None, help="the price file to write (default: the shipped one)"
    )
    machines.add_argument(
        "--billing-endpoint",
        default=None,
        help="the Cloud Billing API's endpoint (default: cloudbilling.googleapis.com)",
    )
    machines.set_defaults(run=jobs_view.machines)

    schema = sub.add_parser("schema", help="print the job spec's JSON Schema")
    schema.set_defaults(run=reference.schema)

    settings = sub.add_parser(
        "settings", help="every setting: its variable, value, where it came from, what it does"
    )
    settings.add_argument("--json", action="store_true", help=JSON_HELP)
    settings.set_defaults(run=reference.settings)

    deploy = sub.add_parser("deploy", help="deploy (or update) spotline in a Google Cloud project")
    deploy_command.add_arguments(deploy)
    deploy.set_defaults(run=deploy_command.run)

    destroy = sub.add_parser(
        "destroy", help="remove what `spotline deploy` made (data only with --delete-data)"
    )
    deploy_command.add_destroy_arguments(destroy)
    destroy.set_defaults(run=deploy_command.run_destroy)
    for command in sub.choices.values():
        command.formatter_class = Help
        # After the command too (`spotline status --workdir D`); absent there,
        # the value given before it (or its default) stands.
        command.add_argument("--workdir", type=Path, default=argparse.SUPPRESS, help=WORKDIR_HELP)
        command.add_argument(
            "--traceback", action="store_true", default=argparse.SUPPRESS, help=TRACEBACK_HELP
        )
    return parser


def quota_limit(text: str) -> tuple[str, float]:
    """One ``up --quota METRIC=LIMIT``."""
    metric, _, limit = text.partition("=")
    with contextlib.suppress(ValueError):
        if metric and float(limit) >= 0:
            return metric, float(limit)
    raise argparse.ArgumentTypeError(f"expected METRIC=LIMIT, e.g. NVIDIA_L4_GPUS=1: {text!r}")


def positive(text: str) -> int:
    """A count of at least 1 (``--limit``)."""
    with contextlib.suppress(ValueError):
        if int(text) >= 1:
            return int(text)
    raise argparse.ArgumentTypeError(f"expected a whole number of at least 1: {text!r}")
