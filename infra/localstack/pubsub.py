"""Applying the topology to the Pub/Sub emulator: topics and push subscriptions."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from spotline.infra.topology import DEAD_LETTER_TOPIC, FUNCTIONS, Function, topic_names, user_routes
from spotline.shared.settings import TOPICS


def apply_topology(project: str, endpoints: dict[str, str], users: Sequence[str] = ()) -> None:
    """Create every topic, and for each function a push subscription to its
    local server; with ``users`` (the per-user mode), each user's own submit and
    cancel topics and their VMs' own event topics too, pushed to the same
    servers. ``endpoints`` maps entry point -> base URL.

    The push path is ``/projects/P/topics/T``: the functions framework reads
    the topic from it to build the CloudEvent's source, as in production.
    Needs PUBSUB_EMULATOR_HOST set. Idempotent.
    """
    from google.api_core.exceptions import AlreadyExists
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

    publisher = PublisherClient()
    subscriber = SubscriberClient()
    routes = [(f, TOPICS[f.topic], f.subscription) for f in FUNCTIONS]
    routes += [(r.function, r.topic, r.subscription) for r in user_routes(list(users))]
    for topic in [*topic_names(), *(topic for _, topic, _ in routes)]:
        with contextlib.suppress(AlreadyExists):
            publisher.create_topic(name=publisher.topic_path(project, topic))
    dead_letter = publisher.topic_path(project, TOPICS[DEAD_LETTER_TOPIC])
    for function, topic, name in routes:
        topic_path = publisher.topic_path(project, topic)
        request = _push_subscription(function, topic_path, endpoints, dead_letter)
        request["name"] = subscriber.subscription_path(project, name)
        with contextlib.suppress(AlreadyExists):
            subscriber.create_subscription(request=request)
    subscriber.close()


def _push_subscription(
    function: Function, topic_path: str, endpoints: dict[str, str], dead_letter: str
) -> dict[str, Any]:
    from google.protobuf import duration_pb2

    return {
        "topic": topic_path,
        "ack_deadline_seconds": min(function.ack_deadline_s, 600),
        "push_config": {"push_endpoint": f"{endpoints[function.entry_point]}/{topic_path}"},
        "retry_policy": {
            "minimum_backoff": duration_pb2.Duration(seconds=function.retry.minimum_backoff_s),
            "maximum_backoff": duration_pb2.Duration(seconds=function.retry.maximum_backoff_s),
        },
        "dead_letter_policy": {
            "dead_letter_topic": dead_letter,
            "max_delivery_attempts": function.max_delivery_attempts,
        },
    }
