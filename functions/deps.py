"""The handlers' dependencies, built once per process and lazily.

Cloud Functions reuses a process for many events, so clients are module-level;
they are built on first use so a cold start pays only for what the handler
touches (google-cloud-compute alone costs over 2 s to import).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from shared.config import Settings

if TYPE_CHECKING:
    from shared.bus import Bus
    from shared.compute.port import Compute
    from shared.store import Store


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def store() -> Store:
    from shared.store import Store

    return Store(settings().project)


@cache
def bus() -> Bus:
    from shared.bus import Bus

    return Bus(settings().project, settings().topics)


@cache
def compute() -> Compute:
    config = settings()
    if config.compute == "local":
        from shared.compute.local import LocalCompute

        return LocalCompute(config.local_compute_url)
    from shared.compute.gce import GceCompute

    return GceCompute(config.project)


def reset() -> None:
    """Forget every client, so the next call reads the environment again (tests)."""
    for built in (settings, store, bus, compute):
        built.cache_clear()
