"""The cold-start benchmark's events (``benchmarks/coldstart_events.py``): each
function's is one its handler acts on, through the real functions framework,
Firestore and Pub/Sub emulators and the local cloud. A first request that is
refused (no such job, no token, no ``kind``) measures nothing of what a cold
instance pays: no Firestore client, no read, no write."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.coldstart_events import World, create_topics, event_for, webhook_receiver
from spotline.functions.deps import Deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.topology import FUNCTIONS
from spotline.shared.settings import Settings

pytestmark = pytest.mark.emulators


def refusals(out: str) -> list[str]:
    """What a handler logged of an event it refused (the envelope names the
    error's type), of a state change it could not publish (the outbox names
    the event) and of any error."""
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [
        line["message"]
        for line in lines
        if "error_type" in line
        or line["severity"] == "ERROR"
        or (line["severity"] == "WARNING" and "event_id" in line)
    ]


def test_each_functions_cold_start_event_is_acted_on(
    host: LocalCloud,
    project: str,
    call: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SPOTLINE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
    create_topics(project)
    with webhook_receiver() as (url, got):
        world = World(Deps(Settings.from_env(config_file=False)), host, url, got)
        for n, function in enumerate(FUNCTIONS):
            event = event_for(function.topic, world, f"{function.topic}-1")
            capsys.readouterr()

            response = call(function.entry_point, function.topic, event.payload, f"m{n}")

            assert response.status_code == 200, function.entry_point
            assert refusals(capsys.readouterr().out) == [], function.entry_point
            assert event.took_effect() is None, function.entry_point
