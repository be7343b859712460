"""The Ray launcher: a Ray operator on a gang of VMs.

The agent runs ``python -m spotline.vm_image.agent.ray_operator -- COMMAND...`` as the
trainer of a ``framework: "ray"`` job, on every node:

* node 0 (the head) runs ``ray start --head`` on the job's port, waits until
  every node has joined (as an operator's init-container does: "node_count=1,
  expected_node_count=2, retrying in 2s"), then runs COMMAND with
  ``RAY_ADDRESS`` set, so that its ``ray.init()`` joins the cluster; its exit
  code is the job's. Nodes that do not join within ``ray_join_timeout_s`` fail
  the job, saying how many joined of how many.
* every other node waits for the head's port, runs ``ray start --address``,
  and stays up until the head says its command ended (exit 0: a worker's
  finish does not end a job, node 0's does) or that the gang stops (exit
  143, the driver having saved), or goes away without a word (its VM was
  taken: 143 too). A worker's own notice is told to the head, whose driver
  then saves: the gang stops at once (``ray_gang``), so that one lost node
  is replaced and the Ray cluster forms again around it.

Each node's Ray runs in the foreground (``--block``), as this process's child
in the VM's process group, and is stopped through it (SIGTERM: Ray drains and
stops that node's processes). That is ``ray stop`` for this node only: ``ray
stop`` itself kills every Ray process of the host, which locally, where the
"VMs" of a gang share one host, would stop the other nodes too. A preemption
notice (SIGTERM from the agent) goes on to the head's command first, so that
it can checkpoint, then Ray stops.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from spotline.shared.contract.exit_codes import exit_status
from spotline.shared.contract.ranks import EXIT_STOPPED
from spotline.vm_image.agent.ray_gang import (
    DONE,
    STOPPING,
    HeadControl,
    ask_head,
    control_port,
)

# Ray's default GCS port, for a job of one node (it has no MASTER_PORT).
DEFAULT_PORT = 6379
DEFAULT_JOIN_TIMEOUT_S = 600.0
POLL_S = 2.0
# The head is taken for gone after this many refused connections in a row
# (one refusal may be a restart of its GCS).
HEAD_GONE_CHECKS = 3
# How long the head's own Ray may take to answer on its port.
HEAD_START_S = 180.0
# How long the head's check of the nodes may take to connect to its own Ray.
CONNECT_S = 120.0
# How long Ray may drain (its own default is 30 s) before it is killed.
STOP_GRACE_S = 40.0
# The head's exit code when its Ray stopped under the command.
EXIT_RAY_STOPPED = 1
# How long the head, its command ended, waits for every worker to have been
# told (each asks every POLL_S) before it stops its Ray.
TELL_WORKERS_S = 3 * POLL_S + 2.0


class RayLaunchError(RuntimeError):
    """The Ray cluster could not be formed; the message says why."""


@dataclass(frozen=True)
class RayNode:
    """This node's place in the Ray cluster, from the agent's cluster env."""

    rank: int
    nodes: int
    head: str  # the head's address (host)
    port: int  # the head's GCS port
    join_timeout_s: float

    @property
    def address(self) -> str:
        return f"{self.head}:{self.port}"

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, env: dict[str, str]) -> RayNode:
        """Read the variables ``spotline.shared.contract.cluster`` sets; a job of one
        node has none of them, and is its own head on Ray's default port."""
        try:
            return cls(
                rank=int(env.get("SPOTLINE_NODE_RANK", "0")),
                nodes=int(env.get("SPOTLINE_NUM_NODES", "1")),
                head=env.get("MASTER_ADDR", "127.0.0.1"),
                port=int(env.get("MASTER_PORT", str(DEFAULT_PORT))),
                join_timeout_s=float(
                    env.get("SPOTLINE_RAY_JOIN_TIMEOUT_S", str(DEFAULT_JOIN_TIMEOUT_S))
                ),
            )
        except ValueError as err:
            raise RayLaunchError(f"the Ray cluster's environment is not valid: {err}") from None


def ray_start_args(node: RayNode, temp_dir: str, env: dict[str, str]) -> list[str]:
    """``ray start`` for this node. No dashboard (nobody reaches it on a VM,
    and it costs a process); ``SPOTLINE_RAY_NUM_CPUS`` and
    ``SPOTLINE_RAY_OBJECT_STORE_BYTES`` (from the spec's env) cap what Ray
    takes, where several "VMs" share a small host."""
    args = ["start", "--block", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    if node.is_head:
        # The Ray client server's port next to the GCS's: gangs sharing a host
        # (locally) each have their own port, so must have their own of this.
        args += [
            "--head",
            f"--port={node.port}",
            "--include-dashboard=false",
            f"--ray-client-server-port={node.port + 1}",
        ]
    else:
        args.append(f"--address={node.address}")
    # Several nodes on one host each need their own agent port (Ray's is fixed).
    args.append("--dashboard-agent-listen-port=0")
    if env.get("SPOTLINE_RAY_NUM_CPUS"):
        args.append(f"--num-cpus={int(env['SPOTLINE_RAY_NUM_CPUS'])}")
    if env.get("SPOTLINE_RAY_OBJECT_STORE_BYTES"):
        args.append(f"--object-store-memory={int(env['SPOTLINE_RAY_OBJECT_STORE_BYTES'])}")
    return args


def wait_for_nodes(
    count: Callable[[], int],
    expected: int,
    timeout_s: float,
    address: str,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    say: Callable[[str], None] = print,
) -> None:
    """Poll ``count`` (alive nodes) until ``expected`` have joined.

    Raises:
        RayLaunchError: ``timeout_s`` passed first; it names how many joined.
    """
    deadline = clock() + timeout_s
    while True:
        joined = count()
        if joined >= expected:
            say(f"ray_address={address}, node_count={joined}, expected_node_count={expected}")
            return
        if clock() >= deadline:
            raise RayLaunchError(
                f"only {joined} of {expected} Ray nodes joined the head at {address} "
                f"within {timeout_s:.0f} s (ray_join_timeout_s)"
            )
        say(
            f"ray_address={address}, node_count={joined}, expected_node_count={expected}; "
            f"retrying in {POLL_S:.0f}s"
        )
        sleep(POLL_S)


def port_open(host: str, port: int, timeout_s: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _ray_cli() -> str:
    """The ``ray`` next to this Python (the image's environment), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "ray")
    found = beside if os.access(beside, os.X_OK) else shutil.which("ray")
    if found is None:
        raise RayLaunchError(
            "framework 'ray' needs Ray on the VM and it is not installed "
            "(pip install 'spotline[ray]')"
        )
    return found


class RayLauncher:
    def __init__(self, node: RayNode, command: Sequence[str], env: dict[str, str]) -> None:
        self.node = node
        self.command = list(command)
        self.env = env
        self.ray: subprocess.Popen[bytes] | None = None
        self.user: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()
        self.control: HeadControl | None = None

    def on_sigterm(self, *_: object) -> None:
        """The preemption notice: the head's command checkpoints first (it
        gets the signal and is waited for); then Ray stops."""
        if self.control is not None:
            self.control.stopping()
        self._stop_command()
        if self.user is None and self.node.is_head:
            self.stop_ray()  # a worker tells the head first, then stops its Ray

    def _stop_command(self) -> None:
        """The gang stops (this node's notice, or a worker's told to the head):
        the command is told (SIGTERM: it saves and exits 143)."""
        self.stopping.set()
        if self.user is not None and self.user.poll() is None:
            self.user.send_signal(signal.SIGTERM)

    def run(self) -> int:
        temp_dir = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths must fit
        # RAY_ADDRESS is for the command's ray.init(): `ray start` must not see it.
        ray_env = {k: v for k, v in self.env.items() if k != "RAY_ADDRESS"}
        try:
            if not self.node.is_head:
                self._wait_for_head()
            if self.stopping.is_set():  # this node's notice before it joined
                ask_head(self.node.head, control_port(self.node.port), "stop")
                return EXIT_STOPPED
            self.ray = subprocess.Popen(
                [_ray_cli(), *ray_start_args(self.node, temp_dir, self.env)], env=ray_env
            )
            if self.node.is_head:
                return self._run_head()
            return self._run_worker()
        finally:
            if self.control is not None:
                if self.control.state == DONE:
                    # A worker that missed it would take the head for lost (143);
                    # when the gang stops, that is what it is told anyway.
                    self.control.linger(self.node.nodes - 1, TELL_WORKERS_S)
                self.control.close()
            self.stop_ray()
            shutil.rmtree(temp_dir, ignore_errors=True)

    def _wait_for_head(self) -> None:
        """Until the head's GCS answers. The head's own start is bounded by
        HEAD_START_S, and its wait for the nodes by the join timeout: a
        worker waits for both, so that a missing node is the head's to name."""
        limit_s = HEAD_START_S + self.node.join_timeout_s
        deadline = time.monotonic() + limit_s
        while not port_open(self.node.head, self.node.port):
            if self.stopping.is_set():
                return
            if time.monotonic() >= deadline:
                raise RayLaunchError(
                    f"the Ray head at {self.node.address} did not answer within {limit_s:.0f} s"
                )
            time.sleep(POLL_S)

    def _wait_for_own_head(self) -> None:
        """Until this node's GCS answers: the join timeout counts from then
        (and ray.init would wait without end for a GCS that is not up)."""
        deadline = time.monotonic() + HEAD_START_S
        while not port_open(self.node.head, self.node.port):
            self._check_ray_running()
            if time.monotonic() >= deadline:
                raise RayLaunchError(f"the Ray head did not start within {HEAD_START_S:.0f} s")
            self.stopping.wait(0.5)

    def _alive_nodes(self) -> int:
        import ray  # a heavy import, on Ray jobs only

        if self.stopping.is_set():
            raise RayLaunchError("preempted while the Ray nodes were joining")
        self._check_ray_running()
        if not ray.is_initialized():
            self._connect(ray)
        return sum(1 for n in ray.nodes() if n.get("Alive"))

    def _connect(self, ray: Any) -> None:
        """ray.init(), watched: it waits without end for a GCS that has gone
        (a `ray start` that answered on its port, then died on another), so
        it runs aside while this node's Ray is checked on."""
        failure: list[BaseException] = []

        def connect() -> None:
            try:
                ray.init(address=self.node.address, log_to_driver=False, logging_level="WARNING")
            except BaseException as err:  # handed to the waiting thread
                failure.append(err)

        thread = threading.Thread(target=connect, daemon=True)
        thread.start()
        deadline = time.monotonic() + CONNECT_S
        while thread.is_alive():
            self._check_ray_running()
            if time.monotonic() >= deadline:
                raise RayLaunchError(f"could not connect to the Ray head within {CONNECT_S:.0f} s")
            thread.join(0.5)
        if failure:
            raise RayLaunchError(f"could not connect to the Ray head: {failure[0]}")

    def _check_ray_running(self) -> None:
        assert self.ray is not None
        code = self.ray.poll()
        if code is not None:
            raise RayLaunchError(f"`ray start` exited with code {code} (its output is above)")

    def _run_head(self) -> int:
        import ray

        self._wait_for_own_head()
        if self.node.nodes > 1:
            port = control_port(self.node.port)
            try:
                self.control = HeadControl(self.node.head, port, on_stop=self._stop_command)
            except OSError as err:
                raise RayLaunchError(f"cannot answer the workers on port {port}: {err}") from None
        try:
            wait_for_nodes(
                self._alive_nodes,
                self.node.nodes,
                self.node.join_timeout_s,
                self.node.address,
                sleep=self.stopping.wait,
            )
        except RayLaunchError:
            if not self.stopping.is_set():
                raise
        finally:
            ray.shutdown()
            # ray.init() put its own SIGTERM handler in place (a driver's,
            # which exits at once): the notice must reach the command again.
            signal.signal(signal.SIGTERM, self.on_sigterm)
        if self.stopping.is_set():
            return EXIT_STOPPED
        # A job of one node has no cluster env: its command joins this head too.
        env = {"RAY_ADDRESS": self.node.address, **self.env}
        self.user = subprocess.Popen(self.command, env=env)
        if self.stopping.is_set():  # told while it started
            self._stop_command()
        code = exit_status(self._wait_for_command())
        if self.control is not None:
            state = self.control.end(code, EXIT_STOPPED)
            print(
                f"ray_operator: the command exited with code {code}; "
                f"the workers are told {state!r}",
                flush=True,
            )
        return code

    def _wait_for_command(self) -> int:
        """The command's exit code. Should this node's Ray stop under it (its
        ``ray start`` exits: a Ray process died), the command's Ray calls
        would wait for ever for the gone GCS: it is stopped, and the job fails
        saying why, instead of holding its VM until the reaper's stall timeout
        or for ever."""
        assert self.user is not None and self.ray is not None
        while True:
            try:
                return self.user.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                pass
            code = self.ray.poll()
            if code is None or self.stopping.is_set():
                continue
            print(
                f"ray_operator: Ray on the head stopped (`ray start` exited with code {code}) "
                "while the command ran; stopping the command",
                file=sys.stderr,
                flush=True,
            )
            self.user.terminate()
            try:
                self.user.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.user.kill()
                self.user.wait()
            return EXIT_RAY_STOPPED

    def _run_worker(self) -> int:
        """Until the head says the command ended (0) or the gang stops (143),
        or is gone without a word (143: its VM was taken; node 0 decides
        the job). This node's own notice is told to the head first."""
        port = control_port(self.node.port)
        gone = 0
        while not self.stopping.wait(POLL_S):
            self._check_ray_running()
            state = ask_head(self.node.head, port)
            if state == DONE:
                print(
                    f"the Ray head at {self.node.address} ended its command: this node stops",
                    flush=True,
                )
                return 0
            if state == STOPPING:
                print(
                    "the gang stops (a notice on another node): this node stops with it", flush=True
                )
                return EXIT_STOPPED
            gone = 0 if state is not None else gone + 1
            if gone >= HEAD_GONE_CHECKS:
                print(
                    f"the Ray head at {self.node.address} is gone: this node stops with it",
                    flush=True,
                )
                return EXIT_STOPPED
        # This node's notice: the head's driver saves before this node's Ray goes.
        told = ask_head(self.node.head, port, "stop")
        print(f"preempted: the Ray head was told, and answered {told!r}", flush=True)
        return EXIT_STOPPED

    def stop_ray(self) -> None:
        """Stop this node's Ray (``ray start --block`` drains and stops its
        processes on SIGTERM); kill it if it does not in STOP_GRACE_S."""
        process, self.ray = self.ray, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("ray_operator: no command to run on the head", file=sys.stderr)
        return 2
    env = dict(os.environ)
    try:
        launcher = RayLauncher(RayNode.from_env(env), args, env)
        signal.signal(signal.SIGTERM, launcher.on_sigterm)
        return launcher.run()
    except RayLaunchError as err:
        print(f"ray_operator: {err}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
