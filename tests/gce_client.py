"""The real google-cloud-compute client against the wire-recording double."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials

from shared.adapters.gce_compute import GceCompute
from tests.compute_double import ComputeDouble


@pytest.fixture
def double() -> Iterator[ComputeDouble]:
    with ComputeDouble(project="spotline-test") as running:
        yield running


def client(double: ComputeDouble, operation_timeout_s: float = 5.0) -> GceCompute:
    return GceCompute(
        double.project,
        api_endpoint=double.endpoint,
        credentials=AnonymousCredentials(),
        operation_timeout_s=operation_timeout_s,
        read_retry_s=1.0,
    )


@pytest.fixture
def compute(double: ComputeDouble) -> GceCompute:
    return client(double)
