"""``spotline deploy`` and ``spotline destroy`` on the command line, every API
they call pointed at the test module's ``cloud`` (a ``CloudDouble``): fixture
``deploy_cli``."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest

from spotline.infra.cli.commands import main
from spotline.infra.deploy.deployer import Endpoints
from tests.cloud_double import CloudDouble

REGION = "us-central1"
STORAGE_ROOT = "gs://acme-spotline/runs"


def point_at(cloud: CloudDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every API the CLI calls, at the double."""
    for api in fields(Endpoints):
        monkeypatch.setenv(f"SPOTLINE_{api.name.upper()}_ENDPOINT", cloud.endpoint)


def cli_args(project: str) -> list[str]:
    """``spotline deploy`` with the target flags: ``project``, the region, the storage root."""
    return ["deploy", "--project", project, "--region", REGION, "--storage-root", STORAGE_ROOT]


@dataclass(frozen=True)
class DeployCli:
    project: str

    def deploy(self, *flags: str) -> int:
        """``spotline deploy`` of the project, with ``flags``; its exit code."""
        return main([*cli_args(self.project), *flags])

    def destroy(self, *flags: str) -> int:
        """``spotline destroy`` of the project, with ``flags``; its exit code."""
        return main(["destroy", *cli_args(self.project)[1:], *flags])


@pytest.fixture
def deploy_cli(cloud: CloudDouble, project: str, monkeypatch: pytest.MonkeyPatch) -> DeployCli:
    point_at(cloud, monkeypatch)
    return DeployCli(project)
