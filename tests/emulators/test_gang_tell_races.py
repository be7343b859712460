"""A node's metadata changed by another writer between the regroup's read
and its write (Compute Engine refuses the write: its fingerprint is stale),
through the real handlers and the local cloud's fingerprint check: the
regroup is written again on a fresh read, not left untold while the job
marks it told (its node would wait for it until the gang's bound)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import REGROUP_METADATA_KEY
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

pytestmark = pytest.mark.emulators


def test_a_regroup_write_that_loses_a_fingerprint_race_is_written_again(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    training_gang(call)
    preempt(call, N1, step=40)
    boot(call, R1)
    model = host.model
    write = model.set_metadata
    raced: list[str] = []

    def another_writer_first(
        name: str, zone: str, items: Mapping[str, str], expected: str | None = None
    ) -> None:
        """The first regroup write to node 0 finds its metadata changed
        since the adapter read it (another item written meanwhile)."""
        if name == N0 and REGROUP_METADATA_KEY in items and not raced:
            raced.append(name)
            current = dict(host.get(name)["metadata"])  # type: ignore[index]
            write(name, zone, {**current, "another-writer": "1"}, None)
        write(name, zone, items, expected)

    monkeypatch.setattr(model, "set_metadata", another_writer_first)
    gang_stop(call, N0, 40)
    assert raced == [N0]
    assert told(host, N0) == regroup(1, [N0, R1])
    assert told(host, R1) == regroup(1, [N0, R1])
    assert metadata(host, N0)["another-writer"] == "1"  # the other write kept
    job = job_of(project)
    assert (job.substatus, job.telling) == (JobSubstatus.TRAINING, None)
