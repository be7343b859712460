"""Which spotline the CLI talks to: the environment, a local stack, or a deployed
project; and the job named on a command line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotline.shared.domain.documents import JobDoc
    from spotline.shared.settings import Settings

DEFAULT_WORKDIR = Path(".spotline")


def connect(workdir: Path) -> Settings:
    """The settings of the system the CLI talks to, with its clients pointed there
    (see ``where``); exits when there is none."""
    from spotline.infra.localstack.storage import reload_fsspec_config
    from spotline.shared.settings import Settings

    env, config_file, _ = where(workdir)
    if env is None:
        raise SystemExit(
            f"no local stack in {workdir} and no deployed project in a config file: "
            "run `spotline up`, or `spotline deploy` (or set SPOTLINE_PROJECT and credentials)"
        )
    os.environ.update(env)
    reload_fsspec_config()  # the storage emulator's defaults for gs://, if any
    return Settings.from_env(config_file=config_file)


def where(workdir: Path) -> tuple[dict[str, str] | None, bool, str]:
    """Where the CLI's settings come from, in this order:

    1. the environment, where it names the emulators or a compute endpoint (and
       the config file under it);
    2. else the local stack running in ``workdir``: its variables, no config file;
    3. else the project ``spotline deploy`` wrote into the config file.

    Returns the variables to add to the environment (None: no system found),
    whether to read the config file, and a line saying which it is.
    """
    from spotline.infra.localstack.stack import read_stack_env
    from spotline.shared.settings_file import config_path

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


def job_of(args: argparse.Namespace) -> tuple[Settings, JobDoc]:
    """The settings and the job named on the command line; exits if there is none."""
    from spotline.shared.adapters.firestore_store import FirestoreStore

    settings = connect(args.workdir)
    job = FirestoreStore(settings.project).get_job(args.job)
    if job is None:
        raise SystemExit(f"no job {args.job}")
    return settings, job
