"""Which spotline the API talks to: the environment, a local stack, or a
deployed project (``where``); and the clients pointed there (``Connection``).

The CLI finds it the same way, through ``connect``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from spotline.infra.client.errors import ConfigError, JobNotFound, NotConnected

if TYPE_CHECKING:
    from spotline.shared.adapters.firestore_store import FirestoreStore
    from spotline.shared.adapters.pubsub_bus import PubsubBus
    from spotline.shared.domain.documents import JobDoc
    from spotline.shared.settings import Settings

# The local stack's folder, under the working folder, unless said otherwise.
DEFAULT_WORKDIR = Path(".spotline")
WORKDIR_VARIABLE = "SPOTLINE_WORKDIR"
# The variables ``connect`` put into this process's environment: a notebook
# that connects again (to another stack, or to its stack restarted on new
# ports) must not read them as the user's own, which would come first.
_applied: dict[str, str] = {}
# The variables that name a system when the user sets them.
_NAMING = ("FIRESTORE_EMULATOR_HOST", "SPOTLINE_COMPUTE_ENDPOINT")


def workdir_of(workdir: str | os.PathLike[str] | None = None) -> Path:
    """The local stack's folder: ``workdir`` when given, else
    ``$SPOTLINE_WORKDIR``, else ``.spotline`` under the working folder."""
    if workdir is not None:
        return Path(workdir)
    return Path(os.environ.get(WORKDIR_VARIABLE) or DEFAULT_WORKDIR)


@dataclass(frozen=True)
class Connection:
    """The settings of the system found, with lazily made clients for it."""

    settings: Settings
    workdir: Path  # where the local stack was looked for

    @property
    def local(self) -> bool:
        """Whether it is a local stack (its VMs are processes, logging to files)."""
        return bool(self.settings.compute_endpoint)

    @cached_property
    def store(self) -> FirestoreStore:
        from spotline.shared.adapters.firestore_store import FirestoreStore

        return FirestoreStore(self.settings.project)

    def bus(self, user: str) -> tuple[PubsubBus, dict[str, str]]:
        """The bus to publish on for ``user``, and the topics it publishes to
        (the user's own in the per-user mode: IAM says whether they may)."""
        from spotline.shared.adapters.pubsub_bus import PubsubBus
        from spotline.shared.topics import topics_for

        topics = topics_for(user, self.settings.user_topics)
        return PubsubBus(self.settings.project, topics), topics

    def job_doc(self, job_id: str) -> JobDoc:
        """The job's document. Raises JobNotFound."""
        job = self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job


def connect(workdir: str | os.PathLike[str] | None = None) -> Connection:
    """The system to talk to (see ``where``), with this process's environment
    and fsspec's ``gs://`` defaults pointed at it.

    Raises:
        NotConnected: there is none.
        ConfigError: a setting is bad.
    """
    from spotline.infra.localstack.storage import reload_fsspec_config
    from spotline.shared.settings import Settings, SettingsError

    folder = workdir_of(workdir)
    env, config_file, _ = where(folder)
    if env is None:
        raise NotConnected(
            f"no local stack in {folder} and no deployed project in a config file: "
            "run `spotline up`, or `spotline deploy` (or set SPOTLINE_PROJECT and credentials)"
        )
    _apply(env)
    reload_fsspec_config()  # the storage emulator's defaults for gs://, if any
    try:
        settings = Settings.from_env(config_file=config_file)
    except SettingsError as err:
        raise ConfigError(err.problems) from None
    return Connection(settings, folder)


def _apply(env: dict[str, str]) -> None:
    _applied.update(env)
    os.environ.update(env)


def _users(name: str) -> bool:
    """Whether the variable is set, and not to what ``connect`` set it."""
    value = os.environ.get(name)
    return bool(value) and _applied.get(name) != value


def where(workdir: Path) -> tuple[dict[str, str] | None, bool, str]:
    """Where the settings come from, in this order:

    1. the environment, where it names the emulators or a compute endpoint (and
       the config file under it);
    2. else the local stack running in ``workdir``: its variables, no config file;
    3. else the project ``spotline deploy`` wrote into the config file.

    Returns the variables to add to the environment (None: no system found),
    whether to read the config file, and a line saying which it is.
    """
    from spotline.infra.localstack.stack import STACK_FILE, read_stack_env
    from spotline.shared.settings_file import config_path

    path = config_path(os.environ)
    found = path is not None and path.exists()
    environment = f"the environment, over the config file {path} ({'read' if found else 'absent'})"
    if any(_users(name) for name in _NAMING):
        return {}, True, environment
    try:
        stack = read_stack_env(workdir)
    except (OSError, ValueError, LookupError, TypeError) as err:
        raise NotConnected(
            f"the local stack's file {workdir / STACK_FILE} cannot be read ({err}): if "
            f"`spotline up` is not running in {workdir}, delete the file; if it is, stop it "
            "and run `spotline up` again"
        ) from None
    if stack is not None:
        return stack, False, f"the local stack running in {workdir} (no config file)"
    if any(os.environ.get(name) for name in _NAMING):
        return {}, True, environment  # what an earlier connect found
    if found:
        return {}, True, f"the config file {path}, under the environment"
    return None, True, f"the defaults and the environment (no local stack in {workdir}, no {path})"
