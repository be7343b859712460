"""A VM's metadata changed by another writer between a function's read and
its write (Compute Engine refuses the write: its fingerprint is stale),
through the real handlers and the local cloud's fingerprint check: a gang's
regroup, and a restore gate opened, are written again on a fresh read, not
left unwritten (a regroup marked told that a node never got waits out the
gang's bound; a gate left shut, the agent's whole wait)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import REGROUP_METADATA_KEY, RESTORE_METADATA_KEY
from tests.conftest import vm_event
from tests.emulators.test_gang_replacement import (
    N0,
    N1,
    R1,
    boot,
    gang_stop,
    job_of,
    metadata,
    preempt,
    training_gang,
)
from tests.emulators.test_gang_resize import regroup, told
from tests.emulators.test_overlapping_attempts import gate, running
from tests.emulators.test_recovery import log_sink_entry

pytestmark = pytest.mark.emulators


def another_writer_first(
    monkeypatch: pytest.MonkeyPatch, host: LocalCloud, name: str, key: str
) -> list[str]:
    """The first write of ``key`` to VM ``name`` finds its metadata changed
    since the adapter read it (another item written meanwhile); the names
    raced so far."""
    model = host.model
    write = model.set_metadata
    raced: list[str] = []

    def racing(
        vm: str, zone: str | None, items: Mapping[str, str], expected: str | None = None
    ) -> None:
        if vm == name and key in items and not raced:
            raced.append(vm)
            current = dict(host.get(vm)["metadata"])  # type: ignore[index]
            write(vm, zone, {**current, "another-writer": "1"}, None)
        write(vm, zone, items, expected)

    monkeypatch.setattr(model, "set_metadata", racing)
    return raced


def test_a_regroup_write_that_loses_a_fingerprint_race_is_written_again(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    training_gang(call)
    preempt(call, N1, step=40)
    boot(call, R1)
    raced = another_writer_first(monkeypatch, host, N0, REGROUP_METADATA_KEY)
    gang_stop(call, N0, 40)
    assert raced == [N0]
    assert told(host, N0) == regroup(1, [N0, R1])
    assert told(host, R1) == regroup(1, [N0, R1])
    assert metadata(host, N0)["another-writer"] == "1"  # the other write kept
    job = job_of(project)
    assert (job.substatus, job.telling) == (JobSubstatus.TRAINING, None)


def test_a_restore_gate_write_that_loses_a_fingerprint_race_is_written_again(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost VM was kept through its notice: the next attempt waits; its
    agent reports its save, the VM goes, and the gate is opened, the first
    write racing another writer."""
    running(call)
    entry = log_sink_entry(host, "sl-job1-a1")
    call("on_spot_preempted", "spot_preempted", entry, message_id="l1")
    shut = gate(host, "sl-job1-a2")
    assert shut is not None and shut.startswith("wait-until-")
    raced = another_writer_first(monkeypatch, host, "sl-job1-a2", RESTORE_METADATA_KEY)
    notice = vm_event(SpotPreempted, step=7)
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    assert raced == ["sl-job1-a2"]
    assert gate(host, "sl-job1-a2") == "go"
    assert metadata(host, "sl-job1-a2")["another-writer"] == "1"
