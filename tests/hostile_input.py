"""Hostile input to every handler, through the real functions framework: one
message per kind of abuse (nesting, huge and out-of-range numbers, durations,
data that is not a JSON object or not base64, ids with ``/``, NaN, epochs past
the spec, negative numbers, size). Each must be acknowledged (200: no
redelivery storm), recorded with its reason (a rejection for a submission, a
log line naming the field for the rest) and change nothing.

The cases, and the tests that run on a ``world`` fixture: on the in-memory
store (tests/unit/test_hostile_input.py), and on the Firestore emulator
(tests/emulators/test_hostile_input_firestore.py), which refuses what the
client library and the server refuse (int64, nested arrays, reserved keys,
document ids with ``/``). Each of those files imports the tests and gives the
``world``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import pytest

from tests.hostile import World, log_records, snapshot, valid, vm_fields

DEEP = "[" * 20_000 + "]" * 20_000  # past every JSON parser's recursion limit
DIGITS = "9" * 5000  # past Python's 4300-digit int-str limit
INT64 = str(2**63)  # one past int64
FAR = "9999-12-31T23:59:59-05:00"  # UTC is year 10000
EARLY = "0001-01-01T00:00:00+05:00"  # UTC is year 0


def raw(payload: dict[str, Any], **fields: str) -> bytes:
    """``payload`` as JSON with each of ``fields`` set to raw JSON text."""
    marked = {**payload, **{name: f"@@{name}@@" for name in fields}}
    text = json.dumps(marked)
    for name, value in fields.items():
        text = text.replace(f'"@@{name}@@"', value, 1)
    return text.encode()


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def spec(**fields: Any) -> dict[str, Any]:
    return {**valid("submit_job"), **fields}


def vm(kind: str, **fields: Any) -> dict[str, Any]:
    return {**valid(kind), **fields}


# (case id, handler, payload, what the recorded reason names)
SUBMIT = [
    ("deep-nesting", raw(spec(), hyperparameters=DEEP), "not JSON"),
    ("deep-but-parsable", spec(hyperparameters=nested(30)), "hyperparameters"),
    ("5000-digits", raw(spec(), seed=DIGITS), "not JSON"),
    ("beyond-int64", raw(spec(), seed=INT64), "seed"),
    ("beyond-int64-free-form", raw(spec(), hyperparameters='{"lr": ' + INT64 + "}"), "64-bit"),
    ("huge-duration", spec(cool_down_period_s=10**12), "cool_down_period_s"),
    ("huge-runtime", spec(max_runtime_s=10**15), "max_runtime_s"),
    ("huge-wait", spec(wait_new_job_create_s=-(10**15)), "wait_new_job_create_s"),
    ("json-number", b"42", "JSON object"),
    ("json-list", b'[{"user": "alice"}]', "JSON object"),
    ("slash-job-id", spec(job_id="a/b"), "job_id"),
    ("slash-user", spec(user="../x"), "user"),
    ("nan", raw(spec(), validation_split="NaN"), "validation_split"),
    ("nan-free-form", raw(spec(), hyperparameters='{"lr": Infinity}'), "not a finite"),
    ("epochs-beyond", spec(epochs=10**6), "epochs"),
    ("negative", spec(batch_size=-1), "batch_size"),
    ("negative-seed", spec(seed=-1), "seed"),
    ("too-large", spec(env={"BLOB": "x" * 100_000}), "bytes"),
    ("many-problems", spec(**{f"field{i}": 1 for i in range(3000)}), "more problems"),
    ("reserved-key", spec(hyperparameters={"__name__": 1}), "reserved"),
    ("empty-key", spec(hyperparameters={"": 1}), "empty"),
    ("list-in-list", spec(hyperparameters={"layers": [[64, 32]]}), "list inside a list"),
    ("reserved-env", spec(env={"__X__": "1"}), "reserved"),
]
CANCEL = [
    ("deep-nesting", raw({}, job_id=DEEP), "JSON"),
    ("5000-digits", raw({}, job_id=DIGITS), "JSON"),
    ("beyond-int64", raw({}, job_id=INT64), "job_id"),
    ("json-number", b"42", "message"),
    ("json-list", b'["job1"]', "message"),
    ("slash-job-id", {"job_id": "job1/epochs/00001"}, "job_id"),
    ("reserved-id", {"job_id": "__job1__"}, "job_id"),
    ("huge-reason", {"job_id": "job1", "reason": "x" * 2_000_000}, "reason"),
]


def vm_cases(kind: str) -> list[tuple[str, bytes | dict[str, Any], str]]:
    """The abuses every VM event shares."""
    base = valid(kind)
    return [
        ("deep-nesting", raw(base, phases=DEEP), "JSON"),
        ("5000-digits", raw(base, attempt=DIGITS), "JSON"),
        ("beyond-int64", raw(base, attempt=INT64), "attempt"),
        ("far-future", vm(kind, sent_at=FAR), "sent_at"),
        ("year-zero-phase", vm(kind, phases={"TRAINING": EARLY}), "phases"),
        ("naive-time", vm(kind, sent_at="2026-01-01T00:00:00"), "sent_at"),
        ("json-number", b"42", "message"),
        ("json-list", json.dumps([base]).encode(), "message"),
        ("slash-job-id", vm(kind, job_id="job1/epochs/00001"), "job_id"),
        ("slash-instance", vm(kind, instance="sl-job1-a1/x"), "instance"),
        ("reserved-instance", vm(kind, instance="__x__"), "instance"),
        ("nan", raw(base, attempt="NaN"), "attempt"),
        ("negative", vm(kind, attempt=-1), "attempt"),
    ]


EPOCH = [
    ("beyond-int64-step", raw(valid("epoch"), step=INT64), "step"),
    ("negative-step", vm("epoch", step=-1), "step"),
    ("epoch-past-epochs", vm("epoch", epoch=5, epochs=3), "beyond epochs"),
    ("epochs-beyond-spec", vm("epoch", epoch=4, epochs=4), "beyond the spec"),
    ("too-many-metrics", vm("epoch", metrics={f"m{i}": 1.0 for i in range(10_000)}), "metrics"),
    ("reserved-metric", vm("epoch", metrics={"__x__": 1.0}), "reserved"),
    ("long-uri", vm("epoch", checkpoint_uri="gs://b/" + "x" * 10_000), "checkpoint_uri"),
]
HEARTBEAT = [
    ("phase-completed", vm("heartbeat", phase="COMPLETED"), "phase"),
    ("phase-canceled", vm("heartbeat", phase="CANCELED"), "phase"),
    ("phases-failed", vm("heartbeat", phases={"FAILED": vm_fields()["sent_at"]}), "phases"),
    ("beyond-int64-step", raw(valid("heartbeat"), step=INT64), "step"),
    ("negative-step", vm("heartbeat", resumed_from_step=-1), "resumed_from_step"),
]
FINISHED = [
    ("beyond-int64-exit", raw(valid("on_job_finished"), exit_code=INT64), "exit_code"),
    ("negative-exit", vm("on_job_finished", exit_code=-1000), "exit_code"),
    ("bad-last-epoch", vm("on_job_finished", last_epoch={"epoch": "x"}), "last_epoch"),
]
PREEMPTED = [
    ("negative-step", vm("on_spot_preempted", step=-1), "step"),
    ("beyond-int64-step", raw(valid("on_spot_preempted"), step=INT64), "step"),
    (
        "log-sink-reserved-name",
        {
            "protoPayload": {
                "methodName": "compute.instances.preempted",
                "resourceName": "projects/p/zones/us-central1-a/instances/__x__",
            }
        },
        "instance",
    ),
    (
        "log-sink-slash-name",
        {
            "protoPayload": {
                "methodName": "compute.instances.preempted",
                "resourceName": "projects/p/zones/us-central1-a/instances/a/b",
            }
        },
        "no instance",
    ),
]
CASES = [
    *[("submit_job", *case) for case in SUBMIT],
    *[("cancel_job", *case) for case in CANCEL],
    *[("on_vm_booted", *case) for case in vm_cases("on_vm_booted")],
    *[("on_epoch_done", *case) for case in vm_cases("heartbeat") + HEARTBEAT],
    *[("on_epoch_done", f"epoch-{case[0]}", *case[1:]) for case in vm_cases("epoch") + EPOCH],
    *[("on_job_finished", *case) for case in vm_cases("on_job_finished") + FINISHED],
    *[("on_spot_preempted", *case) for case in vm_cases("on_spot_preempted") + PREEMPTED],
]
# Envelopes whose message is not a Pub/Sub message with base64 data.
ENVELOPES = [
    ("data-number", {"data": 42}),
    ("data-list", {"data": ["e30="]}),
    ("data-object", {"data": {"job_id": "job1"}}),
    ("data-not-base64", {"data": "%%% not base64 %%%"}),
    ("data-empty", {"data": ""}),
]


def _acknowledged_unchanged(
    world: World, capsys: pytest.CaptureFixture[str], target: str, send: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    capsys.readouterr()
    before = snapshot(world.store)
    response = send()
    assert response.status_code == 200, response.get_data(as_text=True)[-2000:]
    after = snapshot(world.store)
    records = log_records(capsys.readouterr().out)
    if target == "submit_job":
        added = [r for r in after["rejected"] if r not in before["rejected"]]
        assert len(added) == 1, "a rejected submission is recorded once"
        after["rejected"] = before["rejected"]
    assert after == before
    return after, records


# The cases Firestore itself refuses (the client library or the server: int64,
# field names, nesting, arrays in arrays, document ids, size), run on the
# emulator too; every case runs on the in-memory store, which refuses the same.
ON_FIRESTORE = {
    "beyond-int64",
    "beyond-int64-free-form",
    "beyond-int64-step",
    "epoch-beyond-int64-step",
    "deep-but-parsable",
    "reserved-key",
    "empty-key",
    "list-in-list",
    "reserved-env",
    "reserved-id",
    "reserved-instance",
    "epoch-reserved-metric",
    "log-sink-reserved-name",
    "slash-job-id",
    "slash-instance",
    "huge-reason",
}


def hostile_messages(metafunc: pytest.Metafunc, only: Collection[str] | None = None) -> None:
    """Give a test taking ``target``, ``payload`` and ``reason`` every case (with
    ``only``: the cases of those names), from a test file's ``pytest_generate_tests``."""
    if {"target", "payload", "reason"} <= set(metafunc.fixturenames):
        metafunc.parametrize(
            ("target", "payload", "reason"),
            [
                pytest.param(target, payload, reason, id=f"{target}-{name}")
                for target, name, payload, reason in CASES
                if only is None or name in only
            ],
        )


def test_a_hostile_message_is_acknowledged_recorded_and_changes_nothing(
    world: World,
    capsys: pytest.CaptureFixture[str],
    target: str,
    payload: bytes | dict[str, Any],
    reason: str,
) -> None:
    send = lambda: world.send(target, payload, "bad")  # noqa: E731
    _, records = _acknowledged_unchanged(world, capsys, target, send)
    if target == "submit_job":
        rejection = world.store.get_rejection("bad")
        assert rejection is not None and reason in rejection.reason, rejection
        assert len(rejection.reason) < 5000 and len(rejection.payload) <= 1024
    else:
        dropped = [r for r in records if r.get("error_type") == "InvalidMessage"]
        assert len(dropped) == 1 and reason in dropped[0]["message"], records
        assert len(dropped[0]["message"]) < 5000


# -- what is not hostile: valid events that carry odd values --


def test_a_metric_that_is_not_finite_is_recorded_as_none(world: World) -> None:
    epoch = raw(vm("epoch", metrics={}), metrics='{"loss": NaN, "acc": Infinity, "lr": 0.1}')
    assert world.send("on_epoch_done", epoch, "nan").status_code == 200
    job = world.store.get_job("job1")
    assert job is not None and job.metrics == {"loss": None, "acc": None, "lr": 0.1}
    assert [e.metrics for e in world.store.list_epochs("job1")] == [job.metrics]


def test_a_job_whose_last_epoch_is_nan_or_past_the_spec_still_finishes(world: World) -> None:
    """The agent writes NaN as null: a diverged loss must not keep the job from ending."""
    last = {**vm("epoch", epoch=9, epochs=9), "metrics": {"loss": None}}
    finished = vm("on_job_finished", last_epoch=last, log_tail="y" * 1_000_000)
    assert world.send("on_job_finished", finished, "end").status_code == 200
    job = world.store.get_job("job1")
    assert job is not None and job.status == "COMPLETED"
    assert job.progress == "0/3" and world.store.list_epochs("job1") == []


def test_a_huge_log_tail_is_kept_short(world: World) -> None:
    finished = vm("on_job_finished", exit_code=1, log_tail="z" * 5_000_000 + "\nValueError: boom")
    assert world.send("on_job_finished", finished, "end").status_code == 200
    job = world.store.get_job("job1")
    assert job is not None and job.status == "FAILED" and job.error is not None
    assert job.error.endswith("ValueError: boom") and len(job.error) < 3000
