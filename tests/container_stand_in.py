"""A stand-in for the container runtime's client (``docker``), for the tests
of jobs with an ``image`` on a machine that runs no container daemon.

It plays docker's parts as the agent meets them, no kinder:

* ``pull IMAGE``: the test's image is there; another tag is not (docker's
  words for a missing manifest), and a ``:slow`` tag meets a registry out of
  reach.
* ``run``: checks the argv (image, GPUs, no variable on the command line, an
  env file others cannot read; a flag it does not play is refused as docker
  refuses an unknown one: ``unknown flag``, exit code 125), records it, its
  ``--label``s and the client's environment,
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
* ``ps [--all] --filter label=KEY[=VALUE] --format {{.Names}}``: the names of
  the running (``--all``: every) recorded container with those labels. A
  filter the daemon does not know is refused with its words (exit code 1), a
  filter that is not ``name=value`` with the CLI's (125); the stand-in plays
  no other filter or format, and says so.
* ``rm [--force] NAME...``: a running container is refused without
  ``--force``, killed (SIGKILL) with it; its record goes. A missing name is
  docker's "No such container" on stderr, exit code 0 with ``--force`` (as
  docker's CLI answers now), else 1. An exited ``--rm`` container is one the
  daemon is removing: docker's "removal ... is already in progress", exit 1.

Every ``run`` appends its argv to ``runs.jsonl``; the ``stand_in`` fixture
kills what a failed test left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

IMAGE = "us-docker.pkg.dev/my-project/train/job:1.2"

# The script's first lines: its Python, the test's image, where it keeps state.
HEADER = """#!{python}
IMAGE, STATE, RECORD = {image!r}, {state!r}, {record!r}
"""

STAND_IN = r"""
import hashlib, json, os, signal, subprocess, sys, threading, time
argv = sys.argv[1:]
# What each container was started with (its labels, --rm), beside STATE.
INFO = STATE + "-info"
# The filters docker's daemon knows for ps; the stand-in plays only label.
PS_FILTERS = {"ancestor", "before", "exited", "expose", "health", "id", "is-task", "isolation",
              "label", "name", "network", "publish", "since", "status", "volume"}


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


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def info_of(name):
    try:
        with open(os.path.join(INFO, name)) as held:
            return json.load(held)
    except FileNotFoundError:
        return {"labels": {}, "remove": False}


def unknown_flag(command, flag):  # docker's CLI (cobra): usage errors exit 125
    print(f"unknown flag: {flag}\nSee 'docker {command} --help'.", file=sys.stderr)
    sys.exit(125)


def parse(command, args, switches, valued):
    # Docker's flags as pflag reads them (--name value, --name=value, -x);
    # one the stand-in does not play is refused as docker refuses an unknown one.
    options, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        flag, has_value, value = args[i].partition("=")
        if flag in switches and not has_value:
            options.setdefault(switches[flag], []).append("")
            i += 1
        elif flag in valued:
            if not has_value:
                i += 1
                value = args[i]
            options.setdefault(valued[flag], []).append(value)
            i += 1
        else:
            unknown_flag(command, flag)
    return options, args[i:]


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
        print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
        sys.exit(1)
    try:
        if not pid:  # created, never started
            raise ProcessLookupError
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        print(f"Error response from daemon: cannot kill container: {name}: container "
              f"{container_id(name)} is not running", file=sys.stderr)
        sys.exit(1)
    print(name)
    sys.exit(0)

if argv[0] == "ps":
    options, rest = parse("ps", argv[1:], {"-a": "all", "--all": "all"},
                          {"-f": "filter", "--filter": "filter", "--format": "format"})
    assert not rest, f"docker ps takes no arguments: {rest}"
    wanted = []
    for given in options.get("filter", []):
        key, has_value, value = given.partition("=")
        if not has_value:
            print(f'invalid argument "{given}" for "-f, --filter" flag: bad format of filter '
                  "(expected name=value)\nSee 'docker ps --help'.", file=sys.stderr)
            sys.exit(125)
        if key not in PS_FILTERS:
            print(f"Error response from daemon: invalid filter '{key}'", file=sys.stderr)
            sys.exit(1)
        assert key == "label", f"the stand-in plays only ps's label filter, not {given}"
        wanted.append(value.partition("="))
    assert options.get("format") == ["{{.Names}}"], (
        f"the stand-in plays only ps's --format {{{{.Names}}}}, not {options.get('format')}")
    names = sorted(box for box in os.listdir(STATE) if not box.endswith(".pid")) if (
        os.path.isdir(STATE)) else []
    for name in names:
        labels = info_of(name)["labels"]
        if not all(key in labels and (not has or labels[key] == value)
                   for key, has, value in wanted):
            continue
        pid = recorded_pid(os.path.join(STATE, name), 0.0)
        if pid is None or not (options.get("all") or (pid and running(pid))):
            continue
        print(name)
    sys.exit(0)

if argv[0] == "rm":
    options, names = parse("rm", argv[1:], {"-f": "force", "--force": "force"}, {})
    assert names, "docker rm needs a container"
    failed = False
    for name in names:
        box = os.path.join(STATE, name)
        pid = recorded_pid(box, 5.0)
        if pid is None:
            print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
            failed = failed or "force" not in options  # docker's rm --force: gone is removed
            continue
        if pid and running(pid):
            if "force" not in options:
                print(f'Error response from daemon: cannot remove container "/{name}": '
                      "container is running: stop the container before removing or force "
                      "remove", file=sys.stderr)
                failed = True
                continue
            os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while running(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        elif pid and info_of(name)["remove"]:  # exited: the daemon removes it (--rm)
            print(f"Error response from daemon: removal of container {name} is already in "
                  "progress", file=sys.stderr)
            failed = True
            continue
        for path in (box, os.path.join(INFO, name)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        print(name)
    sys.exit(1 if failed else 0)

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
        for path in (box, os.path.join(INFO, os.path.basename(box))):
            try:  # gone already if `rm --force` removed it
                os.unlink(path)
            except FileNotFoundError:
                pass
    sys.exit(128 - code if code < 0 else code)

with open(RECORD, "w") as record:
    json.dump(argv, record)
with open(os.path.join(os.path.dirname(RECORD), "runs.jsonl"), "a") as runs:
    runs.write(json.dumps(argv) + "\n")
assert argv[0] == "run", argv
options, rest = parse(
    "run", argv[1:], {"--rm": "--rm", "--init": "--init"},
    {flag: flag for flag in ("--gpus", "--network", "--name", "--label", "--user", "--workdir",
                             "--volume", "--env-file")},
)
image, command = rest[0], rest[1:]
assert image == IMAGE, image
assert options["--gpus"] == ["all"], options
with open(RECORD + ".client-env", "w") as record:
    json.dump(dict(os.environ), record)
uid, gid = (int(part) for part in options["--user"][0].split(":"))
env = {}
for path in options["--env-file"]:
    assert os.stat(path).st_mode & 0o077 == 0, "an env file others may read: " + path
    with open(path) as lines:
        for line in lines.read().splitlines():
            name, _, value = line.partition("=")
            env[name] = value
env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
name = options["--name"][0]
os.makedirs(STATE, exist_ok=True)
os.makedirs(INFO, exist_ok=True)
box = os.path.join(STATE, name)
try:
    os.close(os.open(box, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
except FileExistsError:
    print(f'docker: Error response from daemon: Conflict. The container name "/{name}" is '
          f'already in use by container "{container_id(name)}". You have to remove (or '
          "rename) that container to be able to reuse that name.\n"
          "See 'docker run --help'.", file=sys.stderr)
    sys.exit(125)
labels = dict(label.partition("=")[::2] for label in options.get("--label", []))
with open(os.path.join(INFO, name), "w") as held:
    json.dump({"labels": labels, "remove": "--rm" in options}, held)
spec = {"command": command, "env": env, "workdir": options["--workdir"][0], "uid": uid,
        "gid": gid, "remove": "--rm" in options}
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
            HEADER.format(
                python=sys.executable, image=IMAGE, state=str(self.state), record=str(self.record)
            )
            + STAND_IN
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

    def run_detached(self, name: str, command: list[str], *labels: str) -> int:
        """Start a container through the stand-in's own ``run``, as a user
        on the VM (no label) or an earlier agent (``spotline.agent=1``) did,
        and kill its client, as an agent's death takes it: the container runs
        on. Its pid."""
        env_file = self.record.with_name(f"{name}.env")
        env_file.write_text("")
        env_file.chmod(0o600)
        argv = [str(self.path), "run", "--rm", "--init", "--gpus", "all", "--name", name]
        for label in labels:
            argv += ["--label", label]
        argv += ["--user", f"{os.getuid()}:{os.getgid()}", "--workdir", str(self.state.parent)]
        client = subprocess.Popen(
            [*argv, "--env-file", str(env_file), IMAGE, *command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not (pid := self.containers().get(name)):
            assert client.poll() is None, f"the stand-in's run of {name} exited {client.returncode}"
            assert time.monotonic() < deadline, f"the container {name} did not start"
            time.sleep(0.05)
        os.killpg(client.pid, signal.SIGKILL)
        client.wait(10)
        return pid

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
