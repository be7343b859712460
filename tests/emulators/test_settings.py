"""Settings: declared once, read from defaults < the CLI's config file < the
environment, written back to an environment (what deploy gives the functions),
and every bad value named in one error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from spotline.functions import deps
from spotline.infra.cli.commands import main
from spotline.infra.cli.exit_codes import Exit
from spotline.infra.localstack.emulators import Emulator
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import CancelRequest
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.settings import DEFAULT_ZONES, Settings, SettingsError, load, variables
from spotline.shared.settings_file import config_path, write_config
from tests.conftest import SPEC

REPO = Path(__file__).resolve().parents[2]


def test_settings_survive_a_round_trip_through_the_environment() -> None:
    settings = Settings(
        project="p-1",
        region="europe-west4",
        zones=("europe-west4-a", "europe-west4-c"),
        compute_endpoint="http://127.0.0.1:9",
        storage_root="gs://bucket/spotline",
        image="projects/p-1/global/images/family/spotline-agent",
        service_account="vm@p-1.iam.gserviceaccount.com",
        heartbeat_s=12.5,
        max_event_age_s=1800.0,
        stall_timeout_s=240.0,
        boot_timeout_s=420.0,
        request_timeout_s=90.0,
        max_active_jobs=3,
        cooling_baseline_min=5,
        cooling_unit=0.02,
        max_active_instances=7,
        max_stopped_instances=2,
    )

    assert Settings.from_env(settings.to_env()) == settings
    assert Settings.from_env(Settings().to_env()) == Settings()


def a_value(name: str) -> tuple[str, object]:
    """A valid value of setting ``name`` other than its default: (text, value)."""
    default = Settings.model_fields[name].default
    if name == "zones":
        return " zone-x , zone-y", ("zone-x", "zone-y")
    if name == "user_topics":
        return "bob, alice", ("alice", "bob")
    if name == "webhook_allowed_networks":
        return "127.0.0.0/8, 10.0.0.0/8", ("127.0.0.0/8", "10.0.0.0/8")
    if isinstance(default, bool) or default is None or isinstance(default, str):
        return f"{name}-value", f"{name}-value"
    if isinstance(default, int):
        return str(default + 1), default + 1
    assert isinstance(default, float)
    value = default / 2 if name == "cooling_unit" else default + 1.5
    return repr(value), value


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_read_from_its_variable_and_written_back(name: str) -> None:
    text, value = a_value(name)
    [variable, *_] = variables(name)

    settings = Settings.from_env({variable: text})

    assert getattr(settings, name) == value
    canonical = {
        "zones": "zone-x,zone-y",
        "user_topics": "alice,bob",
        "webhook_allowed_networks": "127.0.0.0/8,10.0.0.0/8",
    }
    written = canonical.get(name, text)
    assert settings.to_env()[variable] == written


def test_every_setting_has_a_variable_and_a_description() -> None:
    for name, field in Settings.model_fields.items():
        assert variables(name)[0] == f"SPOTLINE_{name.upper()}"
        assert field.description, name


def test_the_project_is_also_read_from_google_cloud_project() -> None:
    assert Settings.from_env({"GOOGLE_CLOUD_PROJECT": "g"}).project == "g"
    both = {"GOOGLE_CLOUD_PROJECT": "g", "SPOTLINE_PROJECT": "s"}
    assert Settings.from_env(both).project == "s"


def test_zones_and_image_default_from_the_region_and_project() -> None:
    settings = Settings.from_env({"SPOTLINE_REGION": "us-east1", "SPOTLINE_PROJECT": "acme"})

    assert settings.zones == DEFAULT_ZONES["us-east1"]
    assert settings.image == "projects/acme/global/images/family/spotline-agent"
    assert Settings.from_env({"SPOTLINE_ZONES": ""}).zones == DEFAULT_ZONES["us-central1"]
    assert Settings.from_env({"SPOTLINE_REGION": "asia-south2"}).zones == ()


def test_every_bad_value_is_named_at_once_with_what_it_should_be() -> None:
    env = {
        "SPOTLINE_HEARTBEAT_S": "soon",
        "SPOTLINE_MAX_EVENT_AGE_S": "0",
        "SPOTLINE_MAX_ACTIVE_JOBS": "-1",
        "SPOTLINE_MAX_STOPPED_INSTANCES": "-2",
        "SPOTLINE_STALL_TIMEOUT_S": "-30",
        "SPOTLINE_COOLING_UNIT": "1.5",
        "SPOTLINE_MAX_ACTIVE_INSTANCES": "2.5",
        "SPOTLINE_BOOT_TIMEOUT_S": "-1",
        "SPOTLINE_REGION": "us-east1",  # a good one, not named
    }

    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)

    message = str(raised.value)
    assert message.startswith("spotline: 8 bad settings:")
    assert len(raised.value.problems) == 8
    for expected in (
        "SPOTLINE_HEARTBEAT_S='soon': expected a number",
        "SPOTLINE_MAX_EVENT_AGE_S='0': expected a number greater than 0",
        "SPOTLINE_MAX_ACTIVE_JOBS='-1': expected a number of at least 1",
        "SPOTLINE_MAX_STOPPED_INSTANCES='-2': expected a number of at least 0",
        "SPOTLINE_STALL_TIMEOUT_S='-30': expected a number of at least 0",
        "SPOTLINE_COOLING_UNIT='1.5': expected a number of at most 1",
        "SPOTLINE_MAX_ACTIVE_INSTANCES='2.5': expected a whole number",
        "SPOTLINE_BOOT_TIMEOUT_S='-1': expected a number of at least 0",
    ):
        assert expected in message
    assert "REGION" not in message


def test_keyword_construction_and_replace_validate_too() -> None:
    with pytest.raises(SettingsError, match="max_active_jobs=0: expected a number of at least 1"):
        Settings(project="p").replace(max_active_jobs=0)

    moved = Settings(project="p").replace(region="us-east1", project="q")
    assert moved.zones == DEFAULT_ZONES["us-east1"]
    assert moved.image == "projects/q/global/images/family/spotline-agent"
    chosen = Settings(project="p", zones=("us-central1-b",), image="global/images/mine")
    kept = chosen.replace(project="q", region="us-east1")
    assert (kept.zones, kept.image) == (("us-central1-b",), "global/images/mine")


# -- the config file ------------------------------------------------------------


def test_the_config_file_is_found_where_the_environment_says(tmp_path: Path) -> None:
    assert config_path({"SPOTLINE_CONFIG": str(tmp_path / "c.json")}) == tmp_path / "c.json"
    xdg = {"XDG_CONFIG_HOME": str(tmp_path), "HOME": "/nowhere"}
    assert config_path(xdg) == tmp_path / "spotline" / "config.json"
    home = Path("/home/ada/.config/spotline/config.json")
    assert config_path({"HOME": "/home/ada"}) == home
    assert config_path({}) is None


def test_the_environment_wins_over_the_config_file_over_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    write_config(path, {"project": "deployed", "region": "us-east1", "storage_root": "gs://b/r"})
    env = {"SPOTLINE_CONFIG": str(path), "SPOTLINE_STORAGE_ROOT": "gs://other/r"}

    loaded = load(env)

    assert loaded.settings.project == "deployed"
    assert loaded.settings.zones == DEFAULT_ZONES["us-east1"]  # the config's region's
    assert loaded.settings.storage_root == "gs://other/r"
    assert loaded.origins["project"] == "config"
    assert loaded.origins["storage_root"] == "env"
    assert loaded.origins["heartbeat_s"] == "default"
    assert loaded.config_path == path
    # The functions read no config file: deploy gave them every variable.
    assert Settings.from_env(env, config_file=False).project == "spotline-local"


def test_zones_written_for_another_region_do_not_carry_over(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    write_config(path, {"region": "us-east1", "zones": ["us-east1-c"]})

    kept = Settings.from_env({"SPOTLINE_CONFIG": str(path), "SPOTLINE_REGION": "us-east1"})
    moved = Settings.from_env({"SPOTLINE_CONFIG": str(path), "SPOTLINE_REGION": "europe-west4"})

    assert kept.zones == ("us-east1-c",)
    assert moved.zones == DEFAULT_ZONES["europe-west4"]


def test_bad_values_in_the_config_file_are_named_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    write_config(path, {"project": "p", "max_active_jobs": "lots", "colour": "blue"})

    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"SPOTLINE_CONFIG": str(path), "SPOTLINE_HEARTBEAT_S": "-5"})

    message = str(raised.value)
    assert f"max_active_jobs='lots' in {path}: expected a whole number" in message
    assert f"colour='blue' in {path}: not a setting" in message
    assert "SPOTLINE_HEARTBEAT_S='-5'" in message


def test_a_config_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("project = 'p'\n")

    with pytest.raises(SettingsError, match=f"{path}: not a readable JSON object"):
        Settings.from_env({"SPOTLINE_CONFIG": str(path)})


# -- the command line -----------------------------------------------------------


def test_spotline_settings_prints_each_setting_and_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("SPOTLINE_") or "EMULATOR" in n]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    path = config_path(os.environ)
    assert path is not None and str(path).startswith(os.environ["XDG_CONFIG_HOME"])
    write_config(path, {"project": "acme-ml", "region": "us-east1"})
    monkeypatch.setenv("SPOTLINE_MAX_ACTIVE_JOBS", "3")

    assert main(["--workdir", str(tmp_path), "settings"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"settings from the config file {path}, under the environment"
    assert lines[1].split() == ["SETTING", "VARIABLE", "VALUE", "FROM", "DESCRIPTION"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == set(Settings.model_fields)
    assert rows["project"][1:4] == ["SPOTLINE_PROJECT", "acme-ml", "config"]
    assert rows["zones"][1:4] == ["SPOTLINE_ZONES", ",".join(DEFAULT_ZONES["us-east1"]), "default"]
    assert rows["max_active_jobs"][1:4] == ["SPOTLINE_MAX_ACTIVE_JOBS", "3", "env"]
    assert " ".join(rows["heartbeat_s"][4:]) == "seconds between a VM's heartbeats"


def test_spotline_settings_json_has_every_setting_and_its_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("SPOTLINE_") or "EMULATOR" in n]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SPOTLINE_MAX_ACTIVE_JOBS", "3")

    assert main(["--workdir", str(tmp_path), "settings", "--json"]) == 0

    shown = json.loads(capsys.readouterr().out)
    rows = {row["setting"]: row for row in shown["settings"]}
    assert set(rows) == set(Settings.model_fields)
    assert rows["max_active_jobs"] | {"description": ""} == {
        "setting": "max_active_jobs",
        "variable": "SPOTLINE_MAX_ACTIVE_JOBS",
        "value": "3",
        "from": "env",
        "description": "",
    }
    assert shown["source"].startswith("the defaults and the environment")


def test_a_bad_setting_ends_the_cli_with_status_2_and_no_traceback(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9",  # never reached: the settings fail first
        "SPOTLINE_MAX_ACTIVE_JOBS": "-1",
        "SPOTLINE_HEARTBEAT_S": "often",
    }
    done = subprocess.run(
        [sys.executable, "-m", "spotline.infra.cli.commands", "--workdir", str(tmp_path), "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "SPOTLINE_MAX_ACTIVE_JOBS='-1'" in done.stderr
    assert "SPOTLINE_HEARTBEAT_S='often'" in done.stderr


@pytest.fixture
def deployed_only(
    emulators: tuple[Emulator, Emulator], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Path:
    """A shell after `spotline deploy`: a config file, no SPOTLINE_ variable, no
    local stack; the Pub/Sub client pointed at the emulator in place of Google."""
    for name in [n for n in os.environ if n.startswith("SPOTLINE_") or "EMULATOR" in n]:
        if name != "SPOTLINE_CONFIG":
            monkeypatch.delenv(name)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulators[1].host)
    path = config_path(os.environ)
    assert path is not None
    return path


def cancel_subscription(project: str) -> str:
    topic = f"projects/{project}/topics/spotline-cancel"
    PublisherClient().create_topic(name=topic)
    subscription = f"projects/{project}/subscriptions/cancels"
    SubscriberClient().create_subscription(name=subscription, topic=topic)
    return subscription


def pulled_cancels(subscription: str) -> list[CancelRequest]:
    response = SubscriberClient().pull(subscription=subscription, max_messages=10, timeout=10)
    return [CancelRequest.model_validate_json(m.message.data) for m in response.received_messages]


def a_running_job(project: str, job_id: str, firestore_host: str) -> None:
    """A job of ``project`` that has not ended, in the emulator at ``firestore_host``
    (what `status` lists and `cancel` looks up first)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FIRESTORE_EMULATOR_HOST", firestore_host)
        spec = JobSpec(user="ada", machine_ids=["g2-standard-4"], trainer="digits_mlp")
        FirestoreStore(project).create_job(new_job(spec, job_id, "m1", datetime.now(UTC)))


def test_cancel_publishes_to_the_deployed_project_from_the_config_file(
    deployed_only: Path,
    emulators: tuple[Emulator, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = f"acme-{uuid.uuid4().hex[:8]}"
    write_config(deployed_only, {"project": project, "region": "us-east1"})
    subscription = cancel_subscription(project)
    a_running_job(project, "job-7", emulators[0].host)
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulators[0].host)

    assert main(["--workdir", str(tmp_path / "no-stack"), "cancel", "job-7"]) == 0

    assert "cancel of job-7 published" in capsys.readouterr().out
    [request] = pulled_cancels(subscription)
    assert request.job_id == "job-7"


def test_a_local_stack_in_the_workdir_wins_over_the_config_file(
    deployed_only: Path, emulators: tuple[Emulator, Emulator], tmp_path: Path
) -> None:
    project, local_project = f"acme-{uuid.uuid4().hex[:8]}", f"local-{uuid.uuid4().hex[:8]}"
    write_config(deployed_only, {"project": project, "region": "us-east1"})
    deployed, local = cancel_subscription(project), cancel_subscription(local_project)
    a_running_job(local_project, "job-8", emulators[0].host)
    # What a running `spotline up` leaves in its workdir (LocalStack._write_stack_file).
    stack = {
        "SPOTLINE_PROJECT": local_project,
        "PUBSUB_EMULATOR_HOST": os.environ["PUBSUB_EMULATOR_HOST"],
        "FIRESTORE_EMULATOR_HOST": emulators[0].host,
    }
    (tmp_path / "stack.json").write_text(json.dumps({"env": stack, "workdir": str(tmp_path)}))

    assert main(["--workdir", str(tmp_path), "cancel", "job-8"]) == 0

    assert [r.job_id for r in pulled_cancels(local)] == ["job-8"]
    assert pulled_cancels(deployed) == []


def test_status_lists_the_jobs_of_the_deployed_project(
    deployed_only: Path,
    emulators: tuple[Emulator, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = f"acme-{uuid.uuid4().hex[:8]}"
    write_config(deployed_only, {"project": project, "region": "us-east1"})
    a_running_job(project, "job-of-ada", emulators[0].host)
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulators[0].host)

    assert main(["--workdir", str(tmp_path), "status"]) == 0

    assert "job-of-ada" in capsys.readouterr().out


def test_a_function_with_a_bad_setting_logs_every_bad_one_and_asks_for_redelivery(
    call: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SPOTLINE_MAX_EVENT_AGE_S", "an hour")
    monkeypatch.setenv("SPOTLINE_MAX_ACTIVE_JOBS", "0")
    deps.reset()
    try:
        assert call("submit_job", "submit", SPEC).status_code == 500
    finally:
        deps.reset()

    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line[:1] == "{"]
    [error] = [r for r in records if r.get("severity") == "ERROR" and "problems" in r]
    assert error["message"].startswith("spotline: 2 bad settings:")
    assert any("SPOTLINE_MAX_EVENT_AGE_S='an hour'" in p for p in error["problems"])
    assert any("SPOTLINE_MAX_ACTIVE_JOBS='0'" in p for p in error["problems"])


def test_with_no_stack_and_no_config_the_cli_says_what_to_run(
    deployed_only: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not deployed_only.exists()

    assert main(["--workdir", str(tmp_path), "status"]) == Exit.NOT_CONNECTED
    assert "run `spotline up`, or `spotline deploy`" in capsys.readouterr().err
