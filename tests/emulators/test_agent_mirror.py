"""The real agent with its trainer's local folders: restored before the
trainer starts, and what the trainer left there stored before the agent says
the job finished or was preempted (the order the next attempt relies on)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from fsspec.core import url_to_fs

from spotline.shared.contract.events import SpotPreempted
from spotline.vm_image.agent.checkpoint_mirror import MANIFEST, FolderMirror
from tests.vm_agent import Vm, agent_topics, next_finished, vm  # noqa: F401

pytestmark = pytest.mark.emulators
SIZE = 50 * 1024 * 1024

# Saves 50 MB the moment it is told to stop (or at its end), and says what it saw.
TRAINER = f"""
import json, os, signal, sys, time
folder, outputs = os.environ["SPOTLINE_CHECKPOINT_DIR"], os.environ["SPOTLINE_OUTPUT_DIR"]
seen = {{"dir": folder, "url": os.environ["SPOTLINE_CHECKPOINT_URL"],
        "out_url": os.environ["SPOTLINE_OUTPUT_URL"], "found": sorted(os.listdir(folder))}}
def save(*_):
    with open(os.path.join(folder, "last.pt"), "wb") as out:
        out.write(os.urandom({SIZE}))
    with open(os.path.join(outputs, "seen.json"), "w") as out:
        json.dump(seen, out)
    sys.exit(143 if _ else 0)
signal.signal(signal.SIGTERM, save)
if os.environ.get("WAIT_FOR_NOTICE"):
    print("waiting", flush=True)
    time.sleep(120)
save()
"""


def trainer_user() -> dict[str, str]:
    """The trainer as the agent's own user: another account could not run
    this checkout's Python (the mirror's reading as another account is
    ``test_checkpoint_mirror``'s)."""
    return {"SPOTLINE_TRAINER_USER": ""}


def on_storage(assignment: str, root: str) -> str:
    """``assignment`` with its folders in the storage emulator (``gcs``)."""
    fields = json.loads(assignment)
    fields.update(checkpoint_dir=f"{root}/checkpoints", output_dir=f"{root}/outputs")
    return json.dumps(fields)


def object_size(url: str) -> int:
    fs, path = url_to_fs(url)
    fs.invalidate_cache()
    return int(fs.size(path))


def manifest_units(url: str) -> list[str]:
    fs, path = url_to_fs(f"{url}/{MANIFEST}")
    return sorted(json.loads(fs.cat_file(path))["units"])


def last_upload_s(log: Path) -> float:
    found = re.findall(r"last upload of \S+/checkpoints .*? in ([0-9.]+) s", log.read_text())
    assert found, "the agent logged no last upload"
    return float(found[-1])


def test_a_finished_jobs_save_is_stored_before_the_finish_is_reported(
    vm: Vm,  # noqa: F811
    agent_topics: object,  # noqa: F811
    gcs: str,
    tmp_path: Path,
) -> None:
    earlier = tmp_path / "earlier"
    (earlier / "save-7").mkdir(parents=True)
    (earlier / "save-7" / "model.bin").write_bytes(b"attempt 1")
    url = f"{gcs}/checkpoints"
    FolderMirror(earlier, url).sync(final=True)  # what an earlier attempt mirrored

    agent = vm.boot(
        on_storage(vm.assignment("j1", ["python", "-c", TRAINER]), gcs), **trainer_user()
    )
    finished = next_finished(agent_topics, 120)  # type: ignore[arg-type]

    # At the moment spotline hears of it, the save is in storage.
    assert finished.exit_code == 0, finished.log_tail
    assert object_size(f"{url}/last.pt") == SIZE
    assert manifest_units(url) == ["last.pt", "save-7"]
    assert (finished.mirrored_checkpoints, finished.mirrored_outputs) == (2, 1)
    fs, path = url_to_fs(f"{gcs}/outputs/seen.json")
    seen = json.loads(fs.cat_file(path))
    assert seen["found"] == ["save-7"]  # restored before it started
    assert os.path.isabs(seen["dir"]) and seen["url"] == url
    assert seen["out_url"] == f"{gcs}/outputs"
    print(f"last upload of a 50 MB checkpoint: {last_upload_s(agent.log):.2f} s")


def test_a_save_on_the_notice_is_stored_before_the_preemption_is_reported(
    vm: Vm,  # noqa: F811
    agent_topics: object,  # noqa: F811
    gcs: str,
) -> None:
    agent_topics.create("spot_preempted")  # type: ignore[attr-defined]
    assignment = vm.assignment("j2", ["python", "-c", TRAINER], env={"WAIT_FOR_NOTICE": "1"})
    agent = vm.boot(on_storage(assignment, gcs), **trainer_user())
    deadline = time.monotonic() + 60
    while not agent.said("INFO", "waiting"):
        assert time.monotonic() < deadline, agent.log.read_text()[-2000:]
        time.sleep(0.2)

    agent.process.send_signal(signal.SIGTERM)  # the notice, as systemd would pass it on
    (message,) = agent_topics.pull("spot_preempted", 60)  # type: ignore[attr-defined]

    url = f"{gcs}/checkpoints"
    assert object_size(f"{url}/last.pt") == SIZE
    assert manifest_units(url) == ["last.pt"]
    assert SpotPreempted.model_validate_json(message).mirrored_checkpoints == 1
    print(f"last upload of a 50 MB checkpoint after the notice: {last_upload_s(agent.log):.2f} s")


# Saves on the notice as spotline.torch does and reports the save by the
# file:// URL save_checkpoint returns, then takes a while to exit.
REPORTING_TRAINER = """
import json, os, signal, sys, time
folder = os.environ["SPOTLINE_CHECKPOINT_DIR"]
def save(*_):
    with open(os.path.join(folder, "ckpt-000000000007.pt"), "wb") as out:
        out.write(os.urandom(1024 * 1024))
    with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
        uri = "file://" + os.path.join(folder, "ckpt-000000000007.pt")
        events.write(json.dumps({"type": "checkpoint", "step": 7, "uri": uri,
                                 "reason": "sigterm"}) + "\\n")
    time.sleep(3)
    sys.exit(143)
signal.signal(signal.SIGTERM, save)
print("waiting", flush=True)
time.sleep(120)
"""


def test_a_save_reported_by_its_file_url_is_stored_before_the_preemption_is_reported(
    vm: Vm,  # noqa: F811
    agent_topics: object,  # noqa: F811
    gcs: str,
) -> None:
    agent_topics.create("spot_preempted")  # type: ignore[attr-defined]
    assignment = vm.assignment("j3", ["python", "-c", REPORTING_TRAINER])
    agent = vm.boot(on_storage(assignment, gcs), **trainer_user())
    deadline = time.monotonic() + 60
    while not agent.said("INFO", "waiting"):
        assert time.monotonic() < deadline, agent.log.read_text()[-2000:]
        time.sleep(0.2)

    agent.process.send_signal(signal.SIGTERM)
    (message,) = agent_topics.pull("spot_preempted", 60)  # type: ignore[attr-defined]

    url = f"{gcs}/checkpoints"
    assert object_size(f"{url}/ckpt-000000000007.pt") == 1024 * 1024
    preempted = SpotPreempted.model_validate_json(message)
    assert preempted.step == 7
    assert preempted.checkpoint_uri == f"{url}/ckpt-000000000007.pt"


# Saves on the notice, reports the save by its path in the local folder, then
# takes longer than any notice to exit (a Ray head's launcher waits for Ray
# to drain; a framework's teardown may hang).
SLOW_EXIT_TRAINER = """
import json, os, signal, sys, time
folder = os.environ["SPOTLINE_CHECKPOINT_DIR"]
def save(*_):
    path = os.path.join(folder, "state.json")
    with open(path, "w") as out:
        json.dump({"step": 11}, out)
    with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
        events.write(json.dumps({"type": "checkpoint", "step": 11, "uri": path,
                                 "reason": "sigterm"}) + "\\n")
    print("saved", flush=True)
    time.sleep(300)
    sys.exit(143)
signal.signal(signal.SIGTERM, save)
print("waiting", flush=True)
time.sleep(300)
"""


def test_a_save_on_the_notice_is_reported_once_stored_though_the_trainer_has_not_exited(
    vm: Vm,  # noqa: F811
    agent_topics: object,  # noqa: F811
    gcs: str,
) -> None:
    """Before, a save in the local folder was reported only after the
    trainer's exit: a trainer slow to exit after its save (a Ray head, its
    Ray draining for up to 30 s) outlasted the notice, its VM went first, and
    spotline never heard of the step it saved."""
    agent_topics.create("spot_preempted")  # type: ignore[attr-defined]
    assignment = vm.assignment("j4", ["python", "-c", SLOW_EXIT_TRAINER])
    agent = vm.boot(on_storage(assignment, gcs), **trainer_user())
    deadline = time.monotonic() + 60
    while not agent.said("INFO", "waiting"):
        assert time.monotonic() < deadline, agent.log.read_text()[-2000:]
        time.sleep(0.2)

    agent.process.send_signal(signal.SIGTERM)
    (message,) = agent_topics.pull("spot_preempted", 90)  # type: ignore[attr-defined]

    url = f"{gcs}/checkpoints"
    assert agent.process.poll() is None  # the trainer still has not exited
    fs, path = url_to_fs(f"{url}/state.json")
    assert json.loads(fs.cat_file(path)) == {"step": 11}
    preempted = SpotPreempted.model_validate_json(message)
    assert (preempted.step, preempted.checkpoint_uri) == (11, f"{url}/state.json")
