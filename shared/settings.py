"""Settings, read once from the environment (Cloud Functions sets them at deploy).

Every knob has a default that works locally; production sets SPOTLINE_PROJECT,
SPOTLINE_STORAGE_ROOT (a gs:// prefix) and SPOTLINE_IMAGE at deploy time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from shared.domain.pricing import CoolingRule

TOPICS = {
    "submit": "spotline-submit",
    "cancel": "spotline-cancel",
    "vm_booted": "spotline-vm-booted",
    "epoch_done": "spotline-epoch-done",
    "job_finished": "spotline-job-finished",
    "spot_preempted": "spotline-spot-preempted",
    "reaper_tick": "spotline-reaper-tick",
    "dead_letter": "spotline-dead-letter",
}

DEFAULT_ZONES = {
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
    "us-east1": ("us-east1-b", "us-east1-c", "us-east1-d"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
}


@dataclass(frozen=True)
class Settings:
    project: str = "spotline-local"
    region: str = "us-central1"
    zones: tuple[str, ...] = DEFAULT_ZONES["us-central1"]
    compute_endpoint: str | None = None  # None: compute.googleapis.com; else a local cloud
    storage_root: str = "file:///tmp/spotline-storage"  # gs://BUCKET/PREFIX in the cloud
    image: str = "projects/PROJECT/global/images/family/spotline-agent"
    service_account: str | None = None
    heartbeat_s: float = 30.0
    max_event_age_s: float = 3600.0  # older deliveries are dropped with a log line
    # The reaper's limits: a booted VM silent for stall_timeout_s, or a VM not
    # booted after boot_timeout_s, is stalled; a job left in REQUESTING_SERVER
    # for request_timeout_s (its function died) is placed again.
    stall_timeout_s: float = 300.0
    boot_timeout_s: float = 600.0
    request_timeout_s: float = 120.0
    max_active_jobs: int = 5  # per user, as the seed
    # Cooling price escalation: the seed's BASELINE and UNIT_PERCENTAGE.
    cooling_baseline_min: int = 10
    cooling_unit: float = 0.01
    max_active_instances: int = 5
    max_stopped_instances: int = 4
    topics: dict[str, str] = field(default_factory=lambda: dict(TOPICS))

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        project = env.get("SPOTLINE_PROJECT") or env.get("GOOGLE_CLOUD_PROJECT") or cls.project
        region = env.get("SPOTLINE_REGION", cls.region)
        zones_text = env.get("SPOTLINE_ZONES", "")
        zones = tuple(z for z in zones_text.split(",") if z) or DEFAULT_ZONES.get(region, ())
        return cls(
            project=project,
            region=region,
            zones=zones,
            compute_endpoint=env.get("SPOTLINE_COMPUTE_ENDPOINT") or None,
            storage_root=env.get("SPOTLINE_STORAGE_ROOT", cls.storage_root),
            image=env.get(
                "SPOTLINE_IMAGE", f"projects/{project}/global/images/family/spotline-agent"
            ),
            service_account=env.get("SPOTLINE_SERVICE_ACCOUNT") or None,
            heartbeat_s=float(env.get("SPOTLINE_HEARTBEAT_S", cls.heartbeat_s)),
            max_event_age_s=float(env.get("SPOTLINE_MAX_EVENT_AGE_S", cls.max_event_age_s)),
            stall_timeout_s=float(env.get("SPOTLINE_STALL_TIMEOUT_S", cls.stall_timeout_s)),
            boot_timeout_s=float(env.get("SPOTLINE_BOOT_TIMEOUT_S", cls.boot_timeout_s)),
            request_timeout_s=float(env.get("SPOTLINE_REQUEST_TIMEOUT_S", cls.request_timeout_s)),
            max_active_jobs=int(env.get("SPOTLINE_MAX_ACTIVE_JOBS", cls.max_active_jobs)),
            cooling_baseline_min=int(
                env.get("SPOTLINE_COOLING_BASELINE_MIN", cls.cooling_baseline_min)
            ),
            cooling_unit=float(env.get("SPOTLINE_COOLING_UNIT", cls.cooling_unit)),
            max_active_instances=int(
                env.get("SPOTLINE_MAX_ACTIVE_INSTANCES", cls.max_active_instances)
            ),
            max_stopped_instances=int(
                env.get("SPOTLINE_MAX_STOPPED_INSTANCES", cls.max_stopped_instances)
            ),
        )

    def to_env(self) -> dict[str, str]:
        """The environment that ``from_env`` reads back as these settings: what
        ``spotline deploy`` gives the functions."""
        env = {
            "SPOTLINE_PROJECT": self.project,
            "SPOTLINE_REGION": self.region,
            "SPOTLINE_ZONES": ",".join(self.zones),
            "SPOTLINE_STORAGE_ROOT": self.storage_root,
            "SPOTLINE_IMAGE": self.image,
            "SPOTLINE_HEARTBEAT_S": repr(self.heartbeat_s),
            "SPOTLINE_MAX_EVENT_AGE_S": repr(self.max_event_age_s),
            "SPOTLINE_STALL_TIMEOUT_S": repr(self.stall_timeout_s),
            "SPOTLINE_BOOT_TIMEOUT_S": repr(self.boot_timeout_s),
            "SPOTLINE_REQUEST_TIMEOUT_S": repr(self.request_timeout_s),
            "SPOTLINE_MAX_ACTIVE_JOBS": str(self.max_active_jobs),
            "SPOTLINE_COOLING_BASELINE_MIN": str(self.cooling_baseline_min),
            "SPOTLINE_COOLING_UNIT": repr(self.cooling_unit),
            "SPOTLINE_MAX_ACTIVE_INSTANCES": str(self.max_active_instances),
            "SPOTLINE_MAX_STOPPED_INSTANCES": str(self.max_stopped_instances),
        }
        if self.compute_endpoint:
            env["SPOTLINE_COMPUTE_ENDPOINT"] = self.compute_endpoint
        if self.service_account:
            env["SPOTLINE_SERVICE_ACCOUNT"] = self.service_account
        return env

    def job_prefix(self, job_id: str) -> str:
        """Where a job's checkpoints and outputs live (an fsspec URL)."""
        return f"{self.storage_root.rstrip('/')}/jobs/{job_id}"

    @property
    def cooling_rule(self) -> CoolingRule:
        return CoolingRule(self.cooling_baseline_min, self.cooling_unit)
