"""Running the trainer: its command, its environment, its output and reports."""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from spotline.shared import logs
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.cluster import cluster_env
from spotline.shared.domain.secret_env import scrub
from spotline.vm_image.agent.privileges import TrainerAccount
from spotline.vm_image.agent.workspace import CHECKPOINTS_DIR, OUTPUTS_DIR

# The job's error shows the trainer's last lines: this many, each cut to
# _TAIL_LINE_CHARS and all of them to TAIL_CHARS, so that a trainer printing
# megabytes on one line cannot make job finished too big to publish.
_TAIL_LINES = 20
_TAIL_LINE_CHARS = 500
TAIL_CHARS = 2000
# The most read from the trainer's output at once: a "line" without a newline
# (a progress bar, binary noise) is copied in pieces of this size, not held
# whole. Each piece becomes one JSON log line, up to 6 times longer (\ufffd
# for every undecodable byte): 4 KiB keeps it under journald's LineMax (48K).
_READ_BYTES = 4 * 1024
TENSORBOARD_DIR = "tensorboard"


class CannotStart(RuntimeError):
    """The trainer could not be started; ``exit_code`` is what a shell would
    answer (127: no such program, 126: it cannot be run). ``unrecoverable``:
    no new VM would fare better (the job's code or data is not there)."""

    def __init__(self, message: str, exit_code: int, unrecoverable: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.unrecoverable = unrecoverable


def trainer_command(assignment: Assignment) -> list[str]:
    """The trainer's argv; a Ray job's goes through the Ray launcher, which
    starts this node's Ray (head or worker) and runs the argv on the head."""
    spec = assignment.spec
    if spec.command:
        command = list(spec.command)
    else:
        command = [sys.executable, "-m", f"spotline.vm_image.trainers.{spec.trainer}"]
    if spec.framework == "ray":
        return [sys.executable, "-m", "spotline.vm_image.agent.ray_operator", "--", *command]
    return command


def trainer_env(
    assignment: Assignment, events_path: Path, base: dict[str, str], instance: str = ""
) -> dict[str, str]:
    """The environment contract every trainer gets (see spotline/report.py),
    with its framework's cluster variables on a node of a multi-node job."""
    spec = assignment.spec
    cluster: dict[str, str] = {}
    if assignment.nodes:
        rank = assignment.node_rank(instance)
        cluster = cluster_env(
            spec.framework, assignment.hosts, rank, assignment.master_port, assignment.nodes
        )
    if spec.framework == "ray":
        cluster["SPOTLINE_RAY_JOIN_TIMEOUT_S"] = str(spec.ray_join_timeout_s)
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
        # Local folders the agent restores and mirrors to the job's storage
        # (checkpoint_mirror), and the storage URLs themselves.
        "SPOTLINE_CHECKPOINT_DIR": str(events_path.parent / CHECKPOINTS_DIR),
        "SPOTLINE_CHECKPOINT_URL": assignment.checkpoint_dir,
        "SPOTLINE_OUTPUT_DIR": str(events_path.parent / OUTPUTS_DIR),
        "SPOTLINE_OUTPUT_URL": assignment.output_dir,
        "SPOTLINE_EVENTS": str(events_path),
        # Written locally; the agent uploads it to the job's outputs.
        "SPOTLINE_TENSORBOARD_DIR": str(events_path.parent / TENSORBOARD_DIR),
        "PYTHONUNBUFFERED": "1",
        **cluster,
    }


class TrainerProcess:
    """The trainer subprocess, its output copied to our stdout and a log file,
    and its report lines handed to ``on_report`` as they appear.

    ``account``: who it runs as (``privileges``); by default the agent's
    user. ``secrets``: values resolved from Secret Manager, replaced by
    ``***`` in every line relayed, logged or kept for the job's error (a
    value split across two reads of _READ_BYTES is not caught). ``log_name``:
    its raw output's file in ``workdir`` (one for each rank of a node).
    ``on_kill``: called with each SIGKILL, before it is sent, for what the
    signal cannot reach (a container's runtime client cannot pass it on).
    """

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        workdir: Path,
        events_path: Path,
        on_report: Callable[[dict[str, Any]], None],
        labels: dict[str, Any] | None = None,
        account: TrainerAccount | None = None,
        secrets: Sequence[str] = (),
        log_name: str = "trainer.log",
        on_kill: Callable[[], None] | None = None,
    ) -> None:
        self.events_path = events_path
        self.on_kill = on_kill
        self.secrets = [value for value in secrets if value]
        self.labels = dict(labels or {})
        self.on_report = on_report
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._offset = 0
        self._done = threading.Event()
        if not events_path.exists():
            events_path.touch()
        self._log = open(workdir / log_name, "a", encoding="utf-8")  # noqa: SIM115
        self._log_failed = False
        # Same process group as the agent: whatever stops the VM stops both.
        # Bytes, not text: a trainer's output need not be UTF-8 (see _copy).
        try:
            self.process = subprocess.Popen(
                command,
                env=env,
                cwd=workdir,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                **(account.popen_kwargs() if account else {}),
            )
        except (OSError, ValueError) as err:
            self._log.close()
            raise _cannot_start(command, env, err) from err
        assert self.process.stdout is not None
        self._pump = threading.Thread(target=self._copy, args=(self.process.stdout,), daemon=True)
        self._pump.start()
        self._follow = threading.Thread(target=self._follow_reports, daemon=True)
        self._follow.start()

    def signal(self, signum: int) -> None:
        if self.process.poll() is not None:
            return
        if signum == signal.SIGKILL and self.on_kill is not None:
            self.on_kill()
        self.process.send_signal(signum)

    def wait(self) -> int:
        code = self.process.wait()
        # A child the trainer left behind may still hold the pipe: the copy
        # then goes on draining it, and closes the log when it ends.
        self._pump.join(timeout=5)
        self._done.set()
        self._follow.join(timeout=5)
        self._read_reports()  # whatever was written just before exit
        return code

    def log_tail(self) -> str:
        """The trainer's last lines, at most TAIL_CHARS characters."""
        return "".join(self.tail)[-TAIL_CHARS:]

    def _copy(self, stream: IO[bytes]) -> None:
        # This thread must outlive anything the trainer writes: once it stops
        # reading, the pipe fills (64 KiB) and the trainer blocks on its next
        # print for ever while the agent's heartbeats go on. So: bytes read in
        # bounded pieces, decoded with replacement, and a failure to log one
        # piece never ends the loop.
        try:
            while piece := stream.readline(_READ_BYTES):
                self._relay(scrub(piece.decode("utf-8", errors="replace"), self.secrets))
        finally:
            self._log.close()

    def _relay(self, line: str) -> None:
        # One JSON object a line on our stdout: Cloud Logging (through the
        # journal) keeps each as a structured entry labelled with the job and
        # attempt, findable after the VM is gone. trainer.log keeps raw lines.
        self.tail.append(line if len(line) <= _TAIL_LINE_CHARS else line[-_TAIL_LINE_CHARS:])
        try:
            self._log.write(line)
        except (OSError, ValueError) as err:  # a full disk must not stop the copy
            if not self._log_failed:
                logs.warning(f"could not write trainer.log: {err}", **self.labels)
            self._log_failed = True
        # Our own stdout gone: trainer.log and the tail still have the line.
        with contextlib.suppress(OSError, ValueError):
            logs.emit("INFO", line.rstrip("\n"), stream="trainer", **self.labels)

    def _follow_reports(self) -> None:
        while not self._done.wait(0.1):
            self._read_reports()

    def _read_reports(self) -> None:
        try:
            self._read_new_reports()
        except OSError as err:  # the trainer removed or broke its events file
            logs.warning(f"cannot read the trainer's reports {self.events_path}: {err}")

    def _read_new_reports(self) -> None:
        # A line that is not UTF-8 is decoded with replacement: what does not
        # parse, or does not make an event, is skipped with a warning.
        # Not through a link: the trainer (another account) owns the folder,
        # and must not have the agent read a file it cannot.
        with open(
            self.events_path, encoding="utf-8", errors="replace", opener=_no_follow
        ) as events:
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


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def _cannot_start(
    command: list[str], env: dict[str, str], err: OSError | ValueError
) -> CannotStart:
    """What went wrong, naming the argument or variable. Popen raises
    ValueError for what the OS can never take (NUL in an argument or the
    environment, "=" in a variable's name), OSError for a missing or
    unrunnable program."""
    program = command[0] if command else ""
    if isinstance(err, OSError):
        code = 127 if err.errno == errno.ENOENT else 126
        return CannotStart(f"cannot start the trainer {program!r}: {err}", code)
    bad_args = [arg for arg in command if "\0" in arg]
    bad_names = [name for name in env if "=" in name or "\0" in name]
    bad_values = [name for name, value in env.items() if "\0" in value]
    if bad_args:
        why = f"command argument {bad_args[0]!r:.80} holds a NUL byte"
    elif bad_names:
        why = f"environment variable name {bad_names[0]!r:.80} holds '=' or a NUL byte"
    elif bad_values:
        why = f"environment variable {bad_values[0]!r:.80} has a NUL byte in its value"
    else:
        why = str(err)
    return CannotStart(f"cannot start the trainer: {why} ({err})", 126)
