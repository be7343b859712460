"""Which system the Python API talks to when a notebook asks for one stack,
then another, or the same stack again after it was restarted on new ports.

The first connect puts its stack's variables into the process's environment
(the Google clients read them there); a later one must not take them for
variables the user set, or a notebook talks to a stopped stack for ever.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.infra.client.connection import connect
from spotline.infra.localstack.stack import STACK_FILE

STACK_VARIABLES = ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "SPOTLINE_PROJECT")


def write_stack(folder: Path, project: str, port: int) -> Path:
    """A ``spotline up`` folder as a running stack leaves it (no server needed:
    connecting reads the file and makes no request)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{port}",
        "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{port + 1}",
        "SPOTLINE_PROJECT": project,
        "GOOGLE_CLOUD_PROJECT": project,
        "SPOTLINE_COMPUTE_ENDPOINT": f"http://127.0.0.1:{port + 2}",
    }
    (folder / STACK_FILE).write_text(json.dumps({"env": env}))
    return folder


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (*STACK_VARIABLES, "GOOGLE_CLOUD_PROJECT", "SPOTLINE_COMPUTE_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_a_second_stack_is_the_one_asked_for(tmp_path: Path) -> None:
    first = write_stack(tmp_path / "a", "project-a", 9100)
    second = write_stack(tmp_path / "b", "project-b", 9200)

    assert connect(first).settings.project == "project-a"
    assert connect(second).settings.project == "project-b"
    assert os.environ["FIRESTORE_EMULATOR_HOST"] == "127.0.0.1:9200"


def test_a_restarted_stack_is_found_on_its_new_ports(tmp_path: Path) -> None:
    folder = write_stack(tmp_path / "stack", "project-a", 9100)
    connect(folder)
    write_stack(folder, "project-a", 9300)  # `spotline up` again

    connect(folder)

    assert os.environ["FIRESTORE_EMULATOR_HOST"] == "127.0.0.1:9300"


def test_variables_the_user_set_still_come_first(tmp_path: Path) -> None:
    folder = write_stack(tmp_path / "stack", "project-a", 9100)
    os.environ["FIRESTORE_EMULATOR_HOST"] = "127.0.0.1:9999"
    os.environ["SPOTLINE_PROJECT"] = "mine"

    assert connect(folder).settings.project == "mine"
    assert os.environ["FIRESTORE_EMULATOR_HOST"] == "127.0.0.1:9999"
