"""A job's ``requirements.txt`` (at the root of its code) installed into its
own venv before the trainer starts; reused by the next job on a cooling VM
with the same file; a failing install fails the job with pip's last lines.

No internet: the test builds a tiny wheel and the requirements file points
pip at it (``--no-index --find-links``), as a private index would be named.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

import pytest

from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished

pytestmark = pytest.mark.emulators

# The job imports the requirement, and torch from the image next to it.
IMPORT_BOTH = """
import sys, tinydep, numpy
print("TINYDEP", tinydep.VALUE, "from", tinydep.__file__)
print("PYTHON", sys.prefix)
print("NUMPY", numpy.__version__)
"""


def tiny_wheel(folder: Path, value: str) -> Path:
    """A pure-Python wheel ``tinydep 0.1`` whose module holds ``VALUE``: a
    wheel is a zip with the package, METADATA, WHEEL and RECORD."""
    folder.mkdir(parents=True, exist_ok=True)
    info = "tinydep-0.1.dist-info"
    files = {
        "tinydep/__init__.py": f"VALUE = {value!r}\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 0.1\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / "tinydep-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def code_with_requirements(tmp_path: Path, name: str, requirements: str) -> Path:
    code = tmp_path / name
    code.mkdir()
    (code / "train.py").write_text(IMPORT_BOTH)
    (code / "requirements.txt").write_text(requirements)
    return code


def test_requirements_are_installed_and_reused_on_a_cooling_vm(
    vm: Vm, agent_topics: Topics, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, "from the wheel")
    requirements = f"--no-index\n--find-links {wheels}\ntinydep==0.1\n"
    code = code_with_requirements(tmp_path, "code", requirements)
    command = ["python", "train.py"]

    # The trainer as the agent's user: the test's Python is one only it may run.
    agent = vm.boot(
        vm.assignment("ja", command, code_uri=str(code), cool_down_period_s=60),
        SPOTLINE_TRAINER_USER="",
    )
    first = next_finished(agent_topics)

    assert first.exit_code == 0, first.log_tail
    assert "TINYDEP from the wheel from " in first.log_tail
    venv = first.log_tail.split("PYTHON ")[1].split()[0]
    assert venv.startswith(str(vm.workdir / "cache" / "envs"))  # its own venv...
    assert "NUMPY " in first.log_tail  # ...seeing the image's packages too
    assert agent.said("INFO", "requirements.txt installed in")

    # The next job, the same file: the same venv, no second install.
    vm.assign(vm.assignment("jb", command, code_uri=str(code), cool_down_period_s=60))
    second = next_finished(agent_topics)
    assert second.job_id == "jb" and second.exit_code == 0, second.log_tail
    assert f"PYTHON {venv}" in second.log_tail
    assert agent.said("INFO", "already installed in")

    # Another file: another venv (and the first one is let go).
    tiny_wheel(tmp_path / "wheels2", "a newer build")
    other = code_with_requirements(
        tmp_path, "code2", f"--no-index\n--find-links {tmp_path / 'wheels2'}\ntinydep\n"
    )
    vm.assign(vm.assignment("jc", command, code_uri=str(other)))
    third = next_finished(agent_topics)
    assert third.job_id == "jc" and third.exit_code == 0, third.log_tail
    assert "TINYDEP a newer build" in third.log_tail
    assert f"PYTHON {venv}" not in third.log_tail and not Path(venv).exists()


def test_a_failing_install_fails_the_job_with_pips_last_lines(
    vm: Vm, agent_topics: Topics, tmp_path: Path
) -> None:
    code = code_with_requirements(
        tmp_path, "code", f"--no-index\n--find-links {tmp_path}\nno-such-package-spotline==1.0\n"
    )
    ran = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]

    vm.boot(vm.assignment("jbad", command, code_uri=str(code)), SPOTLINE_TRAINER_USER="")
    event = next_finished(agent_topics)

    assert event.exit_code != 0
    assert "pip install -r requirements.txt failed" in event.log_tail, event.log_tail
    assert "No matching distribution found for no-such-package-spotline==1.0" in event.log_tail
    assert event.unrecoverable  # no VM has it: the job fails on this one
    assert not ran.exists()
    # Nothing half-made is kept for the next job to trust.
    assert not any((vm.workdir / "cache" / "envs").glob("*/.spotline-complete"))
