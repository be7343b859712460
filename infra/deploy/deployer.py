"""``spotline deploy``: a bare project set up, and the topology applied to it.

It converges rather than creates: each resource is read, then created when
missing, updated (with an update mask) when it differs, and left alone when it
agrees, so a second run changes nothing. In order:

1. the project's one-time steps (``spotline.infra.deploy.bootstrap``): APIs, the
   Firestore database and its deny-all rules, the bucket, the service accounts,
   the VMs' network and its firewall;
2. the Pub/Sub topics, and a subscription that keeps the dead letters;
3. the preemption log sink, then the IAM bindings ``spotline.infra.deploy.iam`` declares;
4. the machine catalog, seeded into Firestore;
5. one Cloud Function (2nd gen) per topology entry, built from a source archive
   uploaded only when the function does not run it yet; every create and update
   is sent before any is waited for, since each takes minutes;
6. on the Pub/Sub subscription Eventarc made for each function's trigger: the
   topology's ack deadline, backoff, dead-letter topic and delivery attempts,
   and Pub/Sub's service agent as its subscriber (for dead-lettering); in the
   per-user mode, each user's own topics pushed to their functions;
7. the Cloud Scheduler job that ticks the reaper.

The requests are built by ``spotline.infra.deploy.plan``; this module only sends them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api_exceptions

from spotline.infra.deploy import iam, plan
from spotline.infra.deploy.bootstrap import ProjectSetup
from spotline.infra.deploy.changes import Change
from spotline.infra.deploy.errors import DeployError
from spotline.infra.deploy.source import SourceArchive, build_archive
from spotline.infra.endpoints import Endpoints, client_options
from spotline.infra.topology import FUNCTIONS, Function
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.retries import UPLOAD_PROPAGATION, Backoff, retried

if TYPE_CHECKING:
    import requests
    from google.api_core.operation import Operation
    from google.auth.credentials import Credentials
    from google.cloud import functions_v2, scheduler_v1
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

EVENTARC = "https://eventarc.googleapis.com"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class _UploadRefused(Exception):
    """A source upload answered 403 (``answer``)."""

    def __init__(self, answer: requests.Response) -> None:
        super().__init__(f"HTTP {answer.status_code}")
        self.answer = answer


class Deployer:
    """Applies the topology to ``config``'s project.

    Args:
        config: project, region, settings and the functions' service account.
        endpoints: API endpoint overrides (tests); Google's by default.
        credentials: for Functions, Scheduler and Eventarc; Application Default
            Credentials by default, none for an ``http://`` endpoint.
        report: called with each change as it happens (the CLI prints it).
        operation_timeout_s: how long to wait for each function's deployment.
        upload_backoff: how a source upload refused with 403 is tried again.
    """

    def __init__(
        self,
        config: plan.DeployConfig,
        *,
        endpoints: Endpoints | None = None,
        credentials: Credentials | None = None,
        report: Callable[[Change], None] = lambda change: None,
        operation_timeout_s: float = 1800.0,
        upload_backoff: Backoff = UPLOAD_PROPAGATION,
    ) -> None:
        self.config = config
        self.upload_backoff = upload_backoff
        self.endpoints = endpoints or Endpoints()
        self._credentials = credentials
        self._report = report
        self.operation_timeout_s = operation_timeout_s
        self.changes: list[Change] = []

    def run(self) -> list[Change]:
        problems = plan.problems(self.config)
        if problems:
            raise DeployError("cannot deploy: " + "; ".join(problems))
        setup = self.setup
        setup.ensure_services()
        setup.ensure_database()
        setup.rules.ensure()
        setup.ensure_bucket()
        setup.ensure_accounts()
        setup.network.ensure()
        setup.custom_roles.ensure()
        self.ensure_topics()
        writer = setup.ensure_sink()
        access = self.config.iam_config
        wanted = iam.project_bindings(access, setup.project_number)
        if writer:
            wanted.append(iam.sink_writer_binding(access, writer))
        setup.ensure_bindings(wanted)
        # In the per-user mode: the shared VM account's rights, the users' on the shared topics.
        if access.users:
            setup.revoke_bindings(iam.superseded_bindings(access))
        self.seed_catalog()
        deployed = self.ensure_functions(build_archive())
        subscriptions = [
            self.ensure_delivery_policy(function, deployed[function.entry_point])
            for function in FUNCTIONS
        ]
        known = [name for name in subscriptions if name]
        known += self.ensure_user_routes(deployed)
        setup.ensure_bindings(iam.dead_letter_bindings(access, setup.project_number, known)[1:])
        self.ensure_reaper_job()
        return self.changes

    def preview(self) -> list[Change]:
        """What ``run`` would change in the topics, functions and schedule, read
        from the project and changing nothing (``spotline deploy --dry-run``)."""
        from google.cloud import functions_v2

        for topic in plan.topic_paths(self.config):
            try:
                self._publisher.get_topic(topic=topic)
                action = "unchanged"
            except api_exceptions.NotFound:
                action = "would create"
            self._record(Change("topic", topic.rsplit("/", 1)[-1], action))
        digest = build_archive().digest
        for function in FUNCTIONS:
            current = self._get_function(function)
            if current is None:
                self._record(Change("function", function.function_id, "would create"))
                continue
            # A stand-in for the archive an update would upload.
            upload = functions_v2.StorageSource(object_="(new upload)")
            source = upload if plan.needs_source(current, digest) else None
            desired = plan.desired_function(self.config, function, digest, source)
            update = plan.function_update(current, desired)
            fields = ", ".join(update.update_mask.paths) if update else ""
            action = "would update" if update else "unchanged"
            self._record(Change("function", function.function_id, action, fields))
        job = plan.desired_job(self.config)
        short = job.name.rsplit("/", 1)[-1]
        try:
            current_job = self._scheduler.get_job(name=job.name)
        except api_exceptions.NotFound:
            self._record(Change("job", short, "would create", job.schedule))
            return self.changes
        job_update = plan.job_update(current_job, job)
        if job_update is None:
            self._record(Change("job", short, "unchanged"))
        else:
            paths = ", ".join(job_update.update_mask.paths)
            self._record(Change("job", short, "would update", paths))
        return self.changes

    @cached_property
    def setup(self) -> ProjectSetup:
        """The project's one-time steps and IAM (``spotline.infra.deploy.bootstrap``)."""
        return ProjectSetup(
            self.config,
            endpoints=self.endpoints,
            credentials=self._credentials,
            report=self._record,
        )

    def _record(self, change: Change) -> None:
        self.changes.append(change)
        self._report(change)

    # -- 1, 2: topics and the catalog ------------------------------------------------

    def ensure_topics(self) -> None:
        for topic in plan.topic_paths(self.config):
            try:
                self._publisher.create_topic(name=topic)
                self._record(Change("topic", topic.rsplit("/", 1)[-1], "created"))
            except api_exceptions.AlreadyExists:
                self._record(Change("topic", topic.rsplit("/", 1)[-1], "unchanged"))
        keeper = plan.dead_letter_subscription(self.config)
        short = keeper.name.rsplit("/", 1)[-1]
        try:
            self._subscriber.create_subscription(request=keeper)
            self._record(Change("subscription", short, "created", "keeps dead letters 7 days"))
        except api_exceptions.AlreadyExists:
            self._record(Change("subscription", short, "unchanged"))

    def seed_catalog(self) -> None:
        from spotline.shared.adapters.firestore_store import FirestoreStore

        catalog = load_catalog()
        FirestoreStore(self.config.project).seed_machines(catalog)
        self._record(Change("catalog", "machines/", "seeded", f"{len(catalog)} machine types"))

    # -- 3: functions ------------------------------------------------------------------

    def ensure_functions(self, archive: SourceArchive) -> dict[str, functions_v2.Function]:
        """Every function as deployed, by entry point. Each change is reported
        once its operation is done (a build takes minutes)."""
        pending: dict[str, tuple[Operation, Change]] = {}
        deployed: dict[str, functions_v2.Function] = {}
        for function in FUNCTIONS:
            current = self._get_function(function)
            storage = self._upload(archive) if plan.needs_source(current, archive.digest) else None
            desired = plan.desired_function(self.config, function, archive.digest, storage)
            if current is None:
                request = plan.create_function_request(self.config, function, desired)
                operation = self._functions.create_function(request=request)
                pending[function.entry_point] = (
                    operation,
                    Change("function", function.function_id, "created"),
                )
                continue
            update = plan.function_update(current, desired)
            if update is None:
                deployed[function.entry_point] = current
                self._record(Change("function", function.function_id, "unchanged"))
                continue
            fields = ", ".join(update.update_mask.paths)
            pending[function.entry_point] = (
                self._functions.update_function(request=update),
                Change("function", function.function_id, "updated", fields),
            )
        for entry_point, (operation, change) in pending.items():
            deployed[entry_point] = operation.result(timeout=self.operation_timeout_s)
            self._record(change)
        return deployed

    def _get_function(self, function: Function) -> functions_v2.Function | None:
        try:
            return self._functions.get_function(name=plan.function_name(self.config, function))
        except api_exceptions.NotFound:
            return None

    def _upload(self, archive: SourceArchive) -> functions_v2.StorageSource:
        """Upload the archive to a fresh signed URL; where it now lies."""
        import requests

        answer = self._functions.generate_upload_url(request=plan.upload_url_request(self.config))

        def put() -> requests.Response:
            sent = requests.put(
                answer.upload_url,
                data=archive.data,
                headers={"content-type": "application/zip"},
                timeout=300,
            )
            if sent.status_code == 403:
                raise _UploadRefused(sent)
            return sent

        # A signed URL takes no credentials; a 403 right after it was made can be
        # permissions still propagating, so it is tried again (as gcloud does).
        try:
            done = retried(put, lambda exc: isinstance(exc, _UploadRefused), self.upload_backoff)
        except _UploadRefused as refused:
            done = refused.answer
        if not done.ok:
            raise DeployError(f"source upload failed: HTTP {done.status_code} {done.text[:300]}")
        return answer.storage_source

    # -- 4: the delivery policy on each trigger's subscription -----------------------------

    def ensure_delivery_policy(
        self, function: Function, deployed: functions_v2.Function
    ) -> str | None:
        """Ack deadline, backoff and dead letters belong to the subscription
        Eventarc made for the trigger (named in the trigger's transport).
        Returns that subscription, or None where Eventarc did not show it."""
        subscription = self._trigger_subscription(deployed.event_trigger.trigger)
        if subscription is None:
            command = manual_policy_command(self.config, function, deployed.event_trigger.trigger)
            self._record(Change("subscription", function.function_id, "not set", command))
            return None
        current = self._subscriber.get_subscription(subscription=subscription)
        desired = plan.desired_subscription(self.config, function, subscription)
        update = plan.subscription_update(current, desired)
        short = subscription.rsplit("/", 1)[-1]
        if update is None:
            self._record(Change("subscription", function.function_id, "unchanged", short))
            return subscription
        self._subscriber.update_subscription(request=update)
        fields = ", ".join(update.update_mask.paths)
        self._record(Change("subscription", function.function_id, "updated", f"{short}: {fields}"))
        return subscription

    def ensure_user_routes(self, deployed: dict[str, functions_v2.Function]) -> list[str]:
        """Each user's own topics pushed to their function (the per-user mode,
        SECURITY.md). Returns the subscriptions, for dead-lettering."""
        names = []
        for route in plan.routes(self.config):
            url = deployed[route.function.entry_point].service_config.uri
            desired = plan.route_subscription(self.config, route, url)
            names.append(desired.name)
            try:
                current = self._subscriber.get_subscription(subscription=desired.name)
            except api_exceptions.NotFound:
                self._subscriber.create_subscription(request=desired)
                self._record(Change("subscription", route.subscription, "created", route.topic))
                continue
            update = plan.route_update(current, desired)
            if update is None:
                self._record(Change("subscription", route.subscription, "unchanged"))
                continue
            self._subscriber.update_subscription(request=update)
            fields = ", ".join(update.update_mask.paths)
            self._record(Change("subscription", route.subscription, "updated", fields))
        return names

    def _trigger_subscription(self, trigger: str) -> str | None:
        """The Pub/Sub subscription of an Eventarc trigger, or None if unknown."""
        if not trigger:
            return None
        answer = self._eventarc.get(
            f"{self.endpoints.eventarc or EVENTARC}/v1/{trigger}", timeout=60
        )
        if not answer.ok:
            return None
        subscription = answer.json().get("transport", {}).get("pubsub", {}).get("subscription")
        return str(subscription) if subscription else None

    # -- 5: the reaper's schedule ----------------------------------------------------------

    def ensure_reaper_job(self) -> None:
        desired = plan.desired_job(self.config)
        short = desired.name.rsplit("/", 1)[-1]
        try:
            current = self._scheduler.get_job(name=desired.name)
        except api_exceptions.NotFound:
            self._scheduler.create_job(request=plan.create_job_request(self.config, desired))
            self._record(
                Change("job", short, "created", f"{desired.schedule} ({desired.time_zone})")
            )
            return
        update = plan.job_update(current, desired)
        if update is None:
            self._record(Change("job", short, "unchanged"))
            return
        self._scheduler.update_job(request=update)
        self._record(Change("job", short, "updated", ", ".join(update.update_mask.paths)))

    # -- clients, built on first use ---------------------------------------------------------

    def _options(self, endpoint: str | None) -> dict[str, Any]:
        return client_options(endpoint, self._credentials)

    @cached_property
    def _functions(self) -> functions_v2.FunctionServiceClient:
        from google.cloud import functions_v2

        return functions_v2.FunctionServiceClient(
            transport="rest", **self._options(self.endpoints.functions)
        )

    @cached_property
    def _scheduler(self) -> scheduler_v1.CloudSchedulerClient:
        from google.cloud import scheduler_v1

        return scheduler_v1.CloudSchedulerClient(
            transport="rest", **self._options(self.endpoints.scheduler)
        )

    @cached_property
    def _eventarc(self) -> Any:
        """An HTTP session for Eventarc's REST API (no client library is installed)."""
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials = self._options(self.endpoints.eventarc)["credentials"]
        if credentials is None:
            credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
        return AuthorizedSession(credentials)

    @cached_property
    def _publisher(self) -> PublisherClient:
        from google.cloud.pubsub_v1 import PublisherClient

        return PublisherClient()

    @cached_property
    def _subscriber(self) -> SubscriberClient:
        from google.cloud.pubsub_v1 import SubscriberClient

        return SubscriberClient()


def manual_policy_command(config: plan.DeployConfig, function: Function, trigger: str) -> str:
    """The gcloud commands that set a function's delivery policy by hand."""
    retry = function.retry
    dead_letter = plan.topic_path(config.project, "dead_letter").rsplit("/", 1)[-1]
    return (
        f"SUB=$(gcloud eventarc triggers describe {trigger.rsplit('/', 1)[-1] or 'TRIGGER'} "
        f"--location {config.region} --project {config.project} "
        "--format='value(transport.pubsub.subscription)') && "
        f'gcloud pubsub subscriptions update "$SUB" --ack-deadline={function.ack_deadline_s} '
        f"--min-retry-delay={retry.minimum_backoff_s}s "
        f"--max-retry-delay={retry.maximum_backoff_s}s "
        f"--dead-letter-topic={dead_letter} "
        f"--max-delivery-attempts={function.max_delivery_attempts}"
    )
