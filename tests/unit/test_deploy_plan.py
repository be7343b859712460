"""The deploy's requests, built with no call: functions, subscriptions, the
schedule, the source archive."""

from __future__ import annotations

import io
import re
import tomllib
import zipfile
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from google.cloud import functions_v2, scheduler_v1

from spotline.functions import main
from spotline.infra.deploy import plan
from spotline.infra.deploy.source import NOT_IN_FUNCTIONS, build_archive, requirements
from spotline.infra.topology import FUNCTIONS, Function
from spotline.shared.settings import Settings

SETTINGS = Settings(
    project="acme-ml",
    region="us-central1",
    storage_root="gs://acme-spotline/runs",
    image="projects/acme-ml/global/images/family/spotline-agent",
    service_account="spotline-vm@acme-ml.iam.gserviceaccount.com",
)
CONFIG = plan.DeployConfig(SETTINGS, "spotline-fn@acme-ml.iam.gserviceaccount.com")
SUBMIT = next(f for f in FUNCTIONS if f.entry_point == "submit_job")
REAPER = next(f for f in FUNCTIONS if f.entry_point == "reaper")
SOURCE = functions_v2.StorageSource(bucket="gcf-v2-uploads-1-us-central1", object_="abc.zip")


def deployed(desired: functions_v2.Function) -> functions_v2.Function:
    """``desired`` as Cloud Functions answers a get: its output fields filled in,
    variables and labels of its own added."""
    current = functions_v2.Function(desired, state=functions_v2.Function.State.ACTIVE)
    current.build_config.source = functions_v2.Source(storage_source=SOURCE)
    current.event_trigger.trigger = "projects/acme-ml/locations/us-central1/triggers/t-1"
    current.service_config.uri = "https://spotline-submit-job-xyz-uc.a.run.app"
    current.service_config.environment_variables = {
        **desired.service_config.environment_variables,
        "LOG_EXECUTION_ID": "true",
    }
    current.labels = {**desired.labels, "goog-managed-by": "cloudfunctions"}
    return current


def test_a_function_is_triggered_by_its_topic_and_retries_failures() -> None:
    function = plan.desired_function(CONFIG, SUBMIT, "d1", SOURCE)

    assert function.name == "projects/acme-ml/locations/us-central1/functions/spotline-submit-job"
    assert function.environment == functions_v2.Environment.GEN_2
    assert function.build_config.runtime == "python312"
    assert function.build_config.entry_point == "submit_job"
    assert function.build_config.source.storage_source == SOURCE
    trigger = function.event_trigger
    assert trigger.event_type == "google.cloud.pubsub.topic.v1.messagePublished"
    assert trigger.pubsub_topic == "projects/acme-ml/topics/spotline-submit"
    assert trigger.retry_policy == functions_v2.EventTrigger.RetryPolicy.RETRY_POLICY_RETRY
    assert trigger.service_account_email == "spotline-fn@acme-ml.iam.gserviceaccount.com"
    service = function.service_config
    assert (service.timeout_seconds, service.available_memory) == (300, "512Mi")
    assert service.service_account_email == "spotline-fn@acme-ml.iam.gserviceaccount.com"
    assert dict(function.labels) == {"spotline": "true", "spotline-source": "d1"}


def test_the_functions_read_back_the_deployed_settings() -> None:
    function = plan.desired_function(CONFIG, SUBMIT, "d1")
    env = dict(function.service_config.environment_variables)

    assert Settings.from_env(env) == SETTINGS
    assert "SPOTLINE_COMPUTE_ENDPOINT" not in env  # compute.googleapis.com
    assert env["SPOTLINE_STORAGE_ROOT"] == "gs://acme-spotline/runs"
    assert env["SPOTLINE_SERVICE_ACCOUNT"] == "spotline-vm@acme-ml.iam.gserviceaccount.com"
    assert env["SPOTLINE_ZONES"] == "us-central1-a,us-central1-b,us-central1-c,us-central1-f"


def test_every_entry_point_is_exported_by_main_and_has_a_valid_name() -> None:
    for function in FUNCTIONS:
        assert callable(getattr(main, function.entry_point))
    assert plan.problems(CONFIG) == []


def test_a_function_that_runs_this_source_and_these_settings_needs_no_update() -> None:
    desired = plan.desired_function(CONFIG, SUBMIT, "d1")
    current = deployed(plan.desired_function(CONFIG, SUBMIT, "d1", SOURCE))

    assert not plan.needs_source(current, "d1")
    assert plan.function_update(current, desired) is None


def test_new_source_updates_the_source_and_its_label_only() -> None:
    current = deployed(plan.desired_function(CONFIG, SUBMIT, "d1", SOURCE))
    uploaded = functions_v2.StorageSource(bucket=SOURCE.bucket, object_="def.zip")

    assert plan.needs_source(current, "d2")
    update = plan.function_update(current, plan.desired_function(CONFIG, SUBMIT, "d2", uploaded))

    assert update is not None
    assert list(update.update_mask.paths) == ["build_config.source", "labels"]
    assert update.function.build_config.source.storage_source.object_ == "def.zip"
    # Labels Cloud Functions added are kept.
    assert dict(update.function.labels) == {
        "spotline": "true",
        "spotline-source": "d2",
        "goog-managed-by": "cloudfunctions",
    }


def test_a_function_whose_build_failed_is_built_again() -> None:
    current = deployed(plan.desired_function(CONFIG, SUBMIT, "d1", SOURCE))
    failed = functions_v2.Function(current, state=functions_v2.Function.State.FAILED)
    uploaded = functions_v2.StorageSource(bucket=SOURCE.bucket, object_="again.zip")

    assert plan.needs_source(failed, "d1")
    update = plan.function_update(failed, plan.desired_function(CONFIG, SUBMIT, "d1", uploaded))
    assert update is not None and list(update.update_mask.paths) == ["build_config.source"]


def test_changed_settings_update_the_variables_and_keep_the_platforms() -> None:
    current = deployed(plan.desired_function(CONFIG, SUBMIT, "d1", SOURCE))
    current.service_config.environment_variables["SPOTLINE_OLD_KNOB"] = "1"
    config = replace(CONFIG, settings=SETTINGS.replace(max_active_jobs=2))

    update = plan.function_update(current, plan.desired_function(config, SUBMIT, "d1"))

    assert update is not None
    assert list(update.update_mask.paths) == ["service_config.environment_variables"]
    env = dict(update.function.service_config.environment_variables)
    assert env["SPOTLINE_MAX_ACTIVE_JOBS"] == "2"
    assert env["LOG_EXECUTION_ID"] == "true"
    assert "SPOTLINE_OLD_KNOB" not in env


def test_a_changed_topology_updates_timeout_memory_and_trigger() -> None:
    current = deployed(plan.desired_function(CONFIG, SUBMIT, "d1", SOURCE))
    current.event_trigger = functions_v2.EventTrigger(
        current.event_trigger,
        retry_policy=functions_v2.EventTrigger.RetryPolicy.RETRY_POLICY_DO_NOT_RETRY,
    )
    changed = replace(SUBMIT, timeout_s=120, memory="1Gi")

    update = plan.function_update(current, plan.desired_function(CONFIG, changed, "d1"))

    assert update is not None
    assert list(update.update_mask.paths) == [
        "event_trigger",
        "service_config.available_memory",
        "service_config.timeout_seconds",
    ]


def test_the_trigger_subscription_gets_the_topology_delivery_policy() -> None:
    name = "projects/acme-ml/subscriptions/eventarc-us-central1-spotline-reaper-1-sub-2"
    desired = plan.desired_subscription(CONFIG, REAPER, name)

    assert desired.ack_deadline_seconds == 540
    assert desired.retry_policy.minimum_backoff == timedelta(seconds=30)
    assert desired.retry_policy.maximum_backoff == timedelta(seconds=60)
    assert desired.dead_letter_policy.dead_letter_topic == (
        "projects/acme-ml/topics/spotline-dead-letter"
    )
    assert desired.dead_letter_policy.max_delivery_attempts == 5

    # What Eventarc made: its default backoff (10-600 s), no dead letters.
    made = type(desired)(name=name, topic=desired.topic, ack_deadline_seconds=600)
    made.push_config.push_endpoint = "https://spotline-reaper-xyz-uc.a.run.app"
    update = plan.subscription_update(made, desired)
    assert update is not None
    assert list(update.update_mask.paths) == [
        "ack_deadline_seconds",
        "retry_policy",
        "dead_letter_policy",
    ]
    assert plan.subscription_update(desired, desired) is None


def test_the_reaper_job_publishes_a_tick_every_minute_in_utc() -> None:
    job = plan.desired_job(CONFIG)

    assert job.name == "projects/acme-ml/locations/us-central1/jobs/spotline-reaper"
    assert (job.schedule, job.time_zone) == ("* * * * *", "UTC")
    assert job.pubsub_target.topic_name == "projects/acme-ml/topics/spotline-reaper-tick"
    assert job.pubsub_target.data  # Scheduler refuses an empty message
    assert plan.job_update(scheduler_v1.Job(job), job) is None

    old = scheduler_v1.Job(job)
    old.schedule = "*/5 * * * *"
    update = plan.job_update(old, job)
    assert update is not None and list(update.update_mask.paths) == ["schedule"]


def test_problems_name_what_would_break_the_system() -> None:
    local = SETTINGS.replace(
        compute_endpoint="http://127.0.0.1:8089", storage_root="file:///tmp/s", zones=()
    )
    found = plan.problems(replace(CONFIG, settings=local))

    assert any("on Compute Engine, not http://127.0.0.1:8089" in p for p in found)
    assert any("gs:// URL" in p for p in found)
    assert any("no zones" in p for p in found)
    slow = Function("slow_job", "submit", timeout_s=600)
    assert "timeout 600 s is not 1-540" in " ".join(
        plan.problems(CONFIG, functions=(*FUNCTIONS, slow))
    )


def test_the_source_archive_holds_what_the_functions_import_and_nothing_else() -> None:
    archive = build_archive()

    names = set(zipfile.ZipFile(io.BytesIO(archive.data)).namelist())
    assert {"main.py", "requirements.txt", "spotline/shared/data/machines.json"} <= names
    assert "spotline/__init__.py" in names
    assert "spotline/functions/handlers/submit_job.py" in names
    assert "spotline/shared/adapters/gce_compute.py" in names
    assert all(n in ("main.py", "requirements.txt") or n.startswith("spotline/") for n in names)
    assert not any(
        n.startswith(("spotline/infra/", "spotline/vm_image/", "spotline/tests/")) for n in names
    )
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    # The root main.py Cloud Functions loads is the package's own entry points.
    zipped = zipfile.ZipFile(io.BytesIO(archive.data))
    assert zipped.read("main.py") == zipped.read("spotline/functions/main.py")
    # Reproducible: the digest says whether a function runs this source.
    assert build_archive().digest == archive.digest


def test_requirements_pin_the_runtime_dependencies_the_functions_import() -> None:
    lines = build_archive().requirements.splitlines()
    names = [line.split("==")[0] for line in lines]

    assert "functions-framework" in names  # the runtime installs it, but say so
    assert {"google-cloud-firestore", "google-cloud-pubsub", "google-cloud-compute"} <= set(names)
    assert "google-cloud-functions" not in names and "google-cloud-scheduler" not in names
    assert "gcsfs" not in names and "fsspec" not in names
    assert all("==" in line for line in lines)


def test_requirements_are_the_declared_dependencies_less_the_cli_and_storage_ones(
    repo_root: Path,
) -> None:
    # Read from the installed metadata (a wheel has no pyproject.toml): an
    # install older than pyproject.toml would deploy stale requirements.
    declared = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    expected = [
        spec
        for spec in declared["dependencies"]
        if re.split(r"[<>=!~\[ ;]", spec)[0].lower() not in NOT_IN_FUNCTIONS
    ]

    assert requirements(pin=False).splitlines() == sorted(expected, key=str.lower)


def test_the_functions_never_touch_storage_so_they_need_no_gcsfs() -> None:
    archive = zipfile.ZipFile(io.BytesIO(build_archive().data))
    sources = {n: archive.read(n).decode() for n in archive.namelist() if n.endswith(".py")}

    importing = [
        name
        for name, text in sources.items()
        if re.search(r"^\s*(import|from)\s+(fsspec|gcsfs)\b", text, re.MULTILINE)
    ]
    assert len(sources) > 20 and importing == []
