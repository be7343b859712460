"""A spec with several problems names each of them at once, and a misspelt
field is answered with the field it most likely meant."""

from __future__ import annotations

import json

import pytest

from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.spec import parse_spec


def problems_of(fields: dict[str, object]) -> str:
    with pytest.raises(InvalidMessage) as refused:
        parse_spec(json.dumps(fields).encode())
    return str(refused.value)


def test_a_bad_machine_id_is_named_beside_a_second_entry_point() -> None:
    said = problems_of(
        {"user": "ada", "machine_ids": ["A100!"], "trainer": "digits_mlp", "command": ["x"]}
    )

    assert "'A100!' is not a machine id" in said
    assert "give exactly one of 'trainer' (built-in) or 'command'" in said


def test_a_bad_machine_id_is_named_beside_a_bad_field() -> None:
    said = problems_of(
        {"user": "ada", "machine_ids": ["A100!"], "trainer": "digits_mlp", "epochs": "many"}
    )

    assert "'A100!' is not a machine id" in said and "epochs:" in said


def test_a_misspelt_field_is_answered_with_the_field_it_meant() -> None:
    said = problems_of(
        {"user": "ada", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", "epoch": 3}
    )

    assert "epoch: not a field of the job spec; did you mean 'epochs'?" in said


def test_a_field_like_none_is_answered_with_where_the_fields_are_listed() -> None:
    said = problems_of(
        {"user": "ada", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", "colour": 3}
    )

    assert "colour: not a field of the job spec (`spotline schema` lists them)" in said
