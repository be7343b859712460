"""The test session's local stack is shared by every e2e module, and lives
until the session ends: it must not leave its variables in this process's
environment for the tests that come after them. It did: a cloud `spotline
logs` test run after an e2e module took the stack's compute endpoint for its
own, and read the local VMs' files instead of Cloud Logging."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from spotline.infra.client.connection import where
from spotline.infra.localstack.stack import LocalStack

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

# The variables whose values are the stack's own (its ports, its bucket).
_STACKS_OWN = (
    "FIRESTORE_EMULATOR_HOST",
    "PUBSUB_EMULATOR_HOST",
    "SPOTLINE_COMPUTE_ENDPOINT",
    "STORAGE_EMULATOR_HOST",
    "SPOTLINE_STORAGE_ROOT",
)


def test_the_shared_stack_leaves_none_of_its_variables_in_the_environment(
    shared_stack: LocalStack, tmp_path: Path
) -> None:
    env = shared_stack.client_env()

    left = [name for name in _STACKS_OWN if os.environ.get(name) == env[name]]

    assert left == []
    # So the CLI, with no stack in its workdir, does not take itself for local.
    assert not where(tmp_path)[2].startswith("the environment")


def test_a_test_that_drives_the_stack_has_its_variables(local_stack: LocalStack) -> None:
    env = local_stack.client_env()

    assert {name: os.environ.get(name) for name in _STACKS_OWN} == {
        name: env[name] for name in _STACKS_OWN
    }


def test_the_ticks_reach_pubsub_with_the_variables_gone(shared_stack: LocalStack) -> None:
    # The tick loop publishes from this process: its client was made while
    # the variables were set, and keeps the emulator's address.
    sent = shared_stack.ticks_sent
    deadline = time.monotonic() + 10 * shared_stack.options.tick_s + 10

    while shared_stack.ticks_sent == sent and time.monotonic() < deadline:
        time.sleep(0.2)

    stacks = shared_stack.client_env()["PUBSUB_EMULATOR_HOST"]
    assert os.environ.get("PUBSUB_EMULATOR_HOST") != stacks
    assert shared_stack.ticks_sent > sent
