"""A fuzzer over every message a handler takes: random JSON-ish values, and
structural mutations of valid messages (a field dropped, replaced, added; the
message wrapped, cut short, nested deep, given huge or non-finite numbers).

Each input goes through the handler's real entry point (the envelope, with a
CloudEvent as Eventarc sends it) on a fresh in-memory store holding a job in
TRAINING on its VM; the in-memory store refuses what Firestore refuses. Two
properties: no exception escapes (none would be redelivered forever), and a
message its model refuses changes no document (a submission only leaves its
rejection).

``SPOTLINE_FUZZ_EXAMPLES`` sets the examples per handler (``make soak``); the
count of inputs tried is printed in the terminal summary.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotline.functions import deps, main
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.contract.events import (
    CancelRequest,
    JobFinished,
    VmBooted,
    parse_preemption,
    progress_adapter,
)
from spotline.shared.domain.spec import parse_spec
from tests.hostile import World, log_records, memory_world, snapshot, valid

EXAMPLES = int(os.environ.get("SPOTLINE_FUZZ_EXAMPLES", "100"))
# Inputs tried per handler, and seconds spent: printed by conftest's summary.
TRIED: Counter[str] = Counter()
SPENT: list[float] = [0.0]

# What each message kind is parsed with, as its handler parses it.
PARSE: dict[str, Callable[[bytes], object]] = {
    "submit_job": parse_spec,
    "cancel_job": CancelRequest.model_validate_json,
    "on_vm_booted": VmBooted.model_validate_json,
    "heartbeat": progress_adapter.validate_json,
    "epoch": progress_adapter.validate_json,
    "on_job_finished": JobFinished.model_validate_json,
    "on_spot_preempted": parse_preemption,
}
TARGET = {"heartbeat": "on_epoch_done", "epoch": "on_epoch_done"}
HANDLERS = {name: getattr(main, name) for name in main.__all__}

# -- strategies -------------------------------------------------------------

_NUMBER_TOKENS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "9" * 5000,
    str(2**63),
    str(-(2**63) - 1),
]
keys = st.one_of(
    st.sampled_from(["", "__x__", "a/b", "..", "job_id", "epoch", "metrics", "loss", "TRAINING"]),
    st.text(max_size=12),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 10**18]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "a/b",
            "__x__",
            "sl-job1-a1",
            "job1",
            "9999-12-31T23:59:59-05:00",
            "0001-01-01T00:00:00+05:00",
            "2026-01-01T00:00:00",
            "TRAINING",
            "",
        ]
    ),
)
plausible: st.SearchStrategy[Any] = st.one_of(
    st.integers(min_value=-1, max_value=4),
    st.sampled_from([None, 0.5, "", "job1", "sl-job1-a1", "TRAINING", {}, [], "gs://b/c"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


def _dumps(value: Any) -> str:
    return json.dumps(value)  # NaN and Infinity as Python writes them


@st.composite
def mutated(draw: st.DrawFn, kind: str, token: str) -> bytes:
    """A valid message of ``kind`` (a VM event with the VM's event ``token``),
    changed in one or a few structural ways (the token among the fields)."""
    message: Any = valid(kind, token)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if not isinstance(message, dict):
            break
        how = draw(st.sampled_from(["small", "small", "drop", "replace", "add", "nest", "wrap"]))
        fields = sorted(message)
        if how == "small" and fields:  # a plausible value: often still valid
            field = draw(st.sampled_from(fields))
            kept = message[field]
            message[field] = draw(
                st.integers(min_value=-1, max_value=4)
                if isinstance(kept, int) and not isinstance(kept, bool)
                else plausible
            )
        elif how == "drop" and fields:
            message.pop(draw(st.sampled_from(fields)))
        elif how == "replace" and fields:
            message[draw(st.sampled_from(fields))] = draw(json_values)
        elif how == "add":
            message[draw(keys)] = draw(json_values)
        elif how == "nest":
            inner = draw(st.sampled_from(["phases", "metrics", "last_epoch", "hyperparameters"]))
            message[inner] = {draw(keys): draw(json_values)}
        elif how == "wrap":
            message = draw(
                st.sampled_from([[message], {"message": message}, message.get("job_id")])
            )
    text = _dumps(message)
    # Raw number tokens JSON encoders will not write, and nesting past the parsers.
    edit = draw(st.sampled_from(["none", "none", "none", "number", "deep", "cut"]))
    if edit == "number" and isinstance(message, dict) and message:
        field = draw(st.sampled_from(sorted(message)))
        marked = _dumps({**message, field: "@@"})
        text = marked.replace('"@@"', draw(st.sampled_from(_NUMBER_TOKENS)), 1)
    elif edit == "deep":
        depth = draw(st.sampled_from([25, 1500, 20_000]))
        text = (
            text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
            if text.endswith("}")
            else text
        )
    elif edit == "cut":
        text = text[: draw(st.integers(min_value=0, max_value=max(0, len(text) - 1)))]
    return text.encode()


def message_of(kind: str, token: str) -> st.SearchStrategy[bytes]:
    return st.one_of(
        mutated(kind, token),
        mutated(kind, token),
        mutated(kind, token),
        json_values.map(lambda value: _dumps(value).encode()),
        st.binary(max_size=64),
    )


# -- the world ---------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The world, set up once through the handlers; each example starts from a
    copy of its documents."""
    patch = pytest.MonkeyPatch()
    made = memory_world(patch, tmp_path_factory.mktemp("fuzz"))
    world = next(made)
    world.set_up()
    yield world
    made.close()
    patch.undo()


def fresh(template: World) -> InMemoryStore:
    """A store holding the template's job, instance and user documents."""
    source = template.store
    store = InMemoryStore()
    job, instance, user = (
        source.get_job("job1"),
        source.get_instance("sl-job1-a1"),
        source.get_user("alice"),
    )
    assert job is not None and instance is not None and user is not None
    store.create_job(job)
    store.create_instance(instance)
    store.update_user("alice", lambda _: user)
    return store


def deliver(target: str, data: bytes) -> str:
    """Hand ``data`` to the handler as Eventarc would; its log output."""
    topic = "projects/hostile/topics/t"
    event = CloudEvent(
        {
            "id": "fuzz",
            "source": f"//pubsub.googleapis.com/{topic}",
            "type": "google.cloud.pubsub.topic.v1.messagePublished",
        },
        {
            "message": {
                "data": base64.b64encode(data).decode(),
                "messageId": "fuzz",
                "publishTime": datetime.now(UTC).isoformat(),
            },
            "subscription": "projects/hostile/subscriptions/s",
        },
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        HANDLERS[target](event)  # an exception here escapes: the property fails
    return out.getvalue()


def refused(kind: str, data: bytes) -> bool:
    try:
        PARSE[kind](data)
    except Exception:
        return True
    return False


def check(template: World, kind: str, data: bytes) -> None:
    started = time.perf_counter()
    target = TARGET.get(kind, kind)
    store = fresh(template)
    current = deps.current()
    deps._current = deps.Deps(  # this example's store; the template's compute
        current.settings, store=store, compute=current.compute, bus=RecordingBus("hostile")
    )
    try:
        before = snapshot(store)
        output = deliver(target, data)
        if refused(kind, data):
            after = snapshot(store)
            rejected = after.pop("rejected")
            assert after == {k: v for k, v in before.items() if k != "rejected"}
            if target == "submit_job" and rejected:
                assert len(rejected) == 1 and rejected[0]["reason"]
            else:
                warned = [r for r in log_records(output) if r["severity"] != "INFO"]
                assert warned and all(len(r["message"]) < 5000 for r in warned), output
            TRIED["refused"] += 1
    finally:
        deps._current = current
        TRIED[kind] += 1
        SPENT[0] += time.perf_counter() - started


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(PARSE))
def test_no_message_escapes_and_a_refused_one_changes_nothing(template: World, kind: str) -> None:
    @FUZZ
    @given(data=message_of(kind, template.token))
    def fuzz(data: bytes) -> None:
        check(template, kind, data)

    fuzz()


def test_the_fuzzer_reaches_the_handlers_with_valid_messages(template: World) -> None:
    """Not only refusals: the unchanged valid messages are taken."""
    for kind in PARSE:
        data = json.dumps(valid(kind, template.token)).encode()
        assert not refused(kind, data), kind
        # ... and with the VM's token they get past its check: the fuzzed
        # messages reach the lifecycle, not only the token check.
        current = deps.current()
        deps._current = deps.Deps(
            current.settings, store=fresh(template), compute=current.compute, bus=RecordingBus("x")
        )
        try:
            output = deliver(TARGET.get(kind, kind), data)
        finally:
            deps._current = current
        assert "ForgedEvent" not in output, output


def summary() -> str | None:
    """The line conftest prints after the run (None: the fuzzer did not run)."""
    total = sum(count for kind, count in TRIED.items() if kind != "refused")
    if not total:
        return None
    per = ", ".join(f"{k} {v}" for k, v in sorted(TRIED.items()) if k != "refused")
    return (
        f"fuzz: {total} inputs tried in {SPENT[0]:.1f} s ({per}); "
        f"{TRIED['refused']} of them refused by their model"
    )
