"""Getting started's three ways to submit a job (the README shows the same
blocks, tests/e2e/test_docs_site.py checks), run as written from the
repository's root on the local stack: the Google Cloud CLI's own
publish (the real ``gcloud``, pointed at the Pub/Sub emulator), ``spotline
submit``, and the Python call as a script of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from tests.doc_examples import blocks, run_python

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
THREE_WAYS = ("docs/getting-started.md", "## Your own job, three ways")


def command_line(starts: str) -> str:
    lines = "".join(blocks(*THREE_WAYS, "sh")).splitlines()
    [line] = [line for line in lines if line.startswith(starts)]
    return line


def new_job_of(store: FirestoreStore, user: str, known: set[str]) -> JobDoc:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        fresh = [job for job in store.recent_jobs(20, user=user) if job.job_id not in known]
        if fresh:
            return fresh[0]
        time.sleep(0.3)
    raise AssertionError(f"no new job of {user} within 60 s")


def run_shell(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="no Google Cloud CLI")
def test_the_gcloud_line_publishes_a_job(local_stack: LocalStack, tmp_path: Path) -> None:
    store = FirestoreStore(local_stack.options.project)
    known = {job.job_id for job in store.recent_jobs(50, user="alice")}
    env = {
        **os.environ,
        # gcloud's own publish, sent to the emulator with no credentials.
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB": f"http://{os.environ['PUBSUB_EMULATOR_HOST']}/",
        "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
        "CLOUDSDK_CORE_PROJECT": local_stack.options.project,
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
    }

    done = run_shell(command_line("gcloud pubsub topics publish"), env)

    assert done.returncode == 0, done.stderr
    job = new_job_of(store, "alice", known)
    example = json.loads((REPO / "examples" / "digits.json").read_text())
    assert (job.spec.trainer, job.spec.epochs) == (example["trainer"], example["epochs"])
    subprocess.run(
        [sys.executable, "-m", "spotline.infra.cli.commands", "cancel", job.job_id],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_the_cli_line_submits_a_job(local_stack: LocalStack) -> None:
    store = FirestoreStore(local_stack.options.project)
    known = {job.job_id for job in store.recent_jobs(50, user="alice")}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    done = run_shell(command_line("spotline submit"), env)

    assert done.returncode == 0, done.stderr
    job = new_job_of(store, "alice", known)
    assert job.job_id in done.stdout
    assert run_shell(f"spotline cancel {job.job_id}", env).returncode == 0


def test_the_python_call_runs_the_job_to_completion(
    shared_stack: LocalStack, tmp_path: Path
) -> None:
    [example] = blocks(*THREE_WAYS, "python")

    # From the root: the example names examples/digits.json.
    done = run_python(shared_stack, example, tmp_path, cwd=REPO)

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[1] == "COMPLETED"
