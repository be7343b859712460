"""Hostile input (tests/hostile_input.py) on the in-memory store, and what
never reaches a store: envelopes that are not Pub/Sub messages, attributes
that are not a map, a hostile reaper tick."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile import TOPIC, World, envelope, log_records, memory_world, snapshot, valid
from tests.hostile_input import *  # noqa: F403  (the tests on a world, collected here)
from tests.hostile_input import CASES, DEEP, DIGITS, ENVELOPES, hostile_messages, raw, vm


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    hostile_messages(metafunc)


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[World]:
    """The world on the in-memory store: for what never reaches a store."""
    made = memory_world(monkeypatch, tmp_path)
    the_world = next(made)
    the_world.set_up()
    yield the_world
    made.close()


@pytest.fixture
def world(memory: World) -> World:
    return memory


@pytest.mark.parametrize(("name", "fields"), ENVELOPES, ids=[name for name, _ in ENVELOPES])
@pytest.mark.parametrize("target", list(TOPIC))
def test_an_envelope_without_base64_data_is_acknowledged_and_changes_nothing(
    memory: World, capsys: pytest.CaptureFixture[str], target: str, name: str, fields: dict
) -> None:
    message = envelope(json.dumps(valid("epoch")).encode(), "bad", **fields)
    before = snapshot(memory.store)
    response = memory.post(target, message)
    assert response.status_code == 200, response.get_data(as_text=True)[-2000:]
    if target == "reaper" and name == "data-empty":
        return  # a tick: its body does not matter, and the reaper sweeps
    after = snapshot(memory.store)
    after["rejected"] = [r for r in after["rejected"] if r not in before["rejected"]]
    assert after == {**before, "rejected": after["rejected"]}
    problems = [r for r in log_records(capsys.readouterr().out) if r["severity"] != "INFO"]
    assert problems, "the reason is logged"


def test_attributes_that_are_not_a_map_are_ignored(memory: World) -> None:
    message = envelope(json.dumps(vm("heartbeat", step=7)).encode(), "attrs", attributes="x")
    assert memory.post("on_epoch_done", message).status_code == 200
    job = memory.store.get_job("job1")
    assert job is not None and job.step == 0  # a heartbeat records no progress
    instance = memory.store.get_instance("sl-job1-a1")
    assert instance is not None and instance.last_heartbeat_at is not None


def test_a_hostile_tick_is_a_tick(memory: World) -> None:
    """The reaper reads nothing of its message: whatever it holds, it sweeps."""
    for payload in (raw({}, sent_at=DEEP), raw({}, sent_at=DIGITS), b"[]", b"\xff"):
        assert memory.send("reaper", payload, "tick").status_code == 200


def test_the_corpus_covers_every_handler() -> None:
    assert {target for target, *_ in CASES} | {"reaper"} == set(TOPIC)
