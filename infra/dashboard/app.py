"""The dashboard's routes: Flask, with Jinja2 templates shipped as package data.

Flask rather than the standard library's ``http.server``: it is already
installed (functions-framework serves the functions with it), its templates
escape every value by default (job ids, descriptions, notes, errors and
metric names are user input), and its test client drives every route in the
tests. Read-only by construction: every route is a GET.

A page is whole server-rendered HTML, readable without JavaScript (then a
``<noscript>`` meta refresh reloads it). With JavaScript, ``static/live.js``
listens on ``/events`` and re-fetches the fragment of the part that changed.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from flask import Flask, Response, abort, render_template, request

from spotline.infra.dashboard import views
from spotline.infra.dashboard.epochs_svg import epochs_svg
from spotline.infra.dashboard.events import JOB_TOPIC, check_topic
from spotline.infra.dashboard.reads import recent_instances

if TYPE_CHECKING:
    from spotline.infra.dashboard.events import Hub
    from spotline.shared.adapters.firestore_store import FirestoreStore
    from spotline.shared.domain.documents import JobDoc

KEEPALIVE_S = 15.0  # a closed page is noticed at the next write: at most this late
REFRESH_S = 10  # the <noscript> reload
# Scripts and styles only from the dashboard itself: a description that got
# past the escaping still could not run.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
# pyplot keeps global state: two charts drawn at once on two request threads
# would draw into each other.
_CHART_LOCK = threading.Lock()


def create_app(
    store: FirestoreStore,
    hub: Hub | None = None,
    clock: Callable[[], datetime] | None = None,
    limit: int = 50,
) -> Flask:
    """The dashboard of ``store``'s project: the newest ``limit`` jobs and
    instances. Without a ``hub`` there are no live updates (``/events`` is 404)."""
    app = Flask(__name__)
    now = clock or (lambda: datetime.now(UTC))

    def shown(template: str, **values: object) -> str:
        return render_template(template, project=store.project, refresh_s=REFRESH_S, **values)

    def tables() -> dict[str, object]:
        at = now()
        return {
            "jobs": [views.job_row(j, at) for j in store.recent_jobs(limit)],
            "instances": [views.instance_row(i, at) for i in recent_instances(store, limit)],
        }

    def job_of(job_id: str) -> JobDoc:
        job = store.get_job(job_id)
        if job is None:
            abort(404, description=f"no job {job_id}")
        return job

    def job_parts(job: JobDoc) -> dict[str, object]:
        at = now()
        epochs = store.list_epochs(job.job_id)
        return {
            "job": views.job_row(job, at),
            "detail": views.job_detail(job),
            "history": views.history_rows(job.history),
            "epochs": views.epoch_rows(epochs),
            "timeline": views.timeline_view(job, at),
            # New URLs when they change, so the browser fetches the new images.
            "epochs_version": f"{len(epochs)}-{epochs[-1].at.timestamp() if epochs else 0}",
            "timeline_version": f"{job.updated_at.timestamp()}",
        }

    @app.get("/")
    def index() -> str:
        return shown("index.html", live=["jobs", "instances"], **tables())

    @app.get("/fragments/jobs")
    def jobs_fragment() -> str:
        return shown("_jobs.html", **tables())

    @app.get("/fragments/instances")
    def instances_fragment() -> str:
        return shown("_instances.html", **tables())

    @app.get("/jobs/<job_id>")
    def job_page(job_id: str) -> str:
        job = job_of(job_id)
        return shown("job.html", live=[f"{JOB_TOPIC}{job.job_id}"], **job_parts(job))

    @app.get("/jobs/<job_id>/live")
    def job_fragment(job_id: str) -> str:
        return shown("_job.html", **job_parts(job_of(job_id)))

    @app.get("/jobs/<job_id>/epochs.svg")
    def epochs_chart(job_id: str) -> Response:
        job = job_of(job_id)
        return Response(epochs_svg(store.list_epochs(job.job_id)), mimetype="image/svg+xml")

    @app.get("/jobs/<job_id>/timeline.png")
    def timeline_chart(job_id: str) -> Response:
        return Response(_timeline_png(job_of(job_id), now()), mimetype="image/png")

    @app.get("/events")
    def events() -> Response:
        if hub is None:
            abort(404, description="no live updates: this dashboard holds no listeners")
        topics = request.args.getlist("topic")
        try:
            if not topics:
                raise ValueError("no topic: ask for ?topic=jobs, instances or job/JOB_ID")
            for topic in topics:
                check_topic(topic)
        except ValueError as err:
            return Response(str(err), status=400, mimetype="text/plain")
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return Response(_stream(hub, topics), mimetype="text/event-stream", headers=headers)

    @app.errorhandler(404)
    def missing(err: Exception) -> tuple[str, int]:
        return shown("missing.html", reason=getattr(err, "description", "not found")), 404

    @app.after_request
    def guarded(answer: Response) -> Response:
        answer.headers["X-Content-Type-Options"] = "nosniff"
        if answer.mimetype == "text/html":
            answer.headers["Content-Security-Policy"] = CSP
        return answer

    return app


def _stream(hub: Hub, topics: list[str]) -> Iterator[str]:
    """Server-Sent Events: ``data: TOPIC`` per change, a comment between them
    (a closed page is only noticed when a write fails). The subscription starts
    with the stream, inside the generator: a response never iterated holds
    no listener, and closing it (the page went away) unsubscribes."""
    with hub.subscribe(topics) as changes:
        yield f"retry: 2000\n: {' '.join(topics)}\n\n"
        while not changes.closed:
            topic = changes.next(timeout_s=KEEPALIVE_S)
            if topic:
                yield f"data: {topic}\n\n"
            elif not changes.closed:
                yield ": keepalive\n\n"


def _timeline_png(job: JobDoc, now: datetime) -> bytes:
    """The pie of ``spotline timeline --chart pie`` (``spotline.infra.client.charts``)."""
    from spotline.infra.client.charts import ChartsUnavailable, draw
    from spotline.shared.domain.states import JobStatus
    from spotline.shared.domain.timeline import timeline

    ended = job.status in JobStatus.terminal()
    found = timeline(job.history, None if ended else now)
    title = f"{job.job_id}: {job.status}, {len(found.by_attempt())} attempt(s)"
    with tempfile.TemporaryDirectory() as folder, _CHART_LOCK:
        path = Path(folder) / "timeline.png"
        try:
            draw(found, "pie", title, path)
        except ChartsUnavailable as err:
            abort(404, description=str(err))
        return path.read_bytes()
