import json
from pathlib import Path

import pytest

from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.spec import JobSpec, parse_spec


def spec_bytes(**fields: object) -> bytes:
    base: dict[str, object] = {
        "user": "alice",
        "machine_ids": ["g2-standard-4"],
        "trainer": "digits_mlp",
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}).encode()


def test_a_minimal_spec_gets_the_seed_defaults() -> None:
    spec = parse_spec(spec_bytes())
    assert spec.epochs == 1 and spec.cool_down_period_s == 0
    assert spec.wait_new_job_create_s == -1 and spec.wait_new_job_create_interval == 10


@pytest.mark.parametrize(
    ("payload", "names"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON object, not list"),
        (b"\xff\xfe", "not JSON"),
        (spec_bytes(user=None), "user: Field required"),
        (spec_bytes(epochs="ten"), "epochs: Input should be a valid integer"),
        (spec_bytes(machine_ids=[]), "machine_ids: List should have at least 1 item"),
        (spec_bytes(machine_ids=["G2 standard"]), "'G2 standard' is not a machine id"),
        (spec_bytes(trainer=None), "exactly one of 'trainer'"),
        (spec_bytes(command=["python", "x.py"]), "exactly one of 'trainer'"),
        (spec_bytes(trainer="resnet"), "'resnet' is not one of"),
        (
            spec_bytes(batchsize=3),
            "batchsize: not a field of the job spec; did you mean 'batch_size'?",
        ),
        (spec_bytes(job_id="Bad_Id"), "job_id: String should match pattern"),
        (spec_bytes(nodes=65), "nodes: Input should be less than or equal to 64"),
        (spec_bytes(stop_period_s=600), "stop_period_s: only on-demand VMs can be stopped"),
    ],
)
def test_bad_input_names_what_is_wrong(payload: bytes, names: str) -> None:
    with pytest.raises(InvalidMessage, match=names.replace("(", r"\(")):
        parse_spec(payload)


def test_several_problems_are_all_named() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_spec(spec_bytes(epochs=0, batch_size=-1))
    assert "epochs:" in str(caught.value) and "batch_size:" in str(caught.value)


def test_the_schema_documents_the_fields() -> None:
    schema = JobSpec.model_json_schema()
    assert {"user", "machine_ids"} <= set(schema["required"])
    assert "NAME.od is on demand" in schema["properties"]["machine_ids"]["description"]
    assert "sm://NAME" in schema["properties"]["env"]["description"]  # how to pass secrets
    assert "API_KEY" in schema["properties"]["env"]["description"]


def test_every_example_is_a_valid_job_spec(repo_root: Path) -> None:
    examples = sorted((repo_root / "examples").glob("*.json"))
    assert examples
    for example in examples:
        parse_spec(example.read_bytes())


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"env": {"A=B": "1"}}, "env: Value error, variable name 'A=B' holds '='"),
        ({"env": {"A\0": "1"}}, "env: Value error, variable name 'A\\x00' holds '=' or a NUL"),
        ({"env": {"A": "1\0"}}, "env: Value error, variable 'A' has a NUL byte in its value"),
        (
            {"trainer": None, "command": ["python", "-c", "1\0"]},
            "command: Value error, argument '1\\x00' holds a NUL byte",
        ),
    ],
)
def test_what_no_process_can_be_started_with_is_refused(
    fields: dict[str, object], names: str
) -> None:
    # The VM could only fail the job (see tests/unit/test_trainer_process.py); say so at submit.
    with pytest.raises(InvalidMessage) as caught:
        parse_spec(spec_bytes(**fields))
    assert names in str(caught.value)
