"""A failed ``pip install`` of a job's requirements, as pip really fails: a
requirement no index has is the requirements' fault, and no new VM can fix it
(the job fails on its first VM); an index that cannot be reached may be
reachable from the next one (the failure policy decides). No internet: the
index is ``--no-index`` or a port nothing listens on."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from spotline.vm_image.agent.job_env import InstallFailed, prepare_env
from spotline.vm_image.agent.privileges import trainer_account

pytestmark = pytest.mark.slow


def install(tmp_path: Path, requirements: str, **env: str) -> InstallFailed:
    (tmp_path / "requirements.txt").write_text(requirements)
    account = trainer_account({"SPOTLINE_TRAINER_USER": ""})
    with pytest.raises(InstallFailed) as failed:
        prepare_env(
            tmp_path / "requirements.txt", tmp_path / "cache", account, {**os.environ, **env}
        )
    return failed.value


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_requirement_no_index_has_cannot_be_installed_on_any_vm(tmp_path: Path) -> None:
    failed = install(tmp_path, "--no-index\nno-such-package-spotline==1.0\n")

    assert failed.unrecoverable
    assert "No matching distribution found for no-such-package-spotline==1.0" in str(failed)


def test_conflicting_pins_cannot_be_installed_on_any_vm(tmp_path: Path) -> None:
    failed = install(tmp_path, "--no-index\nspotline-a==1.0\nspotline-a==2.0\n")

    assert failed.unrecoverable, str(failed)


def test_an_index_out_of_reach_is_left_to_the_failure_policy(tmp_path: Path) -> None:
    index = f"http://127.0.0.1:{closed_port()}/simple"
    # pip says no version was found too; its warnings on retrying say why.
    failed = install(
        tmp_path, f"--index-url {index}\nsomething==1.0\n", PIP_RETRIES="1", PIP_TIMEOUT="2"
    )

    assert not failed.unrecoverable, str(failed)
    assert "pip install -r requirements.txt failed" in str(failed)
