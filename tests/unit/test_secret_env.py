"""Secret-like env variables (spotline.shared.domain.secret_env): which names count,
which references are taken, and that no value is shown anywhere. Pure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spotline.shared.domain.admission import refusals
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.secret_env import (
    SecretRef,
    env_refusals,
    is_secret_name,
    masked_env,
    masked_payload,
    masked_start,
    parse_reference,
    scrub,
)
from spotline.shared.domain.spec import JobSpec, parse_spec

BASE: dict[str, Any] = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}
VALUE = "hf_s3cr3tVALUEnobodyMayRead"


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "hf_token",
        "GITHUB_TOKEN",
        "TOKEN",
        "WANDB_API_KEY",
        "OPENAI_APIKEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "DB_PASSWORD",
        "MYSQL_PASSWD",
        "SSH_PRIVATE_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "Client_Secret",
    ],
)
def test_secret_like_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["TOKENIZERS_PARALLELISM", "MAX_TOKENS", "WANDB_PROJECT", "KEYBOARD", "HF_HOME"]
)
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("value", "ref"),
    [
        ("sm://hf-token", SecretRef("hf-token")),
        ("sm://projects/my-proj/secrets/hf_token", SecretRef("hf_token", "my-proj")),
        (
            "sm://projects/my-proj/secrets/hf-token/versions/3",
            SecretRef("hf-token", "my-proj", "3"),
        ),
        ("sm://projects/123456/secrets/x/versions/latest", SecretRef("x", "123456")),
    ],
)
def test_references(value: str, ref: SecretRef) -> None:
    assert parse_reference(value) == ref
    assert ref.resource("job-proj").endswith(f"/secrets/{ref.secret}/versions/{ref.version}")
    assert SecretRef("a").resource("job-proj") == "projects/job-proj/secrets/a/versions/latest"


@pytest.mark.parametrize(
    "value",
    [
        "sm://",
        "sm://has space",
        "sm://projects/p/secrets/x",  # project ids are 6-30 characters
        "sm://projects/my-proj/secrets/x/versions/0",
        "sm://projects/my-proj/secrets/x/versions/latest/extra",
        "sm://../etc",
    ],
)
def test_malformed_references_are_refused_whatever_the_name(value: str) -> None:
    with pytest.raises(ValueError, match="is not a Secret Manager reference"):
        parse_reference(value)
    (problem,) = env_refusals({"DATA_PATH": value})
    assert problem.startswith("env.DATA_PATH: ")


def test_a_literal_secret_is_refused_at_admission_naming_the_variable_not_the_value() -> None:
    spec = JobSpec.model_validate(
        {**BASE, "env": {"HF_TOKEN": VALUE, "WANDB_API_KEY": "sm://wandb", "SEED_NOTE": "x"}}
    )
    (problem,) = refusals(spec, load_catalog(), "us-central1")
    assert problem.startswith("env.HF_TOKEN: the name looks like a secret")
    assert "HF_TOKEN=sm://NAME" in problem and "secretAccessor" in problem
    assert VALUE not in problem


def test_masked_env_hides_literal_secret_values_and_keeps_references() -> None:
    env = {"HF_TOKEN": VALUE, "WANDB_API_KEY": "sm://wandb", "HF_HOME": "/data/hf"}
    shown = {"HF_TOKEN": "***", "WANDB_API_KEY": "sm://wandb", "HF_HOME": "/data/hf"}
    assert masked_env(env) == shown


def test_a_payload_is_masked_whole_and_cut_short() -> None:
    payload = json.dumps({**BASE, "epochs": "many", "env": {"DB_PASSWORD": VALUE, "A": "b"}})
    shown = json.loads(masked_payload(payload))
    assert shown["env"] == {"DB_PASSWORD": "***", "A": "b"} and shown["epochs"] == "many"
    # Not JSON (cut, or broken): every "SECRET_NAME": "value" pair still goes.
    cut = payload[: payload.index(VALUE) + 5]
    assert VALUE[:5] not in masked_payload(cut) and masked_payload(cut).endswith('"***')
    broken = '{"env": {"DB_PASSWORD": "' + VALUE + '", "X": 1,,}'
    assert VALUE not in masked_payload(broken) and '"X": 1' in masked_payload(broken)
    assert VALUE not in masked_start(payload.encode(), 1024)
    assert VALUE not in masked_start((payload + " " * 70_000).encode(), 1024)


@pytest.mark.parametrize(
    "env",
    [
        {"DB_PASSWORD": VALUE, "BAD": "a\0b"},  # the env field's own check fails
        {"DB_PASSWORD": VALUE, "X": 3},  # a value that is not a string
    ],
)
def test_an_invalid_spec_names_no_secret_value(env: dict[str, Any]) -> None:
    for spec in ({**BASE, "env": env}, {"user": "alice", "machine_ids": ["x"], "env": env}):
        with pytest.raises(InvalidMessage) as caught:
            parse_spec(json.dumps(spec).encode())
        assert VALUE not in str(caught.value)
    with pytest.raises(InvalidMessage) as caught:
        parse_spec(json.dumps({**BASE, "env": {"DB_PASSWORD": 12345678}}).encode())
    assert "12345678" not in str(caught.value) and "env.DB_PASSWORD" in str(caught.value)


def test_scrub_replaces_every_resolved_value_longest_first() -> None:
    text = f"token={VALUE} again {VALUE}; short=abc{VALUE}"
    assert scrub(text, [VALUE, "abc"]) == "token=*** again ***; short=******"
    assert scrub("nothing", []) == "nothing"
