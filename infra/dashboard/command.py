"""``spotline dashboard [--port N] [--host H]``: the dashboard of the system the
CLI talks to (a local stack or a deployed project, as ``spotline status``)."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
from typing import Any

DEFAULT_PORT = 8765  # clear of 8080, where many local servers (and functions) sit


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "dashboard", help="a read-only web page of jobs and instances, updated live"
    )
    parser.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: a free one"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only; "
        "the page has no login, so think twice before 0.0.0.0)",
    )
    parser.add_argument(
        "--limit", type=count, default=50, help="show the newest N jobs and instances (default 50)"
    )
    parser.set_defaults(run=run)


def port(text: str) -> int:
    """A TCP port, 0 to 65535."""
    with contextlib.suppress(ValueError):
        if 0 <= int(text) <= 65535:
            return int(text)
    raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535: {text!r}")


def count(text: str) -> int:
    """A count of at least 1 (``--limit``)."""
    with contextlib.suppress(ValueError):
        if int(text) >= 1:
            return int(text)
    raise argparse.ArgumentTypeError(f"expected a whole number of at least 1: {text!r}")


def run(args: argparse.Namespace) -> int:
    from spotline.infra.client.connection import connect
    from spotline.infra.dashboard.server import DashboardServer

    conn = connect(args.workdir)
    settings, store = conn.settings, conn.store
    if not _loopback(args.host):
        print(f"warning: listening on {args.host}: anyone who reaches it sees every job")
    try:
        with DashboardServer(store, args.host, args.port, args.limit) as server:
            print(f"dashboard of {settings.project} at {server.url} (Ctrl-C stops)", flush=True)
            server.wait()
    except OSError as err:  # the port is taken, the address is not this machine's
        print(f"spotline dashboard: cannot listen on {args.host}:{args.port}: {err}")
        return 1
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
