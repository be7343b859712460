"""The handlers' dependencies, built once per process and lazily.

Cloud Functions reuses a process for many events, so clients are module-level;
they are built on first use so a cold start pays only for what the handler
touches (google-cloud-compute alone costs over 2 s to import).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from shared import logs
from shared.settings import Settings, SettingsError

if TYPE_CHECKING:
    from shared.ports.bus import Bus
    from shared.ports.compute import Compute
    from shared.ports.store import Store


@cache
def settings() -> Settings:
    """The function's settings: its environment only, which deploy wrote whole
    (a config file on the machine is the CLI's, not the functions')."""
    try:
        return Settings.from_env(config_file=False)
    except SettingsError as err:
        # Every event fails (and is redelivered) until the variables are fixed
        # (a redeploy): each failure says which, in one log entry.
        logs.error(str(err), problems=err.problems)
        raise


@cache
def store() -> Store:
    from shared.adapters.firestore_store import FirestoreStore

    return FirestoreStore(settings().project)


@cache
def bus() -> Bus:
    from shared.adapters.pubsub_bus import PubsubBus

    return PubsubBus(settings().project, settings().topics)


@cache
def compute() -> Compute:
    config = settings()
    if config.compute == "local":
        from shared.adapters.local_compute import LocalCompute

        return LocalCompute(config.local_compute_url)
    from shared.adapters.gce_compute import GceCompute

    return GceCompute(config.project)


def reset() -> None:
    """Forget every client, so the next call reads the environment again (tests)."""
    for built in (settings, store, bus, compute):
        built.cache_clear()
