"""`spotline logs` of a gang and `spotline logs --follow`, in the cloud: the real
google-cloud-logging client against a local double of Cloud Logging's
entries.list (tests/logging_double.py), the job in the Firestore emulator.

The local side (the VMs' files) is driven on the whole local stack in
tests/e2e/test_e2e_multinode.py and tests/e2e/test_e2e_command.py."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.logs import follow
from spotline.infra.client.log_sources import CloudSource
from spotline.infra.localcloud.wire import HttpService
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain import node_replacement
from spotline.shared.domain.documents import AttemptRecord, JobDoc
from spotline.shared.domain.lifecycle import logs_query, new_job, vm_recorded
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job
from tests.documents import job
from tests.logging_double import LoggingDouble, an_entry

STARTED = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (STARTED + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def gang_attempt(attempt: int, outcome: str | None = None) -> AttemptRecord:
    names = [f"sl-gang-a{attempt}", f"sl-gang-a{attempt}-n1"]
    ids = [f"{attempt}00", f"{attempt}01"]
    return AttemptRecord(
        attempt=attempt,
        instance=names[0],
        zone="us-central1-a",
        machine_id="g2-standard-4",
        started_at=STARTED + timedelta(minutes=attempt - 1),
        outcome=outcome,
        nodes=2,
        node_names=names,
        logs_query=logs_query(ids, "gang", attempt),
    )


@pytest.fixture
def logging_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoggingDouble]:
    api = LoggingDouble([])
    service = HttpService(api).start()
    monkeypatch.setenv("SPOTLINE_LOGGING_ENDPOINT", service.endpoint)
    try:
        yield api
    finally:
        service.stop()


def test_a_gangs_logs_come_from_every_node(
    project: str, logging_api: LoggingDouble, capsys: pytest.CaptureFixture[str]
) -> None:
    logging_api.entries += [
        an_entry("gang", 1, at(1), "rank 0 up", instance_id="100", node=0),
        an_entry("gang", 1, at(2), "rank 1 up", instance_id="101", node=1),
        an_entry("gang", 1, at(3), "rank 0 epoch 1", instance_id="100", node=0),
        # Another VM's line claiming the job: not one of the attempt's instances.
        an_entry("gang", 1, at(4), "forged", instance_id="999", node=1),
    ]
    FirestoreStore(project).create_job(
        job("gang", spec={"nodes": 2}, attempts=[gang_attempt(1, "completed")])
    )

    assert cli(["logs", "gang"]) == 0
    everything = capsys.readouterr().out
    assert cli(["logs", "gang", "--node", "1"]) == 0
    one_node = capsys.readouterr().out
    assert cli(["logs", "gang", "--node", "2"]) == 2
    refused = capsys.readouterr().out

    assert everything.splitlines() == [
        "== attempt 1 on sl-gang-a1 and 1 more nodes (completed)",
        "[node 0] rank 0 up",
        "[node 0] rank 0 epoch 1",
        "[node 1] rank 1 up",
    ]
    assert one_node.splitlines() == [
        "== attempt 1 on sl-gang-a1-n1 (node 1) (completed)",
        "[node 1] rank 1 up",
    ]
    assert "job gang has no node 2: nodes 0 to 1" in refused
    [*_, last] = logging_api.requests_to("POST", "/entries:list")
    assert 'resource.labels.instance_id=("100" OR "101")' in last.body["filter"]
    assert last.body["filter"].endswith("AND jsonPayload.node=1")


def replaced_gang() -> JobDoc:
    """A gang of 2 whose node 1 (id 101) was replaced by a VM of id 201."""
    spec = JobSpec(
        user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp", epochs=2, nodes=2
    )
    gang = new_job(spec, "gang", "m1", STARTED)
    gang = vm_recorded(
        gang, "sl-gang-a1-n0", "us-central1-a", "g2-standard-4", STARTED, 0.3, 1.0, "100",
        nodes=["sl-gang-a1-n0", "sl-gang-a1-n1"], node_ids=["100", "101"],
    )  # fmt: skip
    gang = move_job(gang, JobSubstatus.TRAINING, STARTED)
    gang = node_replacement.lost(
        gang, "sl-gang-a1-n1", 1, JobSubstatus.PREEMPTED, STARTED, "preempted"
    )
    return node_replacement.placed(gang, "sl-gang-a1-n1-g1", "201", STARTED)


def test_a_replaced_nodes_logs_are_the_lost_vms_then_the_replacements(
    project: str, logging_api: LoggingDouble, capsys: pytest.CaptureFixture[str]
) -> None:
    logging_api.entries += [
        an_entry("gang", 1, at(1), "rank 1 epoch 1", instance_id="101", node=1),
        an_entry("gang", 1, at(5), "rank 1 restored", instance_id="201", node=1),
    ]
    FirestoreStore(project).create_job(replaced_gang())
    assert cli(["logs", "gang", "--node", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "[node 1] rank 1 epoch 1",
        "[node 1] rank 1 restored",
    ]
    assert cli(["status", "gang"]) == 0
    shown = capsys.readouterr().out
    assert "node 1 sl-gang-a1-n1 replaced by sl-gang-a1-n1-g1 (instance id 201)" in shown


def test_follow_prints_each_line_once_into_the_next_attempt_until_the_job_ends(
    project: str, logging_api: LoggingDouble
) -> None:
    """Lines come while the follow runs, one of them late (listed after a
    newer one, as Cloud Logging may), a second attempt starts, and the job
    completes: every line is printed once, and the follow ends with 0."""
    store = FirestoreStore(project)
    store.create_job(
        job("gang", status=JobStatus.TRAINING, spec={"nodes": 2}, attempts=[gang_attempt(1)])
    )
    logging_api.entries.append(an_entry("gang", 1, at(1), "first", instance_id="100"))
    source = CloudSource(project, settle_s=0.3, poll_s=0.05)
    out = io.StringIO()

    def cloud_goes_on() -> None:
        time.sleep(0.3)
        logging_api.entries.append(an_entry("gang", 1, at(5), "newer", instance_id="100"))
        time.sleep(0.3)
        logging_api.entries.append(an_entry("gang", 1, at(3), "late", instance_id="101", node=1))
        time.sleep(0.3)
        store.update_job(
            "gang",
            lambda j: j.model_copy(
                update={"attempts": [gang_attempt(1, "preempted"), gang_attempt(2)], "attempt": 2}
            ),
        )
        resumed = an_entry("gang", 2, at(70), "resumed", instance_id="201", node=1)
        logging_api.entries.append(resumed)
        time.sleep(0.3)
        store.update_job(
            "gang",
            lambda j: j.model_copy(
                update={"status": JobStatus.COMPLETED, "substatus": JobSubstatus.COMPLETED}
            ),
        )
        # Written before the end, listed only after it: the settling reads it.
        logging_api.entries.append(an_entry("gang", 2, at(71), "done", instance_id="200"))

    cloud = threading.Thread(target=cloud_goes_on)
    cloud.start()
    code = follow(source, store, "gang", None, None, out)
    cloud.join()

    assert code == 0
    assert out.getvalue().splitlines() == [
        "== attempt 1 on sl-gang-a1 and 1 more nodes (running)",
        "[node 0] first",
        "[node 0] newer",
        "[node 1] late",
        "== attempt 2 on sl-gang-a2 and 1 more nodes (running)",
        "[node 1] resumed",
        "[node 0] done",
    ]


def test_follow_ends_when_the_job_is_deleted_while_followed(
    project: str, logging_api: LoggingDouble
) -> None:
    """The job document is deleted (from the console) while its logs are
    followed: the follow says so and ends with 1, instead of waiting for
    ever as for a job not recorded yet."""
    store = FirestoreStore(project)
    store.create_job(
        job("gone", status=JobStatus.TRAINING, spec={"nodes": 2}, attempts=[gang_attempt(1)])
    )
    source = CloudSource(project, settle_s=0.3, poll_s=0.05)
    out = io.StringIO()
    codes: list[int] = []
    following = threading.Thread(
        target=lambda: codes.append(follow(source, store, "gone", None, None, out)), daemon=True
    )
    following.start()
    time.sleep(0.3)
    store.client.collection("jobs").document("gone").delete()

    following.join(timeout=5)
    assert not following.is_alive(), "the follow waits for a deleted job for ever"
    assert codes == [1]
    assert "job gone no longer exists" in out.getvalue()
