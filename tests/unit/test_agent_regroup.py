"""A node whose ranks stopped with its gang waits for the regroup around the
lost node's replacement (``vm_image/agent/regroup``), against the local
cloud's real per-VM metadata server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from spotline.infra.localcloud.metadata_server import Identity, MetadataServer
from spotline.shared.contract.assignment import Assignment, Regroup
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.vms import GANG_STOP_METADATA_KEY, REGROUP_METADATA_KEY
from spotline.vm_image.agent.agent import gang_stopped
from spotline.vm_image.agent.metadata import Metadata
from spotline.vm_image.agent.regroup import (
    await_regroup,
    newer_regroup,
    watch_gang_stop,
    watch_regroup,
)

N0, N1, R1 = "sl-j1-a1-n0", "sl-j1-a1-n1", "sl-j1-a1-n1-g1"
GANG = Assignment(
    job_id="j1",
    attempt=1,
    project="p",
    spec=JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp", nodes=2),
    checkpoint_dir="gs://b/c",
    output_dir="gs://b/o",
    nodes=[N0, N1],
    hosts=[N0, N1],
    master_port=20001,
)


def regroup(generation: int) -> str:
    nodes = [N0, f"{N1}-g{generation}"]
    return Regroup(
        generation=generation, nodes=nodes, hosts=nodes, master_port=20100
    ).model_dump_json()


@pytest.fixture
def server() -> Iterator[MetadataServer]:
    found = MetadataServer(Identity(N0, "1234", "us-central1-a", "g2-standard-4", "p", "42"), {})
    found.start()
    try:
        yield found
    finally:
        found.close()


def test_the_node_waits_for_the_regroup_then_takes_the_new_node_list(
    server: MetadataServer,
) -> None:
    later = threading.Timer(1.0, lambda: server.set_attributes({REGROUP_METADATA_KEY: regroup(1)}))
    started = time.monotonic()
    later.start()
    try:
        found = await_regroup(Metadata(server.host), GANG, threading.Event(), wait_s=30)
    finally:
        later.cancel()
    assert found is not None and found.generation == 1
    assert GANG.regrouped(found).nodes == [N0, R1]
    assert GANG.regrouped(found).master_port == 20100
    assert 0.9 <= time.monotonic() - started < 10.0


def test_a_regroup_of_its_own_generation_or_older_is_not_waited_for(
    server: MetadataServer,
) -> None:
    """A node that joined as generation 1 and stopped again waits for 2."""
    joined = GANG.model_copy(update={"generation": 1, "nodes": [N0, R1]})
    server.set_attributes({REGROUP_METADATA_KEY: regroup(1)})
    assert await_regroup(Metadata(server.host), joined, threading.Event(), wait_s=1.5) is None


def test_a_deleted_vm_stops_waiting(server: MetadataServer) -> None:
    """The gang relaunched whole: spotline deletes the VM, the agent's SIGTERM ends the wait."""
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    assert await_regroup(Metadata(server.host), GANG, stop, wait_s=120) is None
    assert time.monotonic() - started < 60.0  # not the whole bound


def test_no_bound_no_wait(server: MetadataServer) -> None:
    assert await_regroup(Metadata(server.host), GANG, threading.Event(), wait_s=0) is None


def test_a_garbled_item_is_not_a_regroup(server: MetadataServer) -> None:
    server.set_attributes({REGROUP_METADATA_KEY: "{not json"})
    assert await_regroup(Metadata(server.host), GANG, threading.Event(), wait_s=1.5) is None


def test_an_elastic_node_stops_once_its_own_generation_is_asked_to(
    server: MetadataServer,
) -> None:
    """The smaller gang (generation 2) is asked to stop to grow back; a
    request for an older generation (left from before) is not for it."""
    server.set_attributes({GANG_STOP_METADATA_KEY: "1"})
    asked = threading.Event()
    done = threading.Event()
    watcher = threading.Thread(
        target=watch_gang_stop, args=(Metadata(server.host), 2, done, asked.set), daemon=True
    )
    watcher.start()
    try:
        assert not asked.wait(1.5)
        server.set_attributes({GANG_STOP_METADATA_KEY: "2"})
        assert asked.wait(30)
    finally:
        done.set()
    watcher.join(30)
    assert not watcher.is_alive()


def test_the_watch_ends_with_the_trainer_when_nothing_was_asked(server: MetadataServer) -> None:
    done = threading.Event()
    asked = threading.Event()
    watcher = threading.Thread(
        target=watch_gang_stop, args=(Metadata(server.host), 2, done, asked.set), daemon=True
    )
    watcher.start()
    done.set()
    watcher.join(30)
    assert not watcher.is_alive() and not asked.is_set()


def test_a_regroup_read_after_the_trainer_ended_is_not_taken_while_it_ran(
    server: MetadataServer,
) -> None:
    """The watch's hanging read returns the regroup just after the ranks
    exited (``done`` set): the node takes it from its wait for the regroup,
    not as a regroup that came while its ranks ran, which it would keep and
    take again, stale, at the next stop of its ranks."""
    server.set_attributes({REGROUP_METADATA_KEY: "{}"})  # the item exists: the read hangs
    done = threading.Event()
    seen: list[Regroup] = []
    watcher = threading.Thread(
        target=watch_regroup,
        args=(Metadata(server.host), GANG, N0, done, seen.append),
        daemon=True,
    )
    watcher.start()
    time.sleep(1.0)  # in its hanging read
    done.set()
    server.set_attributes({REGROUP_METADATA_KEY: regroup(1)})
    watcher.join(30)
    assert not watcher.is_alive() and seen == []


def test_a_replacement_joins_at_the_generation_its_gang_grew_back_at(
    server: MetadataServer,
) -> None:
    made = GANG.model_copy(update={"generation": 1, "nodes": [N0, R1]})
    assert newer_regroup(Metadata(server.host), made) is None  # nothing written
    server.set_attributes({REGROUP_METADATA_KEY: regroup(1)})
    assert newer_regroup(Metadata(server.host), made) is None  # its own generation
    server.set_attributes({REGROUP_METADATA_KEY: regroup(3)})
    found = newer_regroup(Metadata(server.host), made)
    assert found is not None and made.regrouped(found).generation == 3


@pytest.mark.parametrize(
    ("code", "notice_at", "nodes", "asked", "stopped"),
    [
        (143, None, 2, False, True),  # a peer's notice
        (143, None, 1, True, True),  # an elastic gang of one node asked to grow back
        (143, None, 1, False, False),  # a single node's 143: its own run's end
        (143, 5.0, 2, True, False),  # its own notice: a preemption
        (1, None, 2, False, False),  # failed
        # Asked to grow back: a rank failed in a collective with a peer the
        # request killed before its stop handler, or killed past the grace.
        (1, None, 2, True, True),
        (137, None, 2, True, True),
        # Asked to grow back, exited 0: the stop asked for (a trainer that
        # takes any stop for its end), reported with the last save.
        (0, None, 2, True, True),
    ],
)
def test_a_stop_with_the_gang_is_told_apart(
    code: int, notice_at: float | None, nodes: int, asked: bool, stopped: bool
) -> None:
    assert gang_stopped(code, notice_at, nodes, asked) is stopped
