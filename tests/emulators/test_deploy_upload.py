"""``spotline submit --code-dir`` after ``spotline deploy``: the folder goes to
the deployed storage root (the bucket ``deploy`` made, read back from the
CLI's config), by the address of its content, and the message published on
the deployed topic names it. The APIs are the local doubles, storage the
emulator (with the deployment's bucket in it, as ``deploy`` left it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from google.cloud.pubsub_v1 import SubscriberClient

from spotline.infra.cli.commands import main
from spotline.infra.localstack.emulators import Emulator
from spotline.infra.localstack.storage import StorageEmulator, reload_fsspec_config
from tests.cloud_double import CloudDouble
from tests.deploy_cli import REGION, DeployCli

pytestmark = pytest.mark.emulators


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def test_a_folder_is_uploaded_to_the_deployed_bucket_once(
    cloud: CloudDouble,
    project: str,
    storage_emulator: StorageEmulator,
    tmp_path: Path,
    deploy_cli: DeployCli,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert deploy_cli.deploy() == 0  # storage root gs://acme-spotline/runs
    assert "acme-spotline" in cloud.project_apis.buckets
    for name, value in storage_emulator.client_env().items():
        monkeypatch.setenv(name, value)
    reload_fsspec_config()
    fs = fsspec.filesystem("gs")
    fs.mkdir("acme-spotline", exist_ok=True)  # the bucket deploy made, in the emulator
    subscriber = SubscriberClient()
    subscription = subscriber.subscription_path(project, "sent")
    topic = f"projects/{project}/topics/spotline-submit"
    subscriber.create_subscription(name=subscription, topic=topic)
    code = tmp_path / "src"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "requirements.txt").write_text("--no-index\n")
    spec = {"user": "ada", "machine_ids": ["g2-standard-4"], "command": ["python", "train.py"]}
    (tmp_path / "job.json").write_text(json.dumps(spec))
    capsys.readouterr()

    assert main(["submit", str(tmp_path / "job.json"), "--code-dir", str(code)]) == 0

    out = capsys.readouterr().out
    uri = re.search(r"to (gs://acme-spotline/runs/code/[0-9a-f]{64}/files)\n", out)
    assert uri is not None, out
    fs.invalidate_cache()
    assert fs.cat(f"{uri[1]}/train.py") == b"print('hi')\n"
    assert fs.exists(f"{uri[1].removesuffix('/files')}/manifest.json")
    pulled = subscriber.pull(subscription=subscription, max_messages=5, timeout=30)
    [message] = [json.loads(m.message.data) for m in pulled.received_messages]
    assert message["code_uri"] == uri[1] and "code_dir" not in message

    assert main(["submit", str(tmp_path / "job.json"), "--code-dir", str(code)]) == 0
    assert f"{code} is unchanged since uploaded to {uri[1]}" in capsys.readouterr().out
