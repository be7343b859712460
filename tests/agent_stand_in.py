"""A tiny stand-in for the VM agent, and what tests read of the processes it runs.

The stand-in reads its name and attributes from its metadata server, records
events to ``$AGENT_OUT/NAME.jsonl`` and watches ``instance/preempted`` as the
real agent does; its metadata attribute ``agent-mode`` picks how it behaves.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# The agent stand-in. Modes (metadata "agent-mode"): "watch" exits on SIGTERM;
# "graceful" ignores SIGTERM and exits 0 once it sees the preemption; "stubborn"
# ignores SIGTERM and hangs after it; "exit" exits 3 at once; "spawn" is "watch"
# with a child process in its group. Events go to $AGENT_OUT/NAME.jsonl.
AGENT = """
import json, os, signal, subprocess, sys, time, urllib.request

ROOT = "http://" + os.environ["GCE_METADATA_HOST"] + "/computeMetadata/v1/"


def get(path):
    request = urllib.request.Request(ROOT + path, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read().decode(), response.headers["ETag"]


name = get("instance/name")[0]
attributes = json.loads(get("instance/attributes/?recursive=true")[0])
mode = attributes.get("agent-mode", "watch")
out = os.path.join(os.environ["AGENT_OUT"], name + ".jsonl")


def record(event, **fields):
    with open(out, "a") as f:
        f.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\\n")


def on_sigterm(signum, frame):
    record("sigterm")
    os._exit(0)


ignore = mode in ("graceful", "stubborn")
signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else on_sigterm)
child = None
if mode == "spawn":
    code = "import time; time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", code, __file__]).pid
job = attributes.get("spotline-job")
record("started", pid=os.getpid(), name=name, job=job, child=child)
if mode == "exit":
    sys.exit(3)
value, etag = get("instance/preempted")
while value != "TRUE":
    record("watching")
    value, etag = get("instance/preempted?wait_for_change=true&timeout_sec=60&last_etag=" + etag)
record("preempted")
if mode == "stubborn":
    signal.pause()
"""


def wait_for(check: Callable[[], T | None], timeout_s: float = 5.0, what: str = "") -> T:
    """What ``check`` returns once it is true; fails after ``timeout_s``,
    saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"{what or 'timed out'} after {timeout_s} s")


def read_events(out: Path, name: str) -> list[dict[str, Any]]:
    path = out / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_event(out: Path, name: str, event: str, timeout_s: float = 5.0) -> dict[str, Any]:
    return wait_for(
        lambda: next((e for e in read_events(out, name) if e["event"] == event), None), timeout_s
    )


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a live or zombie process, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return state, int(ppid)


def alive(pid: int) -> bool:
    # A zombie whose parent is not us waits on someone else's wait(); it runs nothing.
    stat = proc_stat(pid)
    return stat is not None and (stat[0] != "Z" or stat[1] == os.getpid())


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def zombie_children() -> list[int]:
    me = os.getpid()
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and proc_stat(int(entry.name)) == ("Z", me)
    ]


def metadata_get(
    metadata_host: str, path: str, flavor: bool = True, timeout_s: float = 10.0
) -> tuple[int, dict[str, str], str]:
    headers = {"Metadata-Flavor": "Google"} if flavor else {}
    url = f"http://{metadata_host}/computeMetadata/v1/{path}"
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout_s
        ) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, dict(e.headers), e.read().decode()
