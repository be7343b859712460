"""Serving the dashboard: werkzeug's threaded server (Flask's own), one thread
per request, which an event stream holds for as long as its page is open.
That suits a page a few people open on their own machine; it is not meant to
face the internet (no authentication: it binds to 127.0.0.1 by default)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from spotline.infra.dashboard.app import create_app
from spotline.infra.dashboard.events import Hub

if TYPE_CHECKING:
    from werkzeug.serving import BaseWSGIServer

    from spotline.shared.adapters.firestore_store import FirestoreStore


class DashboardServer:
    """The dashboard of ``store``'s project on ``host:port`` (port 0: a free
    one), served on a thread. A context manager: leaving it ends every event
    stream, stops the listeners and the server."""

    def __init__(
        self, store: FirestoreStore, host: str = "127.0.0.1", port: int = 0, limit: int = 50
    ) -> None:
        self.store = store
        self.host = host
        self.port = port
        self.limit = limit
        self._hub: Hub | None = None
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the dashboard is not serving")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._server.server_port}"

    def __enter__(self) -> DashboardServer:
        from werkzeug.serving import make_server

        self._hub = Hub(self.store, jobs_shown=self.limit)
        app = create_app(self.store, hub=self._hub, limit=self.limit)
        self._server = make_server(self.host, self.port, app, threaded=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="spotline-dashboard", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._hub is not None:
            self._hub.close()  # first: the streams end, their threads with them
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def wait(self) -> None:
        """Serve until Ctrl-C."""
        if self._thread is None:
            raise RuntimeError("the dashboard is not serving")
        try:
            while self._thread.is_alive():
                self._thread.join(timeout=1.0)
        except KeyboardInterrupt:
            return
