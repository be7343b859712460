"""The spec's ``image``: a container runs a command (the built-in trainers
run in the VM image), and what the container runtime would read as an
option is refused at submission, naming the field."""

from __future__ import annotations

import json

import pytest

from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.spec import parse_spec

BASE = {"user": "alice", "machine_ids": ["g2-standard-4"]}


def spec(**fields: object) -> bytes:
    return json.dumps({**BASE, **fields}).encode()


def test_an_image_runs_the_command() -> None:
    parsed = parse_spec(spec(command=["python", "train.py"], image="pytorch/pytorch:2.3.1"))
    assert parsed.image == "pytorch/pytorch:2.3.1"


def test_an_image_without_a_command_is_refused() -> None:
    with pytest.raises(InvalidMessage, match="image: a container runs a 'command'"):
        parse_spec(spec(trainer="digits_mlp", image="pytorch/pytorch:2.3.1"))


@pytest.mark.parametrize("image", ["--privileged", "my image", "img;rm", ""])
def test_an_image_the_runtime_would_misread_is_refused(image: str) -> None:
    with pytest.raises(InvalidMessage, match="image"):
        parse_spec(spec(command=["python"], image=image))
