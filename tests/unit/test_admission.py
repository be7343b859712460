"""What the deployment refuses at submission (spotline.shared.domain.admission): pure."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.shared.domain.admission import in_region, refusals
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.spec import JobSpec

BASE: dict[str, Any] = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


def problems(**fields: Any) -> list[str]:
    return refusals(JobSpec.model_validate({**BASE, **fields}), load_catalog(), "us-central1")


def test_a_job_the_deployment_can_run_has_no_refusal() -> None:
    assert (
        problems(machine_ids=["g2-standard-4", "a2-highgpu-1g.od"], zones=["us-central1-f"]) == []
    )
    assert problems(job_id="job-7") == [] and problems() == []


def test_every_refusal_is_named() -> None:
    found = problems(
        machine_ids=["g2-standard-4", "tpu-v9", "tpu-v9.od"],
        zones=["us-central1-a", "us-east1-b"],
        job_id="jdeadbeef0042",
    )
    assert [line.split(":")[0] for line in found] == [
        "machine_ids",
        "machine_ids",
        "zones",
        "job_id",
    ]
    assert "'tpu-v9.od' is not in the catalog (a2-highgpu-1g, " in found[1]


@pytest.mark.parametrize(
    ("zone", "inside"),
    [
        ("us-central1-a", True),
        ("us-central1-ai1a", True),
        ("us-central1", False),
        ("us-central1-", False),
        ("us-central12-a", False),
        ("us-east1-b", False),
        ("europe-west4-a", False),
    ],
)
def test_a_zone_is_in_a_region_by_its_name(zone: str, inside: bool) -> None:
    assert in_region(zone, "us-central1") is inside
