"""The Ray launcher as the agent runs it, on one node with real Ray: the
command joins the node's cluster; a preemption notice (SIGTERM) reaches the
command first, then Ray is stopped, leaving no Ray process behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

from tests.framework_required import require_framework

DRIVER = """
import signal, sys, time
import ray
ray.init()
print("driver joined", len(ray.nodes()), "node", flush=True)
def on_notice(*_):
    print("driver checkpointing on the notice", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, on_notice)
time.sleep(300)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_preempted_ray_node_stops_the_command_then_ray() -> None:
    require_framework("ray", "the Ray launcher's preemption test", "ray")
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "SPOTLINE_RAY_NUM_CPUS": "1",
        "SPOTLINE_RAY_OBJECT_STORE_BYTES": str(80 * 2**20),
    }
    launcher = subprocess.Popen(
        [sys.executable, "-m", "vm_image.agent.ray_operator", "--", sys.executable, "-c", DRIVER],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: what is left of it can be seen, and killed
    )
    output: list[str] = []
    assert launcher.stdout is not None
    reader = threading.Thread(target=lambda: output.extend(launcher.stdout or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 150
        while not any("driver joined 1 node" in line for line in list(output)):
            assert launcher.poll() is None, "".join(output[-40:])
            assert time.monotonic() < deadline, "the driver never joined:\n" + "".join(output[-40:])
            time.sleep(0.5)
        launcher.send_signal(signal.SIGTERM)  # the agent's preemption notice
        assert launcher.wait(timeout=90) == 143, "".join(output[-40:])
        reader.join(timeout=30)
        assert "driver checkpointing on the notice" in "".join(output)
        deadline = time.monotonic() + 30
        while group_alive(launcher.pid):  # gcs_server, raylet, ... all stopped
            assert time.monotonic() < deadline, "Ray processes outlived the launcher"
            time.sleep(0.5)
    finally:
        if group_alive(launcher.pid):
            os.killpg(launcher.pid, signal.SIGKILL)
