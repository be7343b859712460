"""spotline's topology, declared once: topics, the functions they trigger,
each trigger's retry policy and dead-letter limit, and the reaper's schedule.

``spotline.infra.localstack.stack`` applies it to the Pub/Sub emulator (push subscriptions to
local functions-framework servers); ``spotline.infra.deploy.deployer`` (``spotline deploy``) applies
it to a real project: Cloud Functions with Pub/Sub triggers, the delivery policy
on the subscription Eventarc makes for each trigger, a Cloud Scheduler job. What
runs locally is what is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotline.shared.topics import PER_USER_KEYS, TOPICS, user_topic


@dataclass(frozen=True)
class RetryPolicy:
    """Pub/Sub's exponential backoff between redeliveries of a failed event."""

    minimum_backoff_s: int = 10
    maximum_backoff_s: int = 600


@dataclass(frozen=True)
class Function:
    """One Cloud Function and the topic that triggers it."""

    entry_point: str  # the name exported by spotline.functions.main
    topic: str  # key in spotline.shared.topics.TOPICS
    timeout_s: int = 60
    memory: str = "512Mi"
    ack_deadline_s: int = 60
    # After this many failed deliveries the event goes to the dead-letter topic.
    max_delivery_attempts: int = 10
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def function_id(self) -> str:
        """The deployed function's name (Cloud Functions takes letters and hyphens)."""
        return f"spotline-{self.entry_point.replace('_', '-')}"

    @property
    def subscription(self) -> str:
        """The local push subscription; in the cloud, Eventarc names its own."""
        return self.function_id


@dataclass(frozen=True)
class Schedule:
    """Cloud Scheduler publishing a tick; locally a loop in ``spotline up``."""

    job: str
    cron: str
    topic: str
    every_s: int  # what the cron means, for the local loop


FUNCTIONS: tuple[Function, ...] = (
    # Creating a VM waits for the zone operation: give it room.
    Function("submit_job", "submit", timeout_s=300, ack_deadline_s=300),
    Function("on_vm_booted", "vm_booted"),
    Function("on_epoch_done", "epoch_done"),
    Function("on_job_finished", "job_finished", timeout_s=300, ack_deadline_s=300),
    # Places the next attempt at once: room for a VM insert.
    Function("on_spot_preempted", "spot_preempted", timeout_s=300, ack_deadline_s=300),
    Function("cancel_job", "cancel", timeout_s=300, ack_deadline_s=300),
    # A job's webhook (``spotline.functions.ops.webhook``): a 5xx or a timeout raises,
    # and Pub/Sub's backoff is the retry policy.
    Function("notify_webhook", "job_events", timeout_s=60, ack_deadline_s=60),
    # A tick missed is the next tick: retry little, never pile up sweeps.
    Function(
        "reaper",
        "reaper_tick",
        timeout_s=540,
        ack_deadline_s=540,
        max_delivery_attempts=5,
        retry=RetryPolicy(minimum_backoff_s=30, maximum_backoff_s=60),
    ),
    # One page of a tick; a page retried past reaper_page_max_age_s is dropped.
    Function(
        "reaper_page",
        "reaper_page",
        timeout_s=540,
        ack_deadline_s=540,
        max_delivery_attempts=5,
        retry=RetryPolicy(minimum_backoff_s=10, maximum_backoff_s=30),
    ),
)

# The Cloud Functions runtime (Cloud Run functions offers python310 to python314
# at the time of writing); the code targets Python >= 3.11.
RUNTIME = "python312"
REAPER_SCHEDULE = Schedule(job="spotline-reaper", cron="* * * * *", topic="reaper_tick", every_s=60)
DEAD_LETTER_TOPIC = "dead_letter"


def topic_names() -> list[str]:
    return list(TOPICS.values())


@dataclass(frozen=True)
class UserRoute:
    """A user's own topic (submit, cancel, or one of their VMs' events),
    pushed to its function.

    In the per-user mode (``Settings.user_topics``, SECURITY.md) each user, and
    each user's VMs, publish on topics of their own; a push subscription
    delivers each to the function with the topic in the endpoint's path, which
    the functions framework makes the CloudEvent's source: how the function
    knows whose it is. Its delivery policy is the function's own.
    """

    function: Function
    user: str
    topic: str  # the topic's name

    @property
    def subscription(self) -> str:
        return f"{self.function.subscription}-u-{self.user}"


def user_routes(users: tuple[str, ...] | list[str]) -> list[UserRoute]:
    """Each user's own topics, and the function each goes to."""
    by_topic = {function.topic: function for function in FUNCTIONS}
    return [
        UserRoute(by_topic[key], user, user_topic(key, user))
        for user in users
        for key in PER_USER_KEYS
    ]
