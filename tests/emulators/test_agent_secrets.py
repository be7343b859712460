"""Secret Manager references in a job's env, resolved by the real agent on
its VM, against a local double of Secret Manager's REST route: the trainer
gets the value; no log line, event or error carries it; a secret that cannot
be read fails the job, naming the secret and not a value."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from spotline.infra.localcloud.metadata_server import access_token
from tests.emulators.test_agent_failures import Topics
from tests.secret_manager_double import SecretManagerDouble
from tests.vm_agent import Vm, next_finished

pytestmark = pytest.mark.emulators
VALUE = "hf_s3cr3tVALUEnobodyMayRead"
# Checks what it got, then prints it: the agent must mask it in what it relays.
TRAINER = """
if [ "$HF_TOKEN" = "$EXPECTED_PREFIX""VALUEnobodyMayRead" ]; then echo match; else echo mismatch; fi
echo "the token is $HF_TOKEN, the other $DB_PASSWORD"
"""


@pytest.fixture
def secret_manager(vm: Vm) -> Iterator[SecretManagerDouble]:
    double = SecretManagerDouble(
        access_token(vm.identity),
        {
            f"projects/{vm.project}/secrets/hf-token/versions/latest": VALUE.encode(),
            "projects/other-proj/secrets/db/versions/3": b"db-pass-XYZ123",
        },
    )
    yield double
    double.close()


def test_the_trainer_gets_the_secret_and_nothing_else_does(
    vm: Vm, agent_topics: Topics, secret_manager: SecretManagerDouble
) -> None:
    env = {
        "HF_TOKEN": "sm://hf-token",
        "DB_PASSWORD": "sm://projects/other-proj/secrets/db/versions/3",
        "EXPECTED_PREFIX": "hf_s3cr3t",
    }
    agent = vm.boot(
        vm.assignment("j1", ["/bin/sh", "-c", TRAINER], env=env),
        SPOTLINE_SECRETMANAGER_ENDPOINT=secret_manager.endpoint,
    )

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = next_finished(agent_topics)
    assert event.exit_code == 0 and event.log_tail == "match\nthe token is ***, the other ***\n"
    token = f"Bearer {access_token(vm.identity)}"
    assert sorted(secret_manager.requests) == [
        ("/v1/projects/other-proj/secrets/db/versions/3:access", token),
        (f"/v1/projects/{vm.project}/secrets/hf-token/versions/latest:access", token),
    ]
    said = agent.log.read_text(errors="replace")
    assert "the token is ***, the other ***" in said
    trainer_log = (vm.workdir / "jobs" / "j1-a1" / "code" / "trainer.log").read_text()
    everything = said + trainer_log + json.dumps(event.model_dump(mode="json"))
    assert VALUE not in everything and "db-pass-XYZ123" not in everything


@pytest.mark.parametrize(
    ("reference", "token", "why"),
    [
        ("sm://missing", None, "HTTP 404 (no such secret or version)"),
        ("sm://hf-token", "wrong", "HTTP 401 (the VM's service account needs"),
    ],
)
def test_a_secret_that_cannot_be_read_fails_the_job_naming_it(
    vm: Vm,
    agent_topics: Topics,
    secret_manager: SecretManagerDouble,
    reference: str,
    token: str | None,
    why: str,
) -> None:
    secret_manager.token = token or secret_manager.token
    marker = vm.tmp_path / "ran"
    agent = vm.boot(
        vm.assignment("j1", ["/bin/sh", "-c", f"touch {marker}"], env={"HF_TOKEN": reference}),
        SPOTLINE_SECRETMANAGER_ENDPOINT=secret_manager.endpoint,
    )

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = next_finished(agent_topics)
    name = reference.removeprefix("sm://")
    assert event.exit_code == 126 and not marker.exists()
    assert (
        f"env HF_TOKEN: cannot read the secret projects/{vm.project}/secrets/{name}"
        "/versions/latest: " + why
    ) in event.log_tail
    assert VALUE not in event.log_tail
