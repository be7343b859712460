"""What ``spotline deploy`` asks of each Google Cloud API, as the client
libraries' typed requests, built from the topology and the settings with no call.

``spotline.infra.deploy.deployer`` sends them. Each resource has a builder for what it should be
and a comparison with what exists, which answers the update to send (with its
update mask) or None when the two already agree: deploying twice changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from google.cloud import functions_v2, scheduler_v1
from google.cloud.pubsub_v1 import types as pubsub
from google.protobuf import duration_pb2, field_mask_pb2

from spotline.infra.deploy import iam
from spotline.infra.topology import (
    DEAD_LETTER_TOPIC,
    FUNCTIONS,
    REAPER_SCHEDULE,
    RUNTIME,
    Function,
    UserRoute,
    user_routes,
)
from spotline.shared.settings import TOPICS, Settings

PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
MAX_EVENT_TIMEOUT_S = 540  # event-driven functions; HTTP ones may run longer
# The label that records which source archive a function was built from.
SOURCE_LABEL = "spotline-source"
MANAGED_LABELS = {"spotline": "true"}
TIME_ZONE = "UTC"
DEAD_LETTER_RETENTION_S = 7 * 24 * 3600
TICK_DATA = b"{}"  # Scheduler refuses an empty message; the reaper ignores the body
_FUNCTION_ID = re.compile(r"[a-z][a-z-]{2,62}")
_SPOTLINE_VAR = "SPOTLINE_"


@dataclass(frozen=True)
class DeployConfig:
    """Everything a deploy needs besides the topology.

    Attributes:
        settings: what the functions read from their environment (compute
            ``gce``, a ``gs://`` storage root, the VM image and service account).
        service_account: the functions run as this account, and their triggers
            invoke them as it.
        submitters: the principals (``user:...``, ``group:...``) who may publish
            on the shared submit and cancel topics.
        user_principals: the per-user mode (SECURITY.md): (user, principal)
            pairs; each principal may publish on that user's own topics only.
            Their users are ``settings.user_topics``.
    """

    settings: Settings
    service_account: str
    runtime: str = RUNTIME
    submitters: tuple[str, ...] = ()
    user_principals: tuple[tuple[str, str], ...] = ()

    @property
    def iam_config(self) -> iam.IamConfig:
        bucket, prefix = iam.split_storage_root(self.settings.storage_root)
        return iam.IamConfig(
            project=self.project,
            bucket=bucket,
            prefix=prefix,
            submitters=self.submitters,
            user_principals=self.user_principals,
            functions_account=self.service_account,
            vm_account=self.settings.service_account or "",
        )

    @property
    def project(self) -> str:
        return self.settings.project

    @property
    def region(self) -> str:
        return self.settings.region

    @property
    def location(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"


def problems(config: DeployConfig, functions: Sequence[Function] = FUNCTIONS) -> list[str]:
    """What would make the deploy fail or the system not work, in words."""
    found = []
    settings = config.settings
    if settings.compute_endpoint:
        found.append(
            f"the functions must create VMs on Compute Engine, not {settings.compute_endpoint}"
        )
    if not settings.storage_root.startswith("gs://"):
        found.append(f"the storage root must be a gs:// URL, not {settings.storage_root!r}")
    if not settings.zones:
        found.append(f"no zones are known for region {settings.region}: give them")
    if not settings.service_account:
        found.append("no service account for the VMs")
    found += iam.principal_problems(config.submitters)
    found += iam.principal_problems(principal for _, principal in config.user_principals)
    users = set(settings.user_topics)
    unmapped = sorted(users - {user for user, _ in config.user_principals})
    if unmapped:
        found.append(
            f"user topics of {', '.join(unmapped)} with no principal to publish on them "
            f"(give --user {unmapped[0]}=PRINCIPAL for each)"
        )
    strays = sorted({user for user, _ in config.user_principals} - users)
    if strays:
        found.append(f"principals for {', '.join(strays)}, who have no user topics")
    if users and config.submitters:
        found.append(
            "submitters on the shared topics and per-user topics: in the per-user mode the "
            "shared topics are refused, give each person as USER=PRINCIPAL instead"
        )
    for function in functions:
        if not _FUNCTION_ID.fullmatch(function.function_id):
            found.append(f"{function.function_id}: a function name takes 3-63 a-z and -")
        if not 0 < function.timeout_s <= MAX_EVENT_TIMEOUT_S:
            found.append(f"{function.entry_point}: timeout {function.timeout_s} s is not 1-540")
        if not 10 <= function.ack_deadline_s <= 600:
            found.append(f"{function.entry_point}: ack deadline {function.ack_deadline_s} s")
        if not 5 <= function.max_delivery_attempts <= 100:
            found.append(
                f"{function.entry_point}: {function.max_delivery_attempts} delivery attempts"
                " (Pub/Sub takes 5-100)"
            )
    return found


# -- topics -------------------------------------------------------------------


def topic_path(project: str, key: str) -> str:
    return f"projects/{project}/topics/{TOPICS[key]}"


def topic_paths(config: DeployConfig) -> list[str]:
    """Every topic, the dead-letter one and the users' own included."""
    shared = [topic_path(config.project, key) for key in TOPICS]
    return shared + [route_topic(config, route) for route in routes(config)]


def routes(config: DeployConfig) -> list[UserRoute]:
    """The users' own topics (the per-user mode) and their functions."""
    return user_routes(config.settings.user_topics)


def route_topic(config: DeployConfig, route: UserRoute) -> str:
    return f"projects/{config.project}/topics/{route.topic}"


def route_subscription(config: DeployConfig, route: UserRoute, url: str) -> pubsub.Subscription:
    """A user's topic pushed to its function's URL, the topic in the path (the
    functions framework makes it the CloudEvent's source, which names the
    publisher), with an OIDC token of the functions' account, which alone may
    invoke them; the function's delivery policy; never expiring when idle."""
    topic = route_topic(config, route)
    policy = desired_subscription(config, route.function, route.subscription)
    return pubsub.Subscription(
        name=f"projects/{config.project}/subscriptions/{route.subscription}",
        topic=topic,
        push_config=pubsub.PushConfig(
            push_endpoint=f"{url.rstrip('/')}/{topic}",
            oidc_token=pubsub.PushConfig.OidcToken(
                service_account_email=config.service_account, audience=url.rstrip("/")
            ),
        ),
        ack_deadline_seconds=policy.ack_deadline_seconds,
        retry_policy=policy.retry_policy,
        dead_letter_policy=policy.dead_letter_policy,
        expiration_policy=pubsub.ExpirationPolicy(),
    )


def route_update(
    current: pubsub.Subscription, desired: pubsub.Subscription
) -> pubsub.UpdateSubscriptionRequest | None:
    """The update that makes a user's subscription what ``desired`` says, or None."""
    paths = [
        path
        for path in (
            "push_config",
            "ack_deadline_seconds",
            "retry_policy",
            "dead_letter_policy",
            "expiration_policy",
        )
        if getattr(current, path) != getattr(desired, path)
    ]
    if not paths:
        return None
    return pubsub.UpdateSubscriptionRequest(
        subscription=desired, update_mask=field_mask_pb2.FieldMask(paths=paths)
    )


def dead_letter_subscription(config: DeployConfig) -> pubsub.Subscription:
    """Where dead letters are kept for inspection: Pub/Sub drops what is published
    to a topic no subscription is attached to."""
    topic = topic_path(config.project, DEAD_LETTER_TOPIC)
    return pubsub.Subscription(
        name=f"projects/{config.project}/subscriptions/{TOPICS[DEAD_LETTER_TOPIC]}",
        topic=topic,
        message_retention_duration=duration_pb2.Duration(seconds=DEAD_LETTER_RETENTION_S),
        # A policy with no TTL: the subscription never expires (the default
        # deletes one that has been idle for 31 days, as this one mostly is).
        expiration_policy=pubsub.ExpirationPolicy(),
    )


# -- functions ----------------------------------------------------------------


def function_name(config: DeployConfig, function: Function) -> str:
    return f"{config.location}/functions/{function.function_id}"


def build_account(config: DeployConfig) -> str:
    """``buildConfig.serviceAccount``: the full name the API takes, not the email."""
    return f"projects/{config.project}/serviceAccounts/{config.iam_config.build_account}"


def upload_url_request(config: DeployConfig) -> functions_v2.GenerateUploadUrlRequest:
    return functions_v2.GenerateUploadUrlRequest(
        parent=config.location, environment=functions_v2.Environment.GEN_2
    )


def desired_function(
    config: DeployConfig,
    function: Function,
    source_digest: str,
    storage_source: functions_v2.StorageSource | None = None,
) -> functions_v2.Function:
    """The function as it should be; its source only when one was just uploaded."""
    build = functions_v2.BuildConfig(
        runtime=config.runtime,
        entry_point=function.entry_point,
        # Named, never the project's default: that may hold no role (iam.BUILD_ACCOUNT).
        service_account=build_account(config),
    )
    if storage_source is not None:
        build.source = functions_v2.Source(storage_source=storage_source)
    return functions_v2.Function(
        name=function_name(config, function),
        description=f"spotline: {TOPICS[function.topic]} -> {function.entry_point}",
        environment=functions_v2.Environment.GEN_2,
        build_config=build,
        service_config=functions_v2.ServiceConfig(
            timeout_seconds=function.timeout_s,
            available_memory=function.memory,
            environment_variables=config.settings.to_env(),
            service_account_email=config.service_account,
        ),
        event_trigger=functions_v2.EventTrigger(
            trigger_region=config.region,
            event_type=PUBSUB_PUBLISHED,
            pubsub_topic=topic_path(config.project, function.topic),
            service_account_email=config.service_account,
            # Unset means failures are dropped: raising must mean "deliver again".
            retry_policy=functions_v2.EventTrigger.RetryPolicy.RETRY_POLICY_RETRY,
        ),
        labels={**MANAGED_LABELS, SOURCE_LABEL: source_digest},
    )


def create_function_request(
    config: DeployConfig, function: Function, desired: functions_v2.Function
) -> functions_v2.CreateFunctionRequest:
    return functions_v2.CreateFunctionRequest(
        parent=config.location, function=desired, function_id=function.function_id
    )


def needs_source(current: functions_v2.Function | None, source_digest: str) -> bool:
    """True when the function does not run this archive yet: missing, built from
    another, or not ACTIVE (a failed build is built again)."""
    return (
        current is None
        or current.state != functions_v2.Function.State.ACTIVE
        or current.labels.get(SOURCE_LABEL) != source_digest
    )


def function_update(
    current: functions_v2.Function, desired: functions_v2.Function
) -> functions_v2.UpdateFunctionRequest | None:
    """The update that makes ``current`` what ``desired`` says, or None.

    Only what spotline sets is compared: labels and environment variables that
    others added (Cloud Functions adds some of its own) are kept, and a
    ``SPOTLINE_`` variable no longer set is removed.
    """
    paths = []
    update = functions_v2.Function(desired)
    if desired.build_config.source.storage_source.object_:
        paths.append("build_config.source")
    if current.build_config.runtime != desired.build_config.runtime:
        paths.append("build_config.runtime")
    if current.build_config.entry_point != desired.build_config.entry_point:
        paths.append("build_config.entry_point")
    if current.build_config.service_account != desired.build_config.service_account:
        paths.append("build_config.service_account")
    current_service, wanted_service = current.service_config, desired.service_config
    if current_service.timeout_seconds != wanted_service.timeout_seconds:
        paths.append("service_config.timeout_seconds")
    if current_service.available_memory != wanted_service.available_memory:
        paths.append("service_config.available_memory")
    if current_service.service_account_email != wanted_service.service_account_email:
        paths.append("service_config.service_account_email")
    current_env = dict(current_service.environment_variables)
    ours = {k: v for k, v in current_env.items() if k.startswith(_SPOTLINE_VAR)}
    if ours != dict(wanted_service.environment_variables):
        others = {k: v for k, v in current_env.items() if not k.startswith(_SPOTLINE_VAR)}
        update.service_config.environment_variables = {
            **others,
            **wanted_service.environment_variables,
        }
        paths.append("service_config.environment_variables")
    if _trigger(current.event_trigger) != _trigger(desired.event_trigger):
        paths.append("event_trigger")
    labels = dict(current.labels)
    if any(labels.get(key) != value for key, value in desired.labels.items()):
        update.labels = {**labels, **desired.labels}
        paths.append("labels")
    if not paths:
        return None
    mask = field_mask_pb2.FieldMask(paths=sorted(paths))
    return functions_v2.UpdateFunctionRequest(function=update, update_mask=mask)


def _trigger(trigger: functions_v2.EventTrigger) -> tuple[object, ...]:
    return (
        trigger.event_type,
        trigger.pubsub_topic,
        trigger.retry_policy,
        trigger.service_account_email,
    )


# -- the trigger's subscription -------------------------------------------------


def desired_subscription(
    config: DeployConfig, function: Function, subscription: str
) -> pubsub.Subscription:
    """The topology's delivery policy on the subscription Eventarc made for the
    function's trigger: ack deadline, backoff, dead-letter topic and attempts."""
    return pubsub.Subscription(
        name=subscription,
        topic=topic_path(config.project, function.topic),
        ack_deadline_seconds=function.ack_deadline_s,
        retry_policy=pubsub.RetryPolicy(
            minimum_backoff=duration_pb2.Duration(seconds=function.retry.minimum_backoff_s),
            maximum_backoff=duration_pb2.Duration(seconds=function.retry.maximum_backoff_s),
        ),
        dead_letter_policy=pubsub.DeadLetterPolicy(
            dead_letter_topic=topic_path(config.project, DEAD_LETTER_TOPIC),
            max_delivery_attempts=function.max_delivery_attempts,
        ),
    )


def subscription_update(
    current: pubsub.Subscription, desired: pubsub.Subscription
) -> pubsub.UpdateSubscriptionRequest | None:
    """The update that gives ``current`` the desired policy, or None. The push
    endpoint, filter and the rest stay Eventarc's."""
    paths = [
        path
        for path in ("ack_deadline_seconds", "retry_policy", "dead_letter_policy")
        if getattr(current, path) != getattr(desired, path)
    ]
    if not paths:
        return None
    return pubsub.UpdateSubscriptionRequest(
        subscription=desired, update_mask=field_mask_pb2.FieldMask(paths=paths)
    )


# -- the reaper's schedule ------------------------------------------------------


def desired_job(config: DeployConfig) -> scheduler_v1.Job:
    return scheduler_v1.Job(
        name=f"{config.location}/jobs/{REAPER_SCHEDULE.job}",
        description=f"spotline: a tick on {TOPICS[REAPER_SCHEDULE.topic]} for the reaper",
        schedule=REAPER_SCHEDULE.cron,
        time_zone=TIME_ZONE,
        pubsub_target=scheduler_v1.PubsubTarget(
            topic_name=topic_path(config.project, REAPER_SCHEDULE.topic), data=TICK_DATA
        ),
    )


def create_job_request(
    config: DeployConfig, job: scheduler_v1.Job
) -> scheduler_v1.CreateJobRequest:
    return scheduler_v1.CreateJobRequest(parent=config.location, job=job)


def job_update(
    current: scheduler_v1.Job, desired: scheduler_v1.Job
) -> scheduler_v1.UpdateJobRequest | None:
    paths = [
        path
        for path in ("description", "schedule", "time_zone", "pubsub_target")
        if getattr(current, path) != getattr(desired, path)
    ]
    if not paths:
        return None
    return scheduler_v1.UpdateJobRequest(
        job=desired, update_mask=field_mask_pb2.FieldMask(paths=paths)
    )
