"""The Pub/Sub topic of each event: fixed names, which the topology declares
and deploy creates (a light module: the CLI imports it on every command)."""

TOPICS = {
    "submit": "spotline-submit",
    "cancel": "spotline-cancel",
    "vm_booted": "spotline-vm-booted",
    "epoch_done": "spotline-epoch-done",
    "job_finished": "spotline-job-finished",
    "spot_preempted": "spotline-spot-preempted",
    "reaper_tick": "spotline-reaper-tick",
    # The tick's pages, each swept by its own invocation (spotline.functions.ops.sweep_pages).
    "reaper_page": "spotline-reaper-page",
    # Every change of a job's state, for anyone to follow (docs/guides/notifications.md).
    "job_events": "spotline-job-events",
    "dead_letter": "spotline-dead-letter",
}

# Each person's own submit and cancel topics, in the mode where spotline knows
# who published (``Settings.user_topics``; SECURITY.md): only that person may
# publish on them, so a message that arrives through one is that person's.
USER_TOPIC_KEYS = ("submit", "cancel")
# What a VM publishes. In the per-user mode each user's VMs publish on that
# user's own copies of these, which only the user's VM account may publish on:
# an event that arrives through one is about a job of that user's.
VM_EVENT_KEYS = ("vm_booted", "epoch_done", "job_finished", "spot_preempted")
PER_USER_KEYS = USER_TOPIC_KEYS + VM_EVENT_KEYS
_USER_MARK = "-u-"


def user_topic(key: str, user: str) -> str:
    """``spotline-submit-u-alice``: the topic ``key`` of ``user``."""
    if key not in PER_USER_KEYS:
        raise KeyError(f"{key} has no per-user topics (only {', '.join(PER_USER_KEYS)})")
    return f"{TOPICS[key]}{_USER_MARK}{user}"


def user_of_topic(key: str, topic: str) -> str | None:
    """The user whose ``key`` topic ``topic`` is; None for any other topic."""
    prefix = f"{TOPICS[key]}{_USER_MARK}"
    user = topic.removeprefix(prefix)
    return user if topic.startswith(prefix) and user else None


def topics_for(user: str | None, users: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The topics ``user`` publishes on: their own submit and cancel topics
    where they are one of ``users`` (the per-user mode), else the shared ones."""
    topics = dict(TOPICS)
    if user is not None and user in users:
        topics.update({key: user_topic(key, user) for key in USER_TOPIC_KEYS})
    return topics


def vm_topics_for(user: str, users: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The topics the VMs of ``user``'s jobs publish on, by key, where they
    differ from the shared ones: the user's own in the per-user mode (``user``
    one of ``users``), else none."""
    if user not in users:
        return {}
    return {key: user_topic(key, user) for key in VM_EVENT_KEYS}
