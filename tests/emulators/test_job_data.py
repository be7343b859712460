"""A job's data set (``data_uri``) on the VM before its trainer starts: the
real agent fetches it, the trainer finds it at ``SPOTLINE_DATA_DIR``, a
reused (cooling) VM keeps it while it is current, and a data set larger than
the disk is refused with both sizes, before any byte is copied."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from spotline.vm_image.trainers.contract import RunSettingsError, training_split
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished

pytestmark = pytest.mark.emulators

# Prints every file of the data set with its content, and whether it can
# change them (it must not: the next job of a reused VM reads them too).
# (A shell: the test's Python may not be one the trainer account can run.)
READ_DATA = """
cd "$SPOTLINE_DATA_DIR" || exit 9
for path in $(find . -type f | sort); do echo "DATA ${path#./}=$(cat "$path")"; done
if [ -w . ] || [ -w train.csv ]; then echo WRITABLE; else echo READ-ONLY; fi
"""


def data_folder(tmp_path: Path, version: str) -> Path:
    folder = tmp_path / "dataset"
    (folder / "nested").mkdir(parents=True, exist_ok=True)
    (folder / "train.csv").write_text(f"train {version}\n")
    (folder / "nested" / "labels.csv").write_text(f"labels {version}\n")
    return folder


def test_the_trainer_reads_the_data_set_and_a_cooling_vm_reuses_it_while_current(
    vm: Vm, agent_topics: Topics, tmp_path: Path
) -> None:
    folder = data_folder(tmp_path, "v1")
    command = ["/bin/sh", "-c", READ_DATA]
    # As root, the trainer runs as another account, as on a VM.
    trainer_user = {"SPOTLINE_TRAINER_USER": "nobody"} if os.geteuid() == 0 else {}
    agent = vm.boot(
        vm.assignment("ja", command, data_uri=str(folder), cool_down_period_s=60), **trainer_user
    )
    first = next_finished(agent_topics)
    assert first.exit_code == 0, first.log_tail
    assert "DATA train.csv=train v1" in first.log_tail
    assert "DATA nested/labels.csv=labels v1" in first.log_tail
    if trainer_user:
        assert "READ-ONLY" in first.log_tail
    assert not agent.said("INFO", "the cached copy is current")

    # The same data_uri, unchanged: no second download.
    vm.assign(vm.assignment("jb", command, data_uri=str(folder), cool_down_period_s=60))
    second = next_finished(agent_topics)
    assert second.job_id == "jb" and second.exit_code == 0, second.log_tail
    assert "DATA train.csv=train v1" in second.log_tail
    assert agent.said("INFO", "the cached copy is current")

    # Changed since (a size, a version): downloaded again, never stale.
    (folder / "train.csv").write_text("train v2, longer\n")
    vm.assign(vm.assignment("jc", command, data_uri=str(folder)))
    third = next_finished(agent_topics)
    assert third.job_id == "jc" and third.exit_code == 0, third.log_tail
    assert "DATA train.csv=train v2, longer" in third.log_tail
    assert sum("the cached copy is current" in str(line) for line in agent.lines()) == 1


def test_a_data_set_larger_than_the_disk_fails_the_job_naming_both_sizes(
    vm: Vm, agent_topics: Topics, tmp_path: Path
) -> None:
    huge = tmp_path / "huge.bin"
    free = shutil.disk_usage(vm.workdir).free
    with huge.open("wb") as sparse:  # takes no space: only its size is huge
        sparse.truncate(free + 2**30)
    ran = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]

    vm.boot(vm.assignment("jbig", command, data_uri=str(huge)))
    event = next_finished(agent_topics)

    assert event.exit_code != 0
    assert f"holds {free + 2**30} bytes" in event.log_tail, event.log_tail
    assert "free on this VM's disk" in event.log_tail
    assert not ran.exists()  # the trainer never started
    assert not any((vm.workdir / "cache" / "data").rglob("huge.bin"))  # nothing copied


def test_a_missing_data_set_fails_the_job_naming_it(
    vm: Vm, agent_topics: Topics, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-data"
    vm.boot(vm.assignment("jmiss", [sys.executable, "-c", "pass"], data_uri=str(missing)))
    event = next_finished(agent_topics)
    assert event.exit_code != 0
    assert f"data_uri {missing}: nothing is stored there" in event.log_tail


def test_the_built_in_trainers_read_an_npz_with_a_validation_set(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((30, 5)), np.arange(30) % 3
    np.savez(tmp_path / "data.npz", x=x, y=y, x_val=x[:4], y_val=y[:4])
    split = training_split(seed=1, validation_split=0.5, env={"SPOTLINE_DATA_DIR": str(tmp_path)})
    assert split.x_train.shape == (30, 5) and split.x_val.shape == (4, 5)  # no split made
    assert split.y_val.tolist() == [0, 1, 2, 0]


def test_without_a_validation_set_the_split_is_made_from_x(tmp_path: Path) -> None:
    np.savez(tmp_path / "mine.npz", x=np.ones((10, 2)), y=np.zeros(10))
    split = training_split(seed=1, validation_split=0.2, env={"SPOTLINE_DATA_DIR": str(tmp_path)})
    assert (len(split.y_train), len(split.y_val)) == (8, 2)


def test_an_npz_without_x_and_y_is_refused_naming_what_it_holds(tmp_path: Path) -> None:
    np.savez(tmp_path / "data.npz", train_X=np.ones((3, 2)))
    with pytest.raises(RunSettingsError, match=r"must hold arrays x and y.*\['train_X'\]"):
        training_split(seed=1, validation_split=0.2, env={"SPOTLINE_DATA_DIR": str(tmp_path)})
