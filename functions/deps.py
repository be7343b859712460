"""The handlers' dependencies: one ``Deps`` per process, passed down explicitly.

Cloud Functions reuses a process for many events, so the clients live as long
as the process; each is built on first use, so a cold start pays only for what
the handler touches (google-cloud-compute alone costs about 1.5 s to import,
Firestore about 0.5 s). The handlers' wrapper (``spotline.functions.handlers.envelope``)
takes ``current()`` and hands it to the handler; every operation below gets it
as its first argument and reaches for nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from spotline.shared import logs
from spotline.shared.settings import Settings, SettingsError

if TYPE_CHECKING:
    from spotline.shared.ports.bus import Bus
    from spotline.shared.ports.compute import Compute
    from spotline.shared.ports.store import Store


def utc_now() -> datetime:
    return datetime.now(UTC)


class Deps:
    """Store, compute, bus, settings and clock for one process.

    Any of the clients may be given (a test's store, another compute); the
    ones not given are built from ``settings`` when first used.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        compute: Compute | None = None,
        bus: Bus | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._store = _with_outbox(store, self) if store is not None else None
        self._compute = compute
        self._bus = bus

    @property
    def store(self) -> Store:
        if self._store is None:
            from spotline.shared.adapters.firestore_store import FirestoreStore

            self._store = _with_outbox(FirestoreStore(self.settings.project), self)
        return self._store

    @property
    def compute(self) -> Compute:
        if self._compute is None:
            self._compute = build_compute(self.settings)
        return self._compute

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            from spotline.shared.adapters.pubsub_bus import PubsubBus

            self._bus = PubsubBus(self.settings.project, self.settings.topics)
        return self._bus


def _with_outbox(store: Store, deps: Deps) -> Store:
    """The store whose job writes publish their state-change events once they
    commit (``spotline.functions.ops.outbox``), on the process's bus."""
    from spotline.functions.ops.outbox import OutboxStore

    if isinstance(store, OutboxStore):  # another Deps' store: publish once
        return cast("Store", store)
    return cast("Store", OutboxStore(store, lambda: deps.bus))


def build_compute(settings: Settings) -> Compute:
    """The Compute adapter the settings name (imported here: it is heavy)."""
    from spotline.shared.adapters.gce_compute import GceCompute

    return GceCompute(settings.project, api_endpoint=settings.compute_endpoint)


_current: Deps | None = None


def current() -> Deps:
    """This process's dependencies, built from the environment on first use."""
    global _current
    if _current is None:
        _current = Deps(settings_from_env())
    return _current


def settings_from_env() -> Settings:
    """The function's settings: its environment only, which deploy wrote whole
    (a config file on the machine is the CLI's, not the functions')."""
    try:
        return Settings.from_env(config_file=False)
    except SettingsError as err:
        # Every event fails (and is redelivered) until the variables are fixed
        # (a redeploy): each failure says which, in one log entry.
        logs.error(str(err), problems=err.problems)
        raise


def reset() -> None:
    """Forget the process's dependencies, so the next ``current()`` reads the
    environment again (tests)."""
    global _current
    _current = None
