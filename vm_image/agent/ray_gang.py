"""How the nodes of one Ray cluster tell each other that the gang stops or ends.

Ray itself says neither: a worker whose head went away cannot tell a head
that finished its command from a head whose VM was taken, and the head sees
a lost worker only as tasks that failed. A gang that loses one node keeps
the others (``spotline.shared.domain.node_replacement``), and for that every
node must stop at once, the driver saving first, and say it stopped with its
gang (exit 143), not that it finished. So the head's launcher answers on
``port + 2`` (after Ray's GCS port and its client server's), one line a
connection:

* ``state``: the head's state, ``running``, ``stopping`` (a notice reached
  the gang: the driver saves and every node exits 143) or ``done`` (the
  command ended on its own: the workers exit 0);
* ``stop``: a worker got its notice; the head stops the driver, which saves
  (the stop flag), and the gang stops.

Each generation of a regrouped gang has its own port, so a node of an older
cluster (one that had not died yet) never reaches the new head.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable

CONTROL_PORT_OFFSET = 2
RUNNING, STOPPING, DONE = "running", "stopping", "done"
_STATES = (RUNNING, STOPPING, DONE)
# A control request's own bound: the head answers at once, or is gone.
ASK_TIMEOUT_S = 2.0


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def control_port(gcs_port: int) -> int:
    return gcs_port + CONTROL_PORT_OFFSET


class HeadControl:
    """The head's side: serves its state, and turns a worker's ``stop`` into
    ``on_stop`` (once)."""

    def __init__(self, host: str, port: int, on_stop: Callable[[], None]) -> None:
        self._state = RUNNING
        # Reentrant: the notice's handler (``stopping``) may run in the main
        # thread while it holds the lock (``end``, ``linger``).
        self._lock = threading.RLock()
        self._on_stop = on_stop
        self._told = 0  # answers that were not ``running``: one a worker, which then exits
        self._changed = threading.Condition(self._lock)
        control = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = ASK_TIMEOUT_S  # a peer that says nothing holds no thread for long

            def handle(self) -> None:
                try:
                    line = self.rfile.readline(64).decode(errors="replace").strip()
                except OSError:
                    return
                self.wfile.write(f"{control._answer(line)}\n".encode())

        self._server = _Server((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    def _answer(self, request: str) -> str:
        stop = False
        with self._lock:
            if request == "stop" and self._state == RUNNING:
                self._state, stop = STOPPING, True
            answer = self._state
            if answer != RUNNING:
                self._told += 1
                self._changed.notify_all()
        if stop:
            self._on_stop()
        return answer

    def stopping(self) -> None:
        """This node got its notice (or the command was stopped): the gang stops."""
        with self._lock:
            if self._state == RUNNING:
                self._state = STOPPING

    def end(self, exit_code: int, stopped_code: int) -> str:
        """The command ended with ``exit_code``: the gang stopped (its
        ``stopped_code``, or a stop was already told), else it is done."""
        with self._lock:
            if self._state == RUNNING:
                self._state = STOPPING if exit_code == stopped_code else DONE
            return self._state

    def linger(self, workers: int, timeout_s: float) -> None:
        """Keep answering until ``workers`` were told the end (each worker
        asks every couple of seconds, and exits once told), at most ``timeout_s``."""
        with self._lock:
            self._changed.wait_for(lambda: self._told >= workers, timeout_s)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def ask_head(host: str, port: int, request: str = "state") -> str | None:
    """The head's answer to ``request`` (its state); None if it cannot be reached."""
    try:
        with socket.create_connection((host, port), timeout=ASK_TIMEOUT_S) as conn:
            conn.sendall(f"{request}\n".encode())
            conn.settimeout(ASK_TIMEOUT_S)
            answer = conn.makefile().readline().strip()
    except OSError:
        return None
    return answer if answer in _STATES else None
