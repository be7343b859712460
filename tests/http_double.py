"""What the local API doubles share: an HTTP server on a free 127.0.0.1 port,
run on a thread, whose handler class asks the double to answer each request."""

from __future__ import annotations

import functools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar, Self


class HttpDouble:
    """Subclasses name their handler class, which calls ``owner.handle``."""

    handler_class: ClassVar[type[BaseHTTPRequestHandler]]
    _server: ThreadingHTTPServer | None = None

    def start(self) -> Self:
        handler = type("DoubleHandler", (self.handler_class,), {"owner": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)
        threading.Thread(target=serve, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """The ``api_endpoint`` to give a client, e.g. ``http://127.0.0.1:8089``."""
        assert self._server is not None, "start() the double first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"
