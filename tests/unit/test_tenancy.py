"""The per-user mode keeps users apart (SECURITY.md, Deploy-side isolation): each
user's VMs run as that user's own account, chosen from the job's user and never
from the spec, on spotline's network; their files lie under the user's folder,
the only one that account may touch; a job may name only its user's secrets."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import admit, start
from spotline.infra.client.submission import pack_folders, pack_targets
from spotline.infra.deploy import iam
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain import tenancy
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.spec import JobSpec
from spotline.shared.settings import Settings
from tests.documents import T0
from tests.local_cloud import client

PROJECT = "acme-ml"
SHARED = f"spotline-vm@{PROJECT}.iam.gserviceaccount.com"
ACCOUNT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")  # IAM's rule for an account id
SPEC = {"machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


@pytest.fixture
def deps(cloud: LocalCloud) -> Iterator[Deps]:
    settings = Settings(
        project=cloud.project,
        zones=("us-central1-a",),
        storage_root="gs://acme-spotline/runs",
        service_account=SHARED,
        user_topics=("alice", "bob"),
    )
    yield Deps(settings, store=InMemoryStore(), compute=client(cloud), clock=lambda: T0)


def submitted(deps: Deps, **fields: Any) -> None:
    spec = JobSpec.model_validate({**SPEC, **fields})
    start(deps, admit(deps, spec, f"m-{fields['job_id']}", T0), T0)


def test_a_user_s_vm_account_id_is_iam_s_shape_stable_and_their_own() -> None:
    users = ["bob", "a1b2c3", "x" * 63, "a-very-long-team-name-1", "a-very-long-team-name-2"]
    ids = [tenancy.vm_account_id(user) for user in users]

    assert all(ACCOUNT_ID.fullmatch(i) for i in ids), ids
    # Two users whose names share what fits are still two accounts.
    assert len(set(ids)) == len(users)
    assert tenancy.vm_account_id("bob") == tenancy.vm_account_id("bob")
    # None is one of spotline's own accounts.
    assert not {i for i in ids} & {a.account_id for a in iam.ACCOUNTS}


def test_each_user_s_vms_run_as_their_own_account_on_spotline_s_network(
    deps: Deps, cloud: LocalCloud
) -> None:
    submitted(deps, user="alice", job_id="a1")
    submitted(deps, user="bob", job_id="b1")
    submitted(deps, user="bob", job_id="b2", nodes=2)

    bodies = [r.body for r in cloud.requests_to("POST", "/instances")]
    bodies += [
        r.body["instanceProperties"] for r in cloud.requests_to("POST", "/instances/bulkInsert")
    ]
    accounts = {b["labels"]["spotline-job"]: b["serviceAccounts"][0]["email"] for b in bodies}
    assert accounts == {
        "a1": tenancy.vm_account_email("alice", cloud.project),
        "b1": tenancy.vm_account_email("bob", cloud.project),
        "b2": tenancy.vm_account_email("bob", cloud.project),
    }
    networks = {i["network"] for b in bodies for i in b["networkInterfaces"]}
    assert networks == {"global/networks/spotline"}


def test_a_spec_cannot_name_the_account_its_vms_run_as(deps: Deps) -> None:
    # The spec has no such field: naming one is refused, not obeyed.
    with pytest.raises(ValueError, match="service_account"):
        JobSpec.model_validate({**SPEC, "user": "bob", "service_account": SHARED})


def test_a_user_s_files_lie_where_only_their_account_may_write(deps: Deps) -> None:
    submitted(deps, user="alice", job_id="a1")
    prefix = deps.settings.job_prefix("a1", "alice")
    config = iam.IamConfig(
        PROJECT, "acme-spotline", "runs", (), "fn@x", SHARED, (("alice", "user:a@x"),)
    )

    assert prefix == "gs://acme-spotline/runs/users/alice/jobs/a1"
    expression = iam.user_condition(config, "alice").expression
    allowed = re.findall(r'resource\.name\.startsWith\("([^"]+)"\)', expression)
    objects = f"projects/_/buckets/{prefix.removeprefix('gs://').replace('/', '/objects/', 1)}"
    assert [a for a in allowed if objects.startswith(a)]
    # The shared-topics mode keeps its layout.
    assert deps.settings.job_prefix("j", "carol") == "gs://acme-spotline/runs/jobs/j"


def test_a_second_user_s_job_cannot_name_the_first_user_s_secret(deps: Deps) -> None:
    alices = "sm://spotline-u-alice_HF_TOKEN"
    submitted(deps, user="alice", job_id="a1", env={"HF_TOKEN": alices})

    for taken in (
        alices,
        f"sm://projects/{PROJECT}/secrets/spotline-u-alice_HF_TOKEN/versions/3",
        "sm://HF_TOKEN",  # a secret of no user
        "sm://projects/other-project/secrets/spotline-u-bob_HF_TOKEN",
    ):
        with pytest.raises(PermanentError, match=r"env\.HF_TOKEN: .* is not one of bob's secrets"):
            submitted(deps, user="bob", job_id="b1", env={"HF_TOKEN": taken})
    assert deps.store.get_job("b1") is None
    submitted(deps, user="bob", job_id="b2", env={"HF_TOKEN": "sm://spotline-u-bob_HF_TOKEN"})
    assert deps.store.get_job("b2") is not None


def test_no_user_s_secret_names_are_within_another_s() -> None:
    # "alice-x" is a user too: a user name holds no "_", so neither prefix holds the other.
    alice, alice_x = tenancy.secret_prefix("alice"), tenancy.secret_prefix("alice-x")
    assert not alice_x.startswith(alice) and not alice.startswith(alice_x)
    assert tenancy.secret_refusals({"T": "sm://spotline-u-alice-x_T"}, "alice", PROJECT)


def test_a_users_uploaded_folders_lie_under_the_users_folder(tmp_path: Path) -> None:
    """`spotline submit --code-dir` in the per-user mode: the folder goes where
    only that user's VMs may read it, not to the shared ``code/``."""
    settings = Settings(storage_root="gs://b/runs", user_topics=("alice",))
    (tmp_path / "train.py").write_text("print('hello')\n")
    packs = pack_folders({"code_uri": tmp_path}, 500)

    alice = pack_targets(settings, packs, "alice")["code_uri"]
    shared = pack_targets(settings, packs, "carol")["code_uri"]

    assert alice.startswith("gs://b/runs/users/alice/code/") and alice.endswith("/files")
    assert shared.startswith("gs://b/runs/code/")
    config = iam.IamConfig("p", "b", "runs", (), "fn@p", "vm@p", (("alice", "user:a@x"),))
    assert alice.removeprefix("gs://b/").startswith(config.user_objects("alice"))
