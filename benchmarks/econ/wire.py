"""What spotline's functions receive in a simulated run: Pub/Sub messages as
Eventarc's CloudEvents, Cloud Logging's preemption entry, the settings."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from cloudevents.http import CloudEvent

from spotline.shared.contract.events import PREEMPTED_METHOD
from spotline.shared.settings import TOPICS, Settings

PROJECT = "spotline-econ"
ZONES = ("us-central1-a", "us-central1-b")


def cloud_event(topic: str, data: bytes, message_id: str, published: datetime) -> CloudEvent:
    """The Pub/Sub message on ``topic`` (a topology key) in MessagePublishedData."""
    name = f"projects/{PROJECT}/topics/{TOPICS[topic]}"
    return CloudEvent(
        {
            "id": message_id,
            "source": f"//pubsub.googleapis.com/{name}",
            "type": "google.cloud.pubsub.topic.v1.messagePublished",
            "specversion": "1.0",
        },
        {
            "message": {
                "data": base64.b64encode(data).decode(),
                "messageId": message_id,
                "publishTime": published.isoformat(),
            },
            "subscription": f"projects/{PROJECT}/subscriptions/{topic}",
        },
    )


def log_entry(zone: str, name: str, instance_id: str) -> bytes:
    """The Cloud Logging sink's message for a preemption (its VM and numeric id)."""
    return json.dumps(
        {
            "protoPayload": {
                "methodName": PREEMPTED_METHOD,
                "resourceName": f"projects/{PROJECT}/zones/{zone}/instances/{name}",
            },
            "resource": {
                "type": "gce_instance",
                "labels": {"zone": zone, "instance_id": instance_id},
            },
        }
    ).encode()


def settings(endpoint: str) -> Settings:
    """As deployed, with quotas out of the way (one job, many attempts)."""
    return Settings(
        project=PROJECT,
        compute_endpoint=endpoint,
        zones=ZONES,
        storage_root="memory://spotline-econ",
        max_active_jobs=1000,
        max_active_instances=1000,
    )
