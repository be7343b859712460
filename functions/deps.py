"""The handlers' dependencies, built once per process and lazily.

Cloud Functions reuses a process for many events, so clients are module-level;
they are built on first use so a cold start pays only for what the handler
touches (google-cloud-compute alone costs over 2 s to import).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from shared.settings import Settings

if TYPE_CHECKING:
    from shared.adapters.firestore_store import Store
    from shared.adapters.pubsub_bus import Bus
    from shared.ports.compute import Compute


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def store() -> Store:
    from shared.adapters.firestore_store import Store

    return Store(settings().project)


@cache
def bus() -> Bus:
    from shared.adapters.pubsub_bus import Bus

    return Bus(settings().project, settings().topics)


@cache
def compute() -> Compute:
    from shared.adapters.gce_compute import GceCompute

    config = settings()
    return GceCompute(config.project, api_endpoint=config.compute_endpoint)


def reset() -> None:
    """Forget every client, so the next call reads the environment again (tests)."""
    for built in (settings, store, bus, compute):
        built.cache_clear()
