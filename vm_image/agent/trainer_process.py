"""Running the trainer: its command, its environment, its output and reports."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from shared import logs
from shared.contract.assignment import Assignment
from shared.contract.cluster import cluster_env

_TAIL_LINES = 40
TENSORBOARD_DIR = "tensorboard"


def trainer_command(assignment: Assignment) -> list[str]:
    spec = assignment.spec
    if spec.command:
        return list(spec.command)
    return [sys.executable, "-m", f"vm_image.trainers.{spec.trainer}"]


def trainer_env(
    assignment: Assignment, events_path: Path, base: dict[str, str], instance: str = ""
) -> dict[str, str]:
    """The environment contract every trainer gets (see vm_image/trainers/report.py),
    with its framework's cluster variables on a node of a multi-node job."""
    spec = assignment.spec
    cluster: dict[str, str] = {}
    if assignment.nodes:
        rank = assignment.nodes.index(instance)
        cluster = cluster_env(spec.framework, assignment.hosts, rank, assignment.master_port)
    # The agent's own Python environment comes first on PATH: a command's
    # `python` has spotline, torch and fsspec, as the image installs them.
    path = os.pathsep.join([os.path.dirname(sys.executable), base.get("PATH", os.defpath)])
    return {
        **base,
        "PATH": path,
        **spec.env,
        "SPOTLINE_JOB_ID": assignment.job_id,
        "SPOTLINE_ATTEMPT": str(assignment.attempt),
        "SPOTLINE_EPOCHS": str(spec.epochs),
        "SPOTLINE_BATCH_SIZE": str(spec.batch_size),
        "SPOTLINE_SEED": str(spec.seed),
        "SPOTLINE_VALIDATION_SPLIT": str(spec.validation_split),
        "SPOTLINE_HYPERPARAMETERS": json.dumps(spec.hyperparameters),
        "SPOTLINE_FIT_KWARGS": json.dumps(spec.fit_kwargs),
        "SPOTLINE_CHECKPOINT_DIR": assignment.checkpoint_dir,
        "SPOTLINE_OUTPUT_DIR": assignment.output_dir,
        "SPOTLINE_EVENTS": str(events_path),
        # Written locally; the agent uploads it to the job's outputs.
        "SPOTLINE_TENSORBOARD_DIR": str(events_path.parent / TENSORBOARD_DIR),
        "PYTHONUNBUFFERED": "1",
        **cluster,
    }


class TrainerProcess:
    """The trainer subprocess, its output copied to our stdout and a log file,
    and its report lines handed to ``on_report`` as they appear."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        workdir: Path,
        events_path: Path,
        on_report: Callable[[dict[str, Any]], None],
        labels: dict[str, Any] | None = None,
    ) -> None:
        self.events_path = events_path
        self.labels = dict(labels or {})
        self.on_report = on_report
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._offset = 0
        self._done = threading.Event()
        events_path.touch()
        # Same process group as the agent: whatever stops the VM stops both.
        self.process = subprocess.Popen(
            command,
            env=env,
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._log = open(workdir / "trainer.log", "a", encoding="utf-8")  # noqa: SIM115
        assert self.process.stdout is not None
        self._pump = threading.Thread(target=self._copy, args=(self.process.stdout,), daemon=True)
        self._pump.start()
        self._follow = threading.Thread(target=self._follow_reports, daemon=True)
        self._follow.start()

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def wait(self) -> int:
        code = self.process.wait()
        self._pump.join(timeout=5)
        self._done.set()
        self._follow.join(timeout=5)
        self._read_reports()  # whatever was written just before exit
        self._log.close()
        return code

    def log_tail(self) -> str:
        return "".join(self.tail)

    def _copy(self, stream: IO[str]) -> None:
        # One JSON object a line on our stdout: Cloud Logging (through the
        # journal) keeps each as a structured entry labelled with the job and
        # attempt, findable after the VM is gone. trainer.log keeps raw lines.
        for line in stream:
            self.tail.append(line)
            self._log.write(line)
            logs.emit("INFO", line.rstrip("\n"), stream="trainer", **self.labels)

    def _follow_reports(self) -> None:
        while not self._done.wait(0.1):
            self._read_reports()

    def _read_reports(self) -> None:
        with open(self.events_path, encoding="utf-8") as events:
            events.seek(self._offset)
            while True:
                line = events.readline()
                if not line.endswith("\n"):
                    break  # not complete yet: read it next time
                self._offset = events.tell()
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict):
                    try:
                        self.on_report(record)
                    except Exception as err:  # e.g. Pub/Sub out of reach: keep following
                        logs.warning(f"could not relay the trainer's report {record}: {err}")
