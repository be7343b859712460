"""``spotline deploy`` on the command line: flags (or their environment
variables) into a deploy configuration, every missing setting named at once, and
the plan a dry run prints.

The functions' other settings (quotas, timeouts, cooling) are the deploying
shell's ``SPOTLINE_*`` variables, read as ``Settings.from_env`` reads them; the
config file a previous deploy wrote fills in what neither flags nor variables
give. A deploy writes that file (``spotline.shared.settings_file``); a dry run does not.
``spotline destroy`` takes the same target flags. For tests,
``SPOTLINE_<API>_ENDPOINT`` variables point the clients at local doubles
(``spotline.infra.endpoints``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from spotline.infra.cli.output import print_json
from spotline.infra.topology import RUNTIME
from spotline.shared.settings_file import config_path, write_config

if TYPE_CHECKING:
    # The client libraries cost over half a second, pydantic-settings over a
    # tenth: only deploy pays for them, not every `spotline` command.
    from spotline.infra.deploy.changes import Change
    from spotline.infra.deploy.plan import DeployConfig
    from spotline.shared.settings import Settings

JSON_HELP = (
    "print one JSON document on stdout: project, dry_run, and changes (each kind, name, "
    "action, detail); the progress goes to stderr"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser)
    parser.add_argument(
        "--image",
        help="the VM image (SPOTLINE_IMAGE; default: the project's spotline-agent family)",
    )
    parser.add_argument(
        "--submitter",
        action="append",
        default=None,
        help="a principal (user:EMAIL, group:EMAIL, serviceAccount:EMAIL) who may publish "
        "on the submit and cancel topics; repeat for more (SPOTLINE_SUBMITTERS, "
        "comma-separated)",
    )
    parser.add_argument(
        "--user",
        action="append",
        default=None,
        metavar="USER=PRINCIPAL",
        help="the per-user mode (SECURITY.md): USER submits and cancels on topics of their own, "
        "on which only PRINCIPAL may publish, e.g. alice=user:alice@example.com; repeat for "
        "more (SPOTLINE_USER_PRINCIPALS, comma-separated)",
    )
    parser.add_argument("--runtime", default=RUNTIME, help=f"Cloud Functions runtime ({RUNTIME})")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="read the project and print what deploy would change; change nothing",
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)


def add_destroy_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser)
    parser.add_argument(
        "--delete-data",
        action="store_true",
        help="also delete the bucket (every checkpoint and output) and the Firestore database",
    )
    parser.add_argument(
        "--cancel-jobs", action="store_true", help="cancel active jobs instead of refusing"
    )
    parser.add_argument("--yes", action="store_true", help="destroy without asking")
    parser.add_argument(
        "--dry-run", action="store_true", help="read the project and print what would go"
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """Where spotline is deployed: deploy's and destroy's common flags."""
    parser.add_argument("--project", help="the Google Cloud project (SPOTLINE_PROJECT)")
    parser.add_argument("--region", help="where functions and schedule run (SPOTLINE_REGION)")
    parser.add_argument(
        "--zones",
        help="comma-separated zones VMs are tried in (SPOTLINE_ZONES; default: the region's)",
    )
    parser.add_argument(
        "--storage-root",
        help="gs://BUCKET/PREFIX for checkpoints and outputs (SPOTLINE_STORAGE_ROOT)",
    )
    parser.add_argument(
        "--service-account",
        help="the functions' identity (SPOTLINE_FUNCTIONS_SERVICE_ACCOUNT; "
        "default: spotline-fn@PROJECT.iam.gserviceaccount.com, which deploy makes)",
    )
    parser.add_argument(
        "--vm-service-account",
        help="the VMs' identity: publishes events, writes storage (SPOTLINE_SERVICE_ACCOUNT; "
        "default: spotline-vm@PROJECT.iam.gserviceaccount.com, which deploy makes)",
    )


def config_from(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> DeployConfig:
    """The deploy configuration: flags over the environment over the config file
    a previous deploy wrote. SystemExit naming every missing setting;
    SettingsError naming every bad one."""
    from spotline.infra.deploy import iam
    from spotline.shared.settings import load

    env = os.environ if env is None else env
    flags = {
        "project": args.project,
        "region": args.region,
        "zones": args.zones,
        "storage_root": args.storage_root,
        "image": getattr(args, "image", None),
        "service_account": args.vm_service_account,
    }
    loaded = load(env, flags=flags)
    given = {name for name, origin in loaded.origins.items() if origin != "default"}
    missing = [
        text
        for name, text in (
            ("project", "--project (or SPOTLINE_PROJECT)"),
            ("region", "--region (or SPOTLINE_REGION)"),
            ("storage_root", "--storage-root gs://BUCKET/PREFIX (or SPOTLINE_STORAGE_ROOT)"),
        )
        if name not in given
    ]
    settings = loaded.settings
    # The accounts deploy makes, unless others are named.
    functions_account = (
        args.service_account
        or env.get("SPOTLINE_FUNCTIONS_SERVICE_ACCOUNT")
        or iam.FUNCTIONS_ACCOUNT.email(settings.project)
    )
    if "service_account" not in given:
        settings = settings.replace(service_account=iam.VM_ACCOUNT.email(settings.project))
    submitters = tuple(getattr(args, "submitter", None) or ()) or tuple(
        p.strip() for p in env.get("SPOTLINE_SUBMITTERS", "").split(",") if p.strip()
    )
    bad = iam.principal_problems(submitters)
    pairs = tuple(getattr(args, "user", None) or ()) or tuple(
        p.strip() for p in env.get("SPOTLINE_USER_PRINCIPALS", "").split(",") if p.strip()
    )
    user_principals = _user_principals(pairs)
    if user_principals:
        users = ",".join(sorted({user for user, _ in user_principals}))
        settings = settings.replace(user_topics=users)
    if "region" in given and not settings.zones:
        missing.append(f"--zones (or SPOTLINE_ZONES): spotline knows no zones of {settings.region}")
    if missing:
        raise SystemExit("spotline deploy: missing " + "; ".join(missing))
    if bad:
        raise SystemExit("spotline deploy: --submitter: " + "; ".join(bad))
    if not settings.storage_root.startswith("gs://"):
        raise SystemExit(
            f"spotline deploy: --storage-root must be gs://..., not {settings.storage_root}"
        )
    from spotline.infra.deploy.plan import DeployConfig

    settings = settings.replace(compute_endpoint=None)
    runtime = getattr(args, "runtime", RUNTIME)
    return DeployConfig(
        settings,
        functions_account,
        runtime=runtime,
        submitters=submitters,
        user_principals=user_principals,
    )


def _user_principals(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``alice=user:alice@example.com`` pairs, or SystemExit naming the bad ones."""
    found, bad = [], []
    for pair in pairs:
        user, _, principal = pair.partition("=")
        if not user.strip() or not principal.strip():
            bad.append(f"{pair!r} is not USER=PRINCIPAL")
            continue
        found.append((user.strip(), principal.strip()))
    if bad:
        raise SystemExit("spotline deploy: --user: " + "; ".join(bad))
    return tuple(found)


def save_config(config: DeployConfig, env: Mapping[str, str] | None = None) -> Path | None:
    """Write what the CLI needs to find this deployment (see spotline.shared.settings_file);
    the path written, or None where the environment names no place for it."""
    path = config_path(os.environ if env is None else env)
    if path is not None:
        write_config(path, cli_config(config.settings))
    return path


def cli_config(settings: Settings) -> dict[str, object]:
    """The settings the config file keeps: where the deployment is."""
    return {
        "project": settings.project,
        "region": settings.region,
        "zones": list(settings.zones),
        "storage_root": settings.storage_root,
        # The CLI publishes on the users' own topics in the per-user mode.
        **({"user_topics": list(settings.user_topics)} if settings.user_topics else {}),
    }


class Progress:
    """Where deploy and destroy say what they do, change by change: stdout for a
    person; with ``--json``, stderr (a deploy takes minutes), and the changes are
    kept for the one document printed at the end."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.changes: list[Change] = []
        self._stream: TextIO = sys.stderr if as_json else sys.stdout

    def say(self, line: str = "") -> None:
        print(line, file=self._stream, flush=True)

    def report(self, change: Change) -> None:
        self.changes.append(change)
        self.say(str(change))

    def document(self, **fields: object) -> None:
        """With ``--json``: ``fields`` and every change, as one JSON document."""
        if self.as_json:
            print_json({**fields, "changes": [c.as_record() for c in self.changes]})


def run(args: argparse.Namespace) -> int:
    """``spotline deploy``. A failure (a step that cannot go on, Google's
    refusal, no credentials) is the CLI's one line with its exit code
    (``spotline.infra.cli.failures``)."""
    from spotline.infra.deploy.deployer import Deployer, Endpoints

    config = config_from(args)
    progress = Progress(args.json)
    if args.dry_run:
        return dry_run(config, progress)
    progress.say(
        f"deploying spotline to project {config.project}, region {config.region} "
        "(each function's build takes minutes; they run side by side)"
    )
    changes = Deployer(config, endpoints=Endpoints.from_env(), report=progress.report).run()
    # The functions run even where a delivery policy is left to set by hand:
    # the CLI can reach them from now on.
    path = save_config(config)
    if path is not None:
        progress.say(f"the CLI's config ({', '.join(cli_config(config.settings))}): {path}")
    progress.document(**_target(config, dry_run=False), **_config_file(config, path))
    unset = [change for change in changes if change.action == "not set"]
    if unset:
        print(
            f"{len(unset)} delivery policies could not be set (Eventarc did not show the "
            "trigger's subscription): run the gcloud commands above",
            file=sys.stderr,
        )
        return 1
    progress.say("spotline is deployed: publish a job to spotline-submit")
    return 0


def _target(config: DeployConfig, dry_run: bool) -> dict[str, object]:
    return {"project": config.project, "region": config.region, "dry_run": dry_run}


def _config_file(config: DeployConfig, path: Path | None) -> dict[str, object]:
    """The CLI's config file a deploy writes (a dry run: would write), for ``--json``."""
    return {
        "config_path": None if path is None else str(path),
        "config": cli_config(config.settings),
    }


def run_destroy(args: argparse.Namespace) -> int:
    from spotline.infra.deploy.destroy import Destroyer
    from spotline.infra.endpoints import Endpoints

    config = config_from(args)
    if not (args.yes or args.dry_run):
        raise SystemExit(
            f"spotline destroy: this removes spotline from project {config.project}; "
            "pass --yes to go on (or --dry-run to see what would go)"
        )
    progress = Progress(args.json)
    destroyer = Destroyer(
        config,
        endpoints=Endpoints.from_env(),
        delete_data=args.delete_data,
        cancel_jobs=args.cancel_jobs,
        dry_run=args.dry_run,
        report=progress.report,
    )
    destroyer.run()
    progress.say(f"spotline {'would be' if args.dry_run else 'is'} removed from {config.project}")
    progress.document(**_target(config, dry_run=args.dry_run))
    return 0


def dry_run(config: DeployConfig, progress: Progress) -> int:
    """Read the project: print, per resource, what deploy would change and what is
    already right, then what the topology declares (functions' settings)."""
    from spotline.infra.deploy import iam
    from spotline.infra.deploy.bootstrap import ProjectSetup
    from spotline.infra.deploy.deployer import Deployer, Endpoints

    setup = ProjectSetup(
        config, endpoints=Endpoints.from_env(), dry_run=True, report=progress.report
    )
    progress.say(f"spotline deploy --dry-run: project {config.project}, region {config.region}")
    setup.ensure_services()
    setup.ensure_database()
    setup.rules.ensure()
    setup.ensure_bucket()
    setup.ensure_accounts()
    setup.network.ensure()
    setup.custom_roles.ensure()
    writer = setup.ensure_sink()
    access = config.iam_config
    wanted = iam.project_bindings(access, setup.project_number)
    if writer:
        wanted.append(iam.sink_writer_binding(access, writer))
    setup.ensure_bindings(wanted)
    if access.users:
        setup.revoke_bindings(iam.superseded_bindings(access))
    Deployer(config, endpoints=setup.endpoints, report=progress.report).preview()
    progress.say()
    progress.say("\n".join(describe(config)))
    progress.document(
        **_target(config, dry_run=True), **_config_file(config, config_path(os.environ))
    )
    return 0


def describe(config: DeployConfig) -> list[str]:
    """What a deploy converges, from the topology and settings alone (no call)."""
    from spotline.infra.deploy import plan
    from spotline.infra.deploy.source import build_archive
    from spotline.infra.topology import FUNCTIONS
    from spotline.shared.domain.catalog import load_catalog

    archive = build_archive()
    job = plan.desired_job(config)
    lines = [
        "What the topology declares: deploy creates what is missing, updates what",
        "differs (with an update mask) and leaves the rest alone.",
        "",
        "topics:        " + ", ".join(t.rsplit("/", 1)[-1] for t in plan.topic_paths(config)),
        f"dead letters:  kept {plan.DEAD_LETTER_RETENTION_S // 86400} days in subscription "
        f"{plan.dead_letter_subscription(config).name.rsplit('/', 1)[-1]}",
        f"catalog:       {len(load_catalog())} machine types into Firestore machines/",
        f"source:        {len(archive.files)} files, {len(archive.data)} bytes, "
        f"digest {archive.digest}",
        "requirements:  " + ", ".join(archive.requirements.split()),
        f"functions:     {config.runtime}, Pub/Sub trigger, retry on failure, "
        f"running as {config.service_account}",
    ]
    for function in FUNCTIONS:
        retry = function.retry
        lines.append(
            f"  {function.function_id:<26} {function.entry_point:<18} "
            f"<- {plan.topic_path(config.project, function.topic).rsplit('/', 1)[-1]:<24} "
            f"{function.timeout_s:>3} s  {function.memory:<6} "
            f"ack {function.ack_deadline_s} s, backoff {retry.minimum_backoff_s}-"
            f"{retry.maximum_backoff_s} s, dead letter after {function.max_delivery_attempts}"
        )
    lines.append(
        f"schedule:      {job.name.rsplit('/', 1)[-1]}: '{job.schedule}' ({job.time_zone}) "
        f"-> {job.pubsub_target.topic_name.rsplit('/', 1)[-1]}"
    )
    path = config_path(os.environ)
    written = json.dumps(cli_config(config.settings))
    lines.append(f"CLI config:    {path or 'none (no HOME)'} would get {written}")
    lines.append("environment:")
    lines += [f"  {key}={value}" for key, value in sorted(config.settings.to_env().items())]
    return lines
