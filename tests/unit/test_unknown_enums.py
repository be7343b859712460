"""Enum values Google adds later, read by the deploy side: the client library
reads an unknown name as the zero value, which spotline treats conservatively
(the instance side: ``test_vm_states``)."""

from __future__ import annotations

import json

from google.cloud import functions_v2

from spotline.infra.deploy.plan import SOURCE_LABEL, needs_source


def test_a_function_in_a_state_spotline_does_not_know_is_built_again() -> None:
    answer = json.dumps({"state": "SOME_FUTURE_STATE", "labels": {SOURCE_LABEL: "abc"}})
    current = functions_v2.Function.from_json(answer, ignore_unknown_fields=True)

    assert current.state == functions_v2.Function.State.STATE_UNSPECIFIED
    assert needs_source(current, "abc")


def test_an_active_function_of_the_same_source_is_not() -> None:
    answer = json.dumps({"state": "ACTIVE", "labels": {SOURCE_LABEL: "abc"}})
    current = functions_v2.Function.from_json(answer, ignore_unknown_fields=True)

    assert not needs_source(current, "abc")
