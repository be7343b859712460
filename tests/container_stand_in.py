"""A stand-in for the container runtime's client (``docker``), for the tests
of jobs with an ``image`` on a machine that runs no container daemon.

It plays docker's parts as the agent meets them, no kinder:

* ``pull IMAGE``: the test's image is there; another tag is not (docker's
  words for a missing manifest), and a ``:slow`` tag meets a registry out of
  reach.
* ``run``: checks the argv (image, GPUs, no variable on the command line, an
  env file others cannot read), records it and the client's environment,
  then starts the "container" apart from the client, as the daemon would: a
  process in a session of its own (a keeper process stands for the daemon,
  reaping it), as the ``--user``, in the ``--workdir``, with only the env
  file's variables. Its name is recorded in a state folder, and a name in
  use is refused with docker's conflict message and exit code 125. The client
  passes SIGTERM and SIGINT on to it (``--sig-proxy``), relays its output,
  waits for it and exits with its code (128+N when signal N killed it). Once
  its command exits, the rest of the container's processes die with it (its
  PID namespace); with ``--rm`` its record goes. SIGKILL cannot be passed
  on: a killed client leaves the container running, under its name.
* ``kill NAME``: SIGKILL to the recorded container; docker's "No such
  container" and exit code 1 when none.

Every ``run`` appends its argv to ``runs.jsonl``; the ``stand_in`` fixture
kills what a failed test left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

IMAGE = "us-docker.pkg.dev/my-project/train/job:1.2"

STAND_IN = r"""#!{python}
import hashlib, json, os, signal, subprocess, sys, threading, time
IMAGE, STATE, RECORD = {image!r}, {state!r}, {record!r}
argv = sys.argv[1:]


def container_id(name):
    return hashlib.sha256(name.encode()).hexdigest()


def recorded_pid(box, wait_s):
    # The keeper writes the pid once the container's process started.
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(box) as held:
                text = held.read()
        except FileNotFoundError:
            return None
        if text or time.monotonic() > deadline:
            return int(text) if text else 0
        time.sleep(0.01)


if argv[0] == "pull":  # what docker answers (a daemon with its registries)
    if argv[1] == IMAGE:
        sys.exit(0)
    if argv[1].endswith(":slow"):
        print('Error response from daemon: Get "https://us-docker.pkg.dev/v2/": '
              'dial tcp 142.250.1.82:443: i/o timeout')
    else:
        print(argv[1].rsplit(":", 1)[0].join(["Error response from daemon: manifest for ", ":"])
              + argv[1].rsplit(":", 1)[1] + " not found: manifest unknown: manifest unknown")
    sys.exit(1)

if argv[0] == "kill":
    name = argv[1]
    pid = recorded_pid(os.path.join(STATE, name), 5.0)
    if pid is None:
        print(f"Error response from daemon: No such container: {{name}}", file=sys.stderr)
        sys.exit(1)
    try:
        if not pid:  # created, never started
            raise ProcessLookupError
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        print(f"Error response from daemon: cannot kill container: {{name}}: container "
              f"{{container_id(name)}} is not running", file=sys.stderr)
        sys.exit(1)
    print(name)
    sys.exit(0)

if argv[0] == "keeper":  # the daemon's side of one container
    box, spec = argv[1], json.loads(argv[2])
    root = os.geteuid() == 0
    container = subprocess.Popen(
        spec["command"], env=spec["env"], cwd=spec["workdir"], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        user=spec["uid"] if root else None, group=spec["gid"] if root else None,
        extra_groups=[] if root else None,
    )
    with open(box + ".pid", "w") as held:
        held.write(str(container.pid))
    os.replace(box + ".pid", box)

    def relay():
        attached = True  # the client may be gone: its output is then dropped
        while piece := os.read(container.stdout.fileno(), 4096):
            if attached:
                try:
                    os.write(1, piece)
                except OSError:
                    attached = False

    relaying = threading.Thread(target=relay)
    relaying.start()
    code = container.wait()
    try:  # the container's other processes end with its command (its PID namespace)
        os.killpg(container.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    relaying.join()
    if spec["remove"]:
        os.unlink(box)
    sys.exit(128 - code if code < 0 else code)

with open(RECORD, "w") as record:
    json.dump(argv, record)
with open(os.path.join(os.path.dirname(RECORD), "runs.jsonl"), "a") as runs:
    runs.write(json.dumps(argv) + "\n")
assert argv[0] == "run", argv
options, i = {{}}, 1
flags = {{"--rm", "--init"}}
while argv[i].startswith("--"):
    if argv[i] in flags:
        options.setdefault(argv[i], []).append("")
        i += 1
    else:
        options.setdefault(argv[i], []).append(argv[i + 1])
        i += 2
image, command = argv[i], argv[i + 1:]
assert image == IMAGE, image
assert options["--gpus"] == ["all"], options
assert "--env" not in options, "a variable on the command line: " + str(options["--env"])
with open(RECORD + ".client-env", "w") as record:
    json.dump(dict(os.environ), record)
uid, gid = (int(part) for part in options["--user"][0].split(":"))
env = {{}}
for path in options["--env-file"]:
    assert os.stat(path).st_mode & 0o077 == 0, "an env file others may read: " + path
    with open(path) as lines:
        for line in lines.read().splitlines():
            name, _, value = line.partition("=")
            env[name] = value
env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
name = options["--name"][0]
os.makedirs(STATE, exist_ok=True)
box = os.path.join(STATE, name)
try:
    os.close(os.open(box, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
except FileExistsError:
    print(f'docker: Error response from daemon: Conflict. The container name "/{{name}}" is '
          f'already in use by container "{{container_id(name)}}". You have to remove (or '
          "rename) that container to be able to reuse that name.\n"
          "See 'docker run --help'.", file=sys.stderr)
    sys.exit(125)
spec = {{"command": command, "env": env, "workdir": options["--workdir"][0], "uid": uid,
        "gid": gid, "remove": "--rm" in options}}
pending, target = [], []


def proxy(signum, frame):  # --sig-proxy: what the client receives, the container gets
    if target:
        try:
            os.kill(target[0], signum)
        except ProcessLookupError:
            pass
    else:
        pending.append(signum)


signal.signal(signal.SIGTERM, proxy)
signal.signal(signal.SIGINT, proxy)
output, into = os.pipe()
keeper = subprocess.Popen(
    [sys.executable, __file__, "keeper", box, json.dumps(spec)], stdin=subprocess.DEVNULL,
    stdout=into, stderr=into, start_new_session=True,
)
os.close(into)
pid = recorded_pid(box, 30.0)
if pid:
    target.append(pid)
    for signum in pending:
        proxy(signum, None)
while piece := os.read(output, 4096):
    os.write(1, piece)
sys.exit(keeper.wait())
"""


class StandIn:
    """The stand-in written in ``folder``: ``path`` is the runtime to set,
    ``record`` the last ``run``'s argv, ``state`` the containers by name."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "stand-in-docker"
        self.record = folder / "argv.json"
        self.state = folder / "containers"
        self.path.write_text(
            STAND_IN.format(
                python=sys.executable, image=IMAGE, state=str(self.state), record=str(self.record)
            )
        )
        self.path.chmod(0o755)

    def runs(self) -> list[list[str]]:
        """The argv of every ``run``, in order."""
        runs = self.record.with_name("runs.jsonl")
        if not runs.exists():
            return []
        return [json.loads(line) for line in runs.read_text().splitlines()]

    def containers(self) -> dict[str, int]:
        """The recorded containers' names and pids (0: not started yet)."""
        if not self.state.exists():
            return {}
        found = {}
        for box in self.state.iterdir():
            if box.suffix != ".pid":
                with contextlib.suppress(FileNotFoundError, ValueError):
                    found[box.name] = int(box.read_text() or 0)
        return found

    def close(self) -> None:
        for pid in self.containers().values():
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    runtime = StandIn(tmp_path)
    yield runtime
    runtime.close()
