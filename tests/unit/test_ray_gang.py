"""How the nodes of a Ray cluster tell each other that the gang stops or ends
(``ray_gang``), over a real socket on loopback: a worker can tell a head that
finished from one that stopped for a notice, and a worker's notice stops the
head's driver, once."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from spotline.vm_image.agent.ray_gang import DONE, RUNNING, STOPPING, HeadControl, ask_head


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def head() -> Iterator[tuple[HeadControl, int, list[str]]]:
    port = free_port()
    stops: list[str] = []
    control = HeadControl("127.0.0.1", port, on_stop=lambda: stops.append("stop"))
    try:
        yield control, port, stops
    finally:
        control.close()


def test_a_worker_reads_running_then_done_after_a_finished_command(
    head: tuple[HeadControl, int, list[str]],
) -> None:
    control, port, stops = head
    assert ask_head("127.0.0.1", port) == RUNNING
    assert control.end(0, 143) == DONE
    assert ask_head("127.0.0.1", port) == DONE
    assert stops == []


@pytest.mark.parametrize("code", [143, 1])
def test_a_command_stopped_by_a_notice_tells_the_workers_to_stop(
    head: tuple[HeadControl, int, list[str]], code: int
) -> None:
    """The head's own notice comes first: whatever the driver then exits
    with (143, or a failure), the workers stop with the gang, not finish."""
    control, port, _ = head
    control.stopping()
    assert control.end(code, 143) == STOPPING
    assert ask_head("127.0.0.1", port) == STOPPING


def test_a_driver_that_exits_143_on_its_own_stops_the_gang(
    head: tuple[HeadControl, int, list[str]],
) -> None:
    control, port, _ = head
    assert control.end(143, 143) == STOPPING
    assert ask_head("127.0.0.1", port) == STOPPING


def test_a_workers_notice_stops_the_driver_once_even_told_twice(
    head: tuple[HeadControl, int, list[str]],
) -> None:
    control, port, stops = head
    assert ask_head("127.0.0.1", port, "stop") == STOPPING
    assert ask_head("127.0.0.1", port, "stop") == STOPPING  # a second worker, or a retry
    assert stops == ["stop"]
    # The driver, stopped, exits 0 after all (it was at its last step): the
    # workers were told to stop and stay told.
    assert control.end(0, 143) == STOPPING


def test_a_stop_after_the_command_ended_changes_nothing(
    head: tuple[HeadControl, int, list[str]],
) -> None:
    control, port, stops = head
    control.end(0, 143)
    assert ask_head("127.0.0.1", port, "stop") == DONE
    assert stops == []


def test_a_head_that_is_gone_or_says_nonsense_is_no_answer() -> None:
    port = free_port()
    assert ask_head("127.0.0.1", port) is None  # nothing listens
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()

        def nonsense() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n")

        thread = threading.Thread(target=nonsense, daemon=True)
        thread.start()
        assert ask_head("127.0.0.1", port) is None  # another program on the port
        thread.join(timeout=10)


def test_the_head_waits_for_its_workers_to_be_told_at_most_its_bound(
    head: tuple[HeadControl, int, list[str]],
) -> None:
    control, port, _ = head
    control.end(0, 143)
    told = threading.Thread(target=lambda: ask_head("127.0.0.1", port), daemon=True)
    told.start()
    control.linger(1, timeout_s=60)  # returns once the one worker was told
    told.join(timeout=10)
    assert not told.is_alive()
    control.linger(2, timeout_s=0.2)  # a worker that never asks: only the bound


def test_a_peer_that_says_nothing_keeps_no_worker_from_its_answer(
    head: tuple[HeadControl, int, list[str]],
) -> None:
    _, port, stops = head
    with socket.create_connection(("127.0.0.1", port)):  # connects, never writes
        assert ask_head("127.0.0.1", port) == RUNNING
        assert ask_head("127.0.0.1", port, "stop") == STOPPING
    assert stops == ["stop"]
