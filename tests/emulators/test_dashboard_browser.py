"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``,
installed by ``make tools``) driven by Playwright opens the dashboard while a
job runs, and checks what a person sees: the job's row, its status changing
without a reload as the handlers move it, the progress bar, then the job's
page with its history and both charts loaded.

Screenshots are kept in ``.artifacts/`` at the repository root (gitignored):
``dashboard.png`` (the jobs page) and ``dashboard-job.png`` (the job's page).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spotline.infra.dashboard.server import DashboardServer
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import EpochDoc, JobDoc
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus as S
from spotline.shared.domain.transitions import move_job
from tests.documents import instance

ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
SPEC = {
    "user": "alice",
    "machine_ids": ["g2-standard-4"],
    "trainer": "digits_mlp",
    "epochs": 5,
    "description": 'digits <b>not bold</b><img src=x onerror="window.pwned = 1">',
}
WAIT_MS = 20_000  # a listener's push, a fragment's fetch: slow on a loaded machine


def chromium() -> str | None:
    """Debian's ``chromium``, or the browser SPOTLINE_CHROMIUM names."""
    return shutil.which(os.environ.get("SPOTLINE_CHROMIUM") or "chromium")


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium() is None:
        return "no chromium on PATH (make tools installs Debian's; or set SPOTLINE_CHROMIUM)"
    return None


@pytest.fixture
def page() -> Iterator[Any]:
    missing = _missing()
    if missing and os.environ.get("SPOTLINE_REQUIRE_BROWSER"):
        pytest.fail(f"SPOTLINE_REQUIRE_BROWSER is set (as in CI) and {missing}")
    if missing:
        print(f"\n!!! SKIPPING THE DASHBOARD BROWSER TEST: {missing} !!!", file=sys.stderr)
        pytest.skip(f"!!! no browser: {missing} !!!")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        # Playwright's own browser download cannot be assumed: Debian's chromium.
        # No sandbox: CI runs as root, where Chromium refuses to start with one.
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            view = browser.new_page(viewport={"width": 1400, "height": 700})
            view.set_default_timeout(WAIT_MS)
            yield view
        finally:
            browser.close()


def until(page: Any, condition: str) -> None:
    """Wait for a JavaScript expression to be true. Not ``wait_for_function``:
    it evaluates its string with ``eval``, which the pages' CSP forbids (and
    should: the test runs under the policy a person's browser gets)."""
    import time

    deadline = time.monotonic() + WAIT_MS / 1000
    while not page.evaluate(f"() => Boolean({condition})"):
        assert time.monotonic() < deadline, f"not true within {WAIT_MS} ms: {condition}"
        time.sleep(0.1)


def moved(job: JobDoc, to: S) -> JobDoc:
    return move_job(job, to, datetime.now(UTC))


def trained(job: JobDoc, epoch: int) -> JobDoc:
    return job.model_copy(
        update={"epoch": epoch, "progress": f"{epoch}/{job.epochs}", "cost_usd": 0.0042 * epoch}
    )


def epoch_record(n: int, started: datetime) -> EpochDoc:
    return EpochDoc(
        epoch=n, epochs=5, attempt=1, step=20 * n,
        metrics={"loss": 1.0 / n, "accuracy": 1 - 0.5 / n},
        instance="sl-web1-a1", at=started + timedelta(seconds=10 * n),
    )  # fmt: skip


def test_a_person_watches_a_job_run_in_chromium(project: str, page: Any) -> None:
    store = FirestoreStore(project)
    job = new_job(JobSpec.model_validate(SPEC), "web1", "m-web1", datetime.now(UTC))
    store.create_job(job)
    store.create_instance(instance("sl-web1-a1", "web1", price_per_hour=0.2346))
    with DashboardServer(store) as server:
        page.goto(server.url)
        row = page.locator("#job-web1")
        assert row.locator(".status-text").inner_text() == "QUEUING"
        # The description's markup is shown as text, and nothing of it ran.
        assert 'digits <b>not bold</b><img src=x onerror="window.pwned = 1">' in row.inner_text()
        assert page.evaluate("() => window.pwned === undefined")
        assert page.locator("#instance-sl-web1-a1").inner_text().count("SPOT") == 1
        until(page, "document.getElementById('live-state').textContent === 'live'")
        page.evaluate("window.notReloaded = true")

        # The handlers move it, as a VM boots and trains: nobody reloads the page.
        started = datetime.now(UTC)
        for to in (S.CONNECTING_SERVER, S.GEARING_UP_ENV, S.TRAINING):
            store.update_job("web1", functools.partial(moved, to=to))
        for n in (1, 2):
            store.put_epoch("web1", epoch_record(n, started))
            store.update_job("web1", functools.partial(trained, epoch=n))
        until(page, "document.querySelector('#job-web1 .status-text').textContent === 'TRAINING'")
        until(page, "document.querySelector('#job-web1 progress').value === 2")
        assert page.evaluate("window.notReloaded") is True
        assert row.locator("progress").get_attribute("max") == "5"
        assert "2/5" in row.locator(".epoch").inner_text()
        assert "$0.0084" in row.inner_text()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

        page.click("#job-web1 a")
        page.wait_for_url(f"{server.url}/jobs/web1")
        history = page.locator("#history tbody tr")
        assert history.count() == 4  # submitted, then the three moves
        assert "GEARING_UP_ENV" in page.locator("#history").inner_text()
        assert page.locator("#epochs tbody tr").count() == 2
        for chart in ("#epochs-chart", "#timeline-chart"):
            until(
                page,
                f"document.querySelector('{chart}').complete "
                f"&& document.querySelector('{chart}').naturalWidth > 0",
            )
        # A third epoch arrives: the job's page follows it too.
        store.put_epoch("web1", epoch_record(3, started))
        store.update_job("web1", functools.partial(trained, epoch=3))
        until(page, "document.querySelector('#epochs tbody').rows.length === 3")
        until(page, "document.querySelector('#epochs-chart').naturalWidth > 0")
        page.screenshot(path=str(ARTIFACTS / "dashboard-job.png"), full_page=True)
