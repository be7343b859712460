"""Who published a submit or a cancel, and whether they may.

Pub/Sub does not tell a subscriber who published a message. What spotline can
know is the topic it came through: in the per-user mode (``Settings.user_topics``)
each person publishes on their own topics (``spotline-submit-u-alice``), which
IAM lets only them publish on, and each reaches the function through its own
push subscription whose endpoint path names the topic. The functions framework
turns that path into the CloudEvent's source, and only the functions' own
invoker may call them, so the topic a message came through is its publisher's.

A VM's events are judged the same way (``vm_event_refusal``): in the mode,
each user's VMs publish on that user's own event topics.

Without the mode, ``user`` in a spec is a quota and reuse key inside one trusted
project: anyone who may publish on the shared topics may name anyone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from spotline.shared.topics import TOPICS, user_of_topic

# //pubsub.googleapis.com/projects/P/topics/T: the CloudEvent source of a Pub/Sub message.
_SOURCE = re.compile(r"^//pubsub\.googleapis\.com/projects/[^/]+/topics/(?P<topic>[^/]+)$")


def topic_of(source: str) -> str | None:
    """The topic named by a Pub/Sub CloudEvent's source; None for another source."""
    match = _SOURCE.match(source)
    return match.group("topic") if match else None


def publisher(key: str, source: str, users: Sequence[str]) -> str | None:
    """The user whose own ``key`` topic the message came through (one of
    ``users``); None: it came through the shared topic (or another one)."""
    topic = topic_of(source)
    user = user_of_topic(key, topic) if topic else None
    return user if user in users else None


def refusal(key: str, owner: str, source: str, users: Sequence[str]) -> str | None:
    """Why a ``key`` message about ``owner``'s job (a submit for that user, or a
    cancel of their job) that came from ``source`` may not act; None: it may.

    With no per-user topics configured, anything on the shared topic may act.
    """
    if not users:
        return None
    by = publisher(key, source, users)
    topic = topic_of(source) or source or "an unknown source"
    if by is None:
        return (
            f"{topic} is not a user's own {key} topic: this deployment takes a {key} only on "
            f"the publisher's own topic ({TOPICS[key]}-u-USER)"
        )
    if by != owner:
        job = f"user {owner}" if key == "submit" else f"a job of {owner}'s"
        return f"{by} published on their own {key} topic for {job}: only {owner} may"
    return None


def vm_event_refusal(key: str, owner: str, source: str, users: Sequence[str]) -> str | None:
    """Why a VM's ``key`` event about a job of ``owner``'s that came from
    ``source`` may not act; None: it may.

    In the per-user mode a user's VMs publish on that user's own topics, which
    only that user's VM account may publish on: an event about ``owner``'s job
    is taken only through ``owner``'s own topic, so one user's VMs cannot act
    on, nor crowd, another user's events, whatever token they carry. With no
    per-user topics configured, the shared topics are the VMs' (the token
    alone binds an event to its job).
    """
    if not users:
        return None
    by = publisher(key, source, users)
    if by is None:
        topic = topic_of(source) or source or "an unknown source"
        return (
            f"{topic} is not a user's own {key} topic: in this deployment a VM publishes "
            f"its events on its user's own ({TOPICS[key]}-u-USER)"
        )
    if by != owner:
        return (
            f"it came through {by}'s own {key} topic and the job is {owner}'s: only "
            f"{owner}'s VMs' events are taken, on {owner}'s own topics"
        )
    return None
