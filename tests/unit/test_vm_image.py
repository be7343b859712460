"""The VM image: the Packer template validates, the scripts parse, the
service gives the trainer the preemption notice to save its state."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from spotline.shared.domain.spec import BUILTIN_TRAINERS

IMAGE = Path(__file__).resolve().parents[2] / "vm_image"
PACKER = shutil.which("packer")
needs_packer = pytest.mark.skipif(PACKER is None, reason="packer is not installed")
if PACKER is None:
    print("\n!!! packer is not installed: the image template is NOT validated !!!", file=sys.stderr)


def packer(*args: str) -> subprocess.CompletedProcess[str]:
    assert PACKER is not None
    return subprocess.run([PACKER, *args], capture_output=True, text=True, cwd=IMAGE)


@needs_packer
@pytest.mark.parametrize("machine_type", ["g2-standard-4", "n1-standard-8"])
def test_the_template_validates(machine_type: str, tmp_path: Path) -> None:
    wheel = tmp_path / "spotline-0.1.0-py3-none-any.whl"  # the file provisioner checks it exists
    wheel.write_bytes(b"")
    result = packer(
        "validate", "-var", "project_id=my-project", "-var", f"spotline_wheel={wheel}",
        "-var", f"machine_type={machine_type}", "spotline.pkr.hcl",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@needs_packer
def test_a_missing_variable_is_named() -> None:
    result = packer("validate", "-var", "spotline_wheel=/tmp/x.whl", "spotline.pkr.hcl")
    assert result.returncode != 0
    assert 'Unset variable "project_id"' in result.stdout + result.stderr


@needs_packer
def test_the_template_is_formatted() -> None:
    result = packer("fmt", "-check", ".")
    assert result.returncode == 0, f"run `packer fmt vm_image`: {result.stdout}"


@pytest.mark.parametrize(
    "script", ["scripts/install.sh", "scripts/startup.sh", "scripts/shutdown.sh", "build_image.sh"]
)
def test_the_scripts_parse(script: str) -> None:
    shell = "sh" if script == "build_image.sh" else "bash"
    result = subprocess.run([shell, "-n", str(IMAGE / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# The extra each built-in trainer's framework comes in on a GPU VM (pyproject.toml).
TRAINER_EXTRAS = {
    "digits_mlp": "torch",
    "keras_ffnn": "tensorflow-cuda",
    "keras_model": "tensorflow-cuda",
}


def test_the_image_installs_what_every_built_in_trainer_needs() -> None:
    assert set(TRAINER_EXTRAS) == set(BUILTIN_TRAINERS), "name the new trainer's extra here"
    pyproject = tomllib.loads((IMAGE.parent / "pyproject.toml").read_text())
    assert set(TRAINER_EXTRAS.values()) <= set(pyproject["project"]["optional-dependencies"])
    install = (IMAGE / "scripts" / "install.sh").read_text()
    wheel = re.search(r'pip install "\$\(ls /tmp/spotline-\*\.whl\)\[([\w,-]+)\]"', install)
    assert wheel, "install.sh installs the spotline wheel with its extras"
    assert set(TRAINER_EXTRAS.values()) <= set(wheel.group(1).split(","))


def test_the_agent_venv_has_the_python_spotline_requires() -> None:
    pyproject = tomllib.loads((IMAGE.parent / "pyproject.toml").read_text())
    required = re.fullmatch(r">=\s*(3\.\d+)", pyproject["project"]["requires-python"])
    assert required, "requires-python is a lower bound"
    install = (IMAGE / "scripts" / "install.sh").read_text()
    assert f"python{required.group(1)} -m venv /opt/spotline/venv" in install


def test_the_service_leaves_the_notice_to_the_trainer() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(IMAGE / "systemd" / "spotline-agent.service")
    service = unit["Service"]
    assert service["ExecStart"] == "/opt/spotline/venv/bin/python -m spotline.vm_image.agent"
    assert service["KillMode"] == "control-group"  # SIGTERM to agent and trainer alike
    assert int(service["TimeoutStopSec"]) < 30  # inside the Spot notice
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    # A failed agent (exit 1: job finished could not be published) stops the VM.
    assert unit["Unit"]["FailureAction"] == "poweroff" and service["Restart"] == "no"


def test_plugins_are_pinned() -> None:
    versions = (IMAGE / "versions.pkr.hcl").read_text()
    assert 'version = "= ' in versions and "github.com/hashicorp/googlecompute" in versions


def test_the_image_runs_the_trainer_as_an_unprivileged_account() -> None:
    from spotline.vm_image.agent.privileges import DEFAULT_TRAINER_USER, TRAINER_USER_ENV

    install = (IMAGE / "scripts" / "install.sh").read_text()
    useradd = re.search(r"useradd (.*?) spotline-trainer\n", install.replace("\\\n", " "))
    assert useradd, "install.sh creates the trainer's account"
    assert "--system" in useradd.group(1) and "--shell /usr/sbin/nologin" in useradd.group(1)
    assert "usermod --append --groups video,render spotline-trainer" in install  # the GPUs
    assert "runuser -u spotline-trainer -- nvidia-smi" in install
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(IMAGE / "systemd" / "spotline-agent.service")
    service = unit["Service"]
    assert f"{TRAINER_USER_ENV}={DEFAULT_TRAINER_USER}" in service["Environment"]
    assert service["NoNewPrivileges"] == "yes"
    kept = set(service["CapabilityBoundingSet"].split())
    assert {"CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL"} <= kept
    assert not kept & {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_MODULE"}


def test_the_agents_lines_reach_cloud_logging_as_the_queries_expect() -> None:
    """The unit writes the agent's output where the Ops Agent reads it, the Ops
    Agent parses it as JSON, and a line the agent writes carries every
    jsonPayload field an attempt's query names."""
    import contextlib
    import io
    import json

    import yaml

    from spotline.shared import logs
    from spotline.shared.domain.lifecycle import logs_query

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(IMAGE / "systemd" / "spotline-agent.service")
    written_to = unit["Service"]["StandardOutput"].removeprefix("append:")
    config = yaml.safe_load((IMAGE / "ops-agent" / "config.yaml").read_text())["logging"]
    [pipeline] = config["service"]["pipelines"].values()
    [receiver] = pipeline["receivers"]
    assert config["receivers"][receiver]["include_paths"] == [written_to]
    processors = [config["processors"][name] for name in pipeline["processors"]]
    assert processors[0]["type"] == "parse_json"  # first: later ones read its fields
    moved = processors[1]["fields"]["severity"]["move_from"]

    out = io.StringIO()
    logs.labelled(job_id="j1", attempt=2, node=1)
    try:
        with contextlib.redirect_stdout(out):
            logs.info("epoch 1/3", stream="trainer")
    finally:
        logs.labelled()
    line = json.loads(out.getvalue())
    queried = re.findall(r"jsonPayload\.(\w+)", logs_query(["7"], "j1", 2))
    assert queried and all(field in line for field in queried)
    assert (line["job_id"], line["attempt"], line["node"]) == ("j1", 2, 1)
    assert line[moved.removeprefix("jsonPayload.")] == "INFO"

    install = (IMAGE / "scripts" / "install.sh").read_text()
    assert "--also-install --version=2.*.*" in install
    assert "/tmp/spotline-ops-agent/config.yaml /etc/google-cloud-ops-agent/config.yaml" in install
    assert f"install -d -m 0755 {Path(written_to).parent}" in install
    template = (IMAGE / "spotline.pkr.hcl").read_text()
    assert 'source      = "${path.root}/ops-agent"' in template
