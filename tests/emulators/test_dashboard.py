"""``spotline dashboard``, a read-only page of jobs and
instances, one job's history, epochs chart and timeline, updated live through
Firestore listeners and Server-Sent Events. Here through Flask's test client
against the Firestore emulator; ``test_dashboard_browser`` drives Chromium."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime

import pytest
from flask.testing import FlaskClient

from spotline.infra.dashboard.app import create_app
from spotline.infra.dashboard.events import Hub
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import JobFinished
from spotline.shared.domain.documents import EpochDoc, JobDoc
from spotline.shared.domain.late_finish import job_finished
from spotline.shared.domain.lifecycle import new_job, vm_lost, vm_recorded
from spotline.shared.domain.recording import record_for
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus as S
from spotline.shared.domain.transitions import fail_job, move_job
from spotline.shared.domain.unrecorded_vms import MadeVm, charge_unrecorded
from tests.documents import at, instance

SPEC = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", "epochs": 4}
XSS = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
NOW = at(600)


def a_job(job_id: str, created: float, **spec: object) -> JobDoc:
    return new_job(JobSpec.model_validate({**SPEC, **spec}), job_id, f"m-{job_id}", at(created))


def training(job: JobDoc, epoch: int = 2) -> JobDoc:
    """Placed, trained ``epoch`` epochs, with a cost: as the handlers leave it."""
    for second, to in ((10, S.CONNECTING_SERVER), (20, S.GEARING_UP_ENV), (30, S.TRAINING)):
        job = move_job(job, to, at(second))
    return job.model_copy(
        update={
            "epoch": epoch,
            "progress": f"{epoch}/{job.epochs}",
            "instance": f"sl-{job.job_id}-a1",
            "machine_id": "g2-standard-4",
            "cost_usd": 0.0123,
            "on_demand_cost_usd": 0.0456,
            "savings_percent": 73.0,
            "preemptions": 1,
        }
    )


def an_epoch(n: int, loss: float, accuracy: float | None = 0.5) -> EpochDoc:
    return EpochDoc(
        epoch=n, epochs=4, attempt=1, step=10 * n, metrics={"loss": loss, "accuracy": accuracy},
        instance="sl-j1-a1", at=at(30 + 60 * n),
    )  # fmt: skip


@pytest.fixture
def store(project: str) -> FirestoreStore:
    return FirestoreStore(project)


def client_of(store: FirestoreStore, hub: Hub | None = None) -> FlaskClient:
    return create_app(store, hub=hub, clock=lambda: NOW).test_client()


def text_of(html: str) -> str:
    """What a person reads: the tags gone, the whitespace folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_jobs_page_lists_jobs_newest_first_and_the_instances(store: FirestoreStore) -> None:
    store.create_job(a_job("j-old", 0))
    store.create_job(training(a_job("j-new", 100)))
    store.create_instance(
        instance(
            "sl-j-new-a1", "j-new", price_per_hour=0.2346, cost_usd=0.03, cooling_cost_usd=0.0012
        )
    )
    page = client_of(store).get("/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert html.index("j-new") < html.index("j-old")
    row = text_of(html[html.index('id="job-j-new"') :].split("</tr>")[0])
    for seen in ("j-new", "alice", "TRAINING", "2/4", "$0.0123", "$0.0456", "73%", "8m20s ago"):
        assert seen in row, (seen, row)
    assert re.search(r'<progress[^>]*value="2"[^>]*max="4"', html)
    # Without JavaScript, no live updates: the page reloads itself.
    assert re.search(r'<noscript><meta http-equiv="refresh" content="\d+"></noscript>', html)
    instances = html[html.index('id="instances"') :]
    cells = text_of(instances.split("</tr>")[1])
    for seen in (
        "sl-j-new-a1",
        "j-new",
        "EXECUTING",
        "g2-standard-4",
        "local-a",
        "SPOT",
        "$0.2346",
    ):
        assert seen in cells, (seen, cells)
    assert "$0.0312" in cells  # the closed segments and the cooling so far


def test_a_job_page_shows_its_history_epochs_and_timeline(store: FirestoreStore) -> None:
    job = training(a_job("j1", 0))
    store.create_job(job)
    for n, loss in ((1, 0.9), (2, 0.4)):
        store.put_epoch("j1", an_epoch(n, loss))
    client = client_of(store)
    html = client.get("/jobs/j1").get_data(as_text=True)
    history = html[html.index('id="history"') :].split("</table>")[0]
    assert history.count("<tr") == 1 + len(job.history)  # a header and each line
    assert "GEARING_UP_ENV" in history and "submitted" in history
    assert 'src="/jobs/j1/epochs.svg' in html and 'src="/jobs/j1/timeline.png' in html
    timeline = text_of(html[html.index('id="timeline"') :].split("</table>")[0])
    assert "gearing up" in timeline and "training" in timeline

    svg = client.get("/jobs/j1/epochs.svg")
    assert svg.status_code == 200 and svg.mimetype == "image/svg+xml"
    body = svg.get_data(as_text=True)
    assert body.count("<polyline") == 2  # loss and accuracy, one panel each
    assert "loss" in body and "accuracy" in body

    png = client.get("/jobs/j1/timeline.png")
    assert png.status_code == 200 and png.mimetype == "image/png"
    assert png.data.startswith(b"\x89PNG")


def test_user_input_is_shown_as_text_never_as_markup(store: FirestoreStore) -> None:
    job = fail_job(training(a_job("j-xss", 0, description=XSS)), S.FAILED, at(90), XSS)
    store.create_job(job)
    store.put_epoch("j-xss", an_epoch(1, 0.5).model_copy(update={"metrics": {XSS: 1.0}}))
    client = client_of(store)
    for path in ("/", "/jobs/j-xss", "/jobs/j-xss/live", "/fragments/jobs"):
        html = client.get(path).get_data(as_text=True)
        assert "<script>window.pwned" not in html and "<img src=x" not in html, path
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in client.get("/jobs/j-xss").text
    svg = client.get("/jobs/j-xss/epochs.svg").get_data(as_text=True)
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_an_unknown_job_is_a_404_that_names_it(store: FirestoreStore) -> None:
    client = client_of(store)
    for path in ("/jobs/nope<b>", "/jobs/nope/live", "/jobs/nope/epochs.svg"):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert "no job nope" in answer.text and "<b>" not in answer.text


def test_the_dashboard_is_read_only(store: FirestoreStore) -> None:
    app = create_app(store)
    for rule in app.url_map.iter_rules():
        assert rule.methods is not None
        assert rule.methods <= {"GET", "HEAD", "OPTIONS"}, rule
    client = app.test_client()
    assert client.post("/").status_code == 405
    assert client.delete("/jobs/j1").status_code == 405


def test_html_answers_forbid_scripts_from_elsewhere(store: FirestoreStore) -> None:
    policy = client_of(store).get("/").headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy


def test_the_hub_tells_a_subscriber_when_a_job_or_its_epochs_change(
    store: FirestoreStore,
) -> None:
    store.create_job(a_job("j1", 0))
    with Hub(store, jobs_shown=10) as hub, hub.subscribe(["jobs", "job/j1"]) as changes:
        # Each listener first reports what is there: the page re-reads once.
        first = set()
        while (topic := changes.next(timeout_s=2.0)) is not None:
            first.add(topic)
        assert first == {"jobs", "job/j1"}
        store.put_epoch("j1", an_epoch(1, 0.5))
        assert changes.next(timeout_s=10) == "job/j1"
        store.update_job("j1", lambda j: move_job(j, S.CONNECTING_SERVER, datetime.now(UTC)))
        seen = {changes.next(timeout_s=10), changes.next(timeout_s=10)}
        assert seen == {"jobs", "job/j1"}


def test_a_burst_of_changes_makes_one_re_read_per_topic(store: FirestoreStore) -> None:
    """An epoch, the job's progress and its instance land together: the page
    fetches each fragment once, not once per write."""
    with Hub(store) as hub, hub.subscribe(["job/j9", "instances"]) as changes:
        while changes.next(timeout_s=1.0) is not None:
            pass  # the listeners' first reports
        for n in range(3):
            store.put_epoch("j9", an_epoch(n + 1, 0.5))
            store.create_instance(instance(f"sl-j9-a{n + 1}", "j9"))
        time.sleep(2.0)  # every write reported before anything is taken
        told = []
        while (topic := changes.next(timeout_s=1.0)) is not None:
            told.append(topic)
        assert sorted(told) == ["instances", "job/j9"]


def test_the_hub_refuses_a_topic_it_does_not_know(store: FirestoreStore) -> None:
    with Hub(store) as hub, pytest.raises(ValueError, match="'bogus'"):
        hub.subscribe(["bogus"])
    answer = create_app(store, hub=Hub(store)).test_client().get("/events?topic=bogus")
    assert answer.status_code == 400 and "bogus" in answer.text


def test_the_event_stream_sends_the_topic_that_changed(store: FirestoreStore) -> None:
    store.create_job(a_job("j1", 0))
    with Hub(store, jobs_shown=10) as hub:
        answer = client_of(store, hub).get("/events?topic=instances", buffered=False)
        assert answer.mimetype == "text/event-stream"
        chunks = iter(answer.response)
        got: list[str] = []

        def read() -> None:  # the first data line: the listener's first report
            while not any("data:" in chunk for chunk in got):
                chunk = next(chunks)
                got.append(chunk.decode() if isinstance(chunk, bytes) else str(chunk))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=15)
        answer.close()
        assert got[0].startswith("retry: ")
        assert "data: instances\n\n" in got[-1]


def test_the_jobs_fragment_is_the_pages_table(store: FirestoreStore) -> None:
    """What the page swaps in on a change is the whole table, rows as on the page."""
    for n in range(3):
        store.create_job(a_job(f"j{n}", n))
    client = client_of(store)
    fragment = client.get("/fragments/jobs").get_data(as_text=True)
    page = client.get("/").get_data(as_text=True)
    rows = re.findall(r'id="job-(j\d)"', fragment)
    assert rows == ["j2", "j1", "j0"] == re.findall(r'id="job-(j\d)"', page)


def restarted_preempted_and_failed() -> JobDoc:
    """A recorded job whose attempt 1 exited 3 and was restarted
    (max_restarts_on_errors=1), and whose attempt 2 was preempted past
    max_preemptions=0: as the handlers leave it."""
    spec = {
        "max_restarts_on_errors": 1,
        "max_preemptions": 0,
        "record": True,
        "code_uri": "gs://spotline-local/code/j-policy",
    }
    job = a_job("j-policy", 0, **spec)
    job = job.model_copy(
        update={"record": record_for("gs://spotline-local/jobs/j-policy", job.spec)}
    )
    for attempt, start in ((1, 10), (2, 70)):
        name = f"sl-j-policy-a{attempt}"
        job = vm_recorded(job, name, "us-central1-a", "g2-standard-4", at(start), 0.28, 0.71)
        job = move_job(job, S.TRAINING, at(start + 20))
        if attempt == 1:
            finished = JobFinished(
                job_id="j-policy", attempt=1, instance=name, sent_at=at(60), exit_code=3
            )
            job = job_finished(job, finished, at(60))
    return vm_lost(job, "sl-j-policy-a2", 2, S.PREEMPTED, at(120), "preempted (log sink)")


def test_a_job_page_shows_the_failure_policy_and_the_record(store: FirestoreStore) -> None:
    """The counters against their limits (as ``spotline status JOB``), the
    limit that ended the job, how each attempt ended (ERRORED, PREEMPTED),
    and where a recorded job's snapshot is."""
    job = restarted_preempted_and_failed()
    store.create_job(job)
    html = client_of(store).get("/jobs/j-policy").get_data(as_text=True)
    summary = text_of(html[html.index('class="summary"') :].split("</dl>")[0])
    assert (
        "restarts 1 on errors (max_restarts_on_errors=1); preemptions 1 (max_preemptions=0)"
        in summary
    )
    assert "ended by max_preemptions=0 (1 preemption)" in summary
    assert "recorded code gs://spotline-local/jobs/j-policy/record/code" in summary
    attempts = html[html.index('id="attempts"') :].split("</table>")[0]
    rows = [text_of(row) for row in re.findall(r"<tr>(.*?)</tr>", attempts, re.S)[1:]]
    assert rows == [
        "1 sl-j-policy-a1 g2-standard-4 us-central1-a RECOVERING/ERRORED failed $0.0039",
        "2 sl-j-policy-a2 g2-standard-4 us-central1-a RECOVERING/PREEMPTED preempted $0.0039",
    ]
    # The live fragment the page swaps in shows the same.
    fragment = client_of(store).get("/jobs/j-policy/live").get_data(as_text=True)
    assert "ended by" in fragment and 'id="attempts"' in fragment


def test_a_job_no_limit_ended_shows_its_counters_only(store: FirestoreStore) -> None:
    store.create_job(training(a_job("j-plain", 0)))
    html = client_of(store).get("/jobs/j-plain").get_data(as_text=True)
    summary = text_of(html[html.index('class="summary"') :].split("</dl>")[0])
    assert "restarts 0 on errors (max_restarts_on_errors=0)" in summary
    assert "ended by" not in summary and "recorded" not in summary


def test_a_vm_no_attempt_recorded_is_an_attempts_row_with_its_cost(store: FirestoreStore) -> None:
    """Canceled while its VM was being made (``unrecorded_vms``): the VM's
    minutes are in the job's cost, and its row says why no attempt has it."""
    canceled = fail_job(a_job("j-cut", 0), S.CANCELED, at(30), "wrong learning rate")
    made = MadeVm("j-cut", 1, "sl-j-cut-a1", "us-central1-a", "g2-standard-4", at(5), 0.28, 0.71)
    store.create_job(charge_unrecorded(canceled, made, at(65)))
    html = client_of(store).get("/jobs/j-cut").get_data(as_text=True)
    attempts = html[html.index('id="attempts"') :].split("</table>")[0]
    rows = [text_of(row) for row in re.findall(r"<tr>(.*?)</tr>", attempts, re.S)[1:]]
    assert rows == [
        "1 sl-j-cut-a1 g2-standard-4 us-central1-a made, never recorded canceled $0.0047"
    ]
    assert "cost $0.0047" in text_of(html)
