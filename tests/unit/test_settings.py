"""Settings: declared once, read from defaults < the CLI's config file < the
environment, written back to an environment (what deploy gives the functions),
and every bad value named in one error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main
from spotline.shared.settings import DEFAULT_ZONES, Settings, SettingsError, load, variables
from spotline.shared.settings_file import config_path, write_config

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
