"""A job that can never be placed (tests/unit/test_placement_errors.py), over the
wire: through the functions framework, on the Firestore emulator and the local
cloud."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import ReaperTick
from spotline.shared.domain.states import JobStatus
from tests.unit.test_placement_errors import SPEC, inserts


@pytest.mark.emulators
def test_over_the_wire_a_missing_image_fails_the_job_once_and_the_reaper_leaves_it(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    host.missing_images.add(f"projects/{project}/global/images/family/spotline-agent")
    assert call("submit_job", "submit", SPEC).status_code == 200
    store = FirestoreStore(project)
    ended = store.get_job("job1")
    assert ended is not None and ended.status == JobStatus.FAILED
    assert ended.error is not None and "spotline-agent' was not found" in ended.error
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])
    assert store.get_queue("job1") is None and store.get_rejection("1") is None
    sent = inserts(host)
    assert call("reaper", "reaper_tick", ReaperTick(), message_id="tick").status_code == 200
    assert inserts(host) == sent == 4
    again = store.get_job("job1")
    assert again is not None and again.history == ended.history


@pytest.mark.emulators
def test_over_the_wire_a_zone_outside_the_region_is_shown_by_spotline_rejected(
    call: Callable[..., Any], host: LocalCloud, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {**SPEC, "zones": ["europe-west4-a"]}
    assert call("submit_job", "submit", spec, message_id="far").status_code == 200
    store = FirestoreStore(project)
    assert store.get_job("job1") is None and store.list_users() == [] and inserts(host) == 0
    assert cli(["rejected"]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("far ")]
    assert "'europe-west4-a' is not a zone of us-central1" in row
