"""Settings written to an environment and read back: what deploy gives the functions."""

from __future__ import annotations

import inspect
import re

from shared.settings import Settings


def test_settings_survive_a_round_trip_through_the_environment() -> None:
    settings = Settings(
        project="p-1",
        region="europe-west4",
        zones=("europe-west4-a", "europe-west4-c"),
        compute_endpoint="http://127.0.0.1:8089",
        storage_root="gs://bucket/spotline",
        image="projects/p-1/global/images/family/spotline-agent",
        service_account="vm@p-1.iam.gserviceaccount.com",
        heartbeat_s=12.5,
        max_event_age_s=1800.0,
        stall_timeout_s=240.0,
        boot_timeout_s=420.0,
        request_timeout_s=90.0,
        max_active_jobs=3,
        cooling_baseline_min=5,
        cooling_unit=0.02,
        max_active_instances=7,
        max_stopped_instances=2,
    )

    assert Settings.from_env(settings.to_env()) == settings


def test_every_variable_from_env_reads_is_written_by_to_env() -> None:
    read = set(re.findall(r"SPOTLINE_[A-Z_]+", inspect.getsource(Settings.from_env)))
    written = Settings(compute_endpoint="http://x", service_account="sa@x").to_env()

    assert read == set(written)
