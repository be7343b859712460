"""``spotline destroy``: remove what ``spotline deploy`` made, in the reverse order.

1. refuse while jobs are active (their VMs would run on, unwatched), unless told
   to cancel them: then publish a cancel for each and wait until none is active;
2. the Scheduler job, so no tick arrives at a function being deleted;
3. the functions (their Eventarc triggers and subscriptions go with them);
4. the preemption sink, and the Firestore rules release with spotline's ruleset
   (rules someone else released since are left in force);
5. spotline's IAM bindings on the project (and on the bucket when it is kept);
   the bindings on topics and accounts go with those; then spotline's own role;
6. the dead-letter subscription, the users' own subscriptions and the topics;
   the VMs' firewall rules and network (kept, and said so, while a VM uses it);
7. the service accounts spotline made, the users' VM accounts included (one
   the configuration named instead is left alone);
8. only with ``delete_data``: the bucket (with every object in it) and the
   Firestore database; otherwise they are kept and said so.

Every step takes "already gone" as done: a destroy that stopped half-way runs
again. The APIs stay enabled (other things in the project may use them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api_exceptions

from spotline.infra.deploy import iam, plan
from spotline.infra.deploy.bootstrap import DATABASE, SINK, ProjectSetup
from spotline.infra.deploy.changes import Change
from spotline.infra.endpoints import Endpoints, client_options
from spotline.infra.topology import FUNCTIONS, REAPER_SCHEDULE

if TYPE_CHECKING:
    from google.auth.credentials import Credentials
    from google.cloud import functions_v2, scheduler_v1

ACTIVE_JOBS_LIMIT = 50  # named in the refusal; more are counted, not listed


class JobsRunning(RuntimeError):
    """Jobs are active and ``cancel_jobs`` was not given."""


class Destroyer:
    """Removes spotline from ``config``'s project.

    Args:
        config: the deploy configuration the project was deployed with.
        endpoints, credentials: as for ``Deployer``.
        delete_data: also delete the bucket and the Firestore database.
        cancel_jobs: cancel active jobs (and wait for them) instead of refusing.
        dry_run: read only, and report what would be removed.
        report: called with each change as it happens.
        cancel_timeout_s: how long to wait for cancelled jobs to end.
    """

    def __init__(
        self,
        config: plan.DeployConfig,
        *,
        endpoints: Endpoints | None = None,
        credentials: Credentials | None = None,
        delete_data: bool = False,
        cancel_jobs: bool = False,
        dry_run: bool = False,
        report: Callable[[Change], None] = lambda change: None,
        cancel_timeout_s: float = 600.0,
    ) -> None:
        self.config = config
        self.endpoints = endpoints or Endpoints()
        self._credentials = credentials
        self.delete_data = delete_data
        self.cancel_jobs = cancel_jobs
        self.dry_run = dry_run
        self._report = report
        self.cancel_timeout_s = cancel_timeout_s
        self.changes: list[Change] = []
        self.setup = ProjectSetup(
            config,
            endpoints=self.endpoints,
            credentials=credentials,
            dry_run=dry_run,
            report=self._record,
        )

    def _record(self, change: Change) -> None:
        self.changes.append(change)
        self._report(change)

    def _done(self, kind: str, name: str, existed: bool, detail: str = "") -> None:
        action = "would delete" if self.dry_run else "deleted"
        self._record(Change(kind, name, action if existed else "absent", detail))

    def run(self) -> list[Change]:
        self.stop_jobs()
        self.delete_schedule()
        self.delete_functions()
        self.delete_sink()
        self.setup.rules.delete()
        access = self.config.iam_config
        # Topics' and accounts' bindings go with them; the bucket's only with the
        # bucket; a VM account spotline did not make stays, without our binding.
        revoke = {iam.Scope.PROJECT}
        if not self.delete_data:
            revoke.add(iam.Scope.BUCKET)
        if any(account is None for account, _ in self.setup.accounts()):
            revoke.add(iam.Scope.SERVICE_ACCOUNT)
        declared = iam.bindings(access)
        if access.users:
            declared += iam.user_bindings(access, self.setup.project_number)
            declared += iam.superseded_bindings(access)  # an earlier deploy's, if any
        ours = [b for b in declared if b.scope in revoke]
        self.setup.revoke_bindings(ours)
        self.setup.custom_roles.delete()
        self.delete_topics()
        self.setup.network.delete()
        self.delete_accounts()
        self.delete_stored_data()
        return self.changes

    # -- 1. active jobs ----------------------------------------------------------------

    def active_jobs(self) -> list[str]:
        from google.cloud.firestore_v1.base_query import FieldFilter

        from spotline.shared.domain.states import JobStatus

        active = [str(status) for status in JobStatus.active()]
        query = self._firestore.collection("jobs").where(filter=FieldFilter("status", "in", active))
        return sorted(doc.id for doc in query.stream())

    def stop_jobs(self) -> None:
        active = self.active_jobs()
        if not active:
            self._record(Change("jobs", "jobs/", "unchanged", "none active"))
            return
        named = ", ".join(active[:ACTIVE_JOBS_LIMIT])
        if not self.cancel_jobs:
            raise JobsRunning(
                f"{len(active)} jobs are active ({named}): their VMs would run on with "
                "nothing watching them. Wait for them, or pass --cancel-jobs"
            )
        if self.dry_run:
            self._record(Change("jobs", "jobs/", "would cancel", named))
            return
        from spotline.shared.adapters.pubsub_bus import PubsubBus
        from spotline.shared.contract.events import CancelRequest

        bus = PubsubBus(self.config.project)
        for job_id in active:
            bus.publish("cancel", CancelRequest(job_id=job_id, reason="spotline destroy"))
        deadline = time.monotonic() + self.cancel_timeout_s
        while (left := self.active_jobs()) and time.monotonic() < deadline:
            time.sleep(2)
        if left:
            raise JobsRunning(f"{len(left)} jobs still active after cancelling: {left}")
        self._record(Change("jobs", "jobs/", "cancelled", named))

    # -- 2-4. schedule, functions, sink ----------------------------------------------------

    def delete_schedule(self) -> None:
        name = plan.desired_job(self.config).name
        try:
            self._scheduler.get_job(name=name)
        except api_exceptions.NotFound:
            self._done("job", REAPER_SCHEDULE.job, False)
            return
        if not self.dry_run:
            self._scheduler.delete_job(name=name)
        self._done("job", REAPER_SCHEDULE.job, True)

    def delete_functions(self) -> None:
        """Every delete is sent before any is waited for, as deploy does."""
        pending = []
        for function in FUNCTIONS:
            name = plan.function_name(self.config, function)
            try:
                self._functions.get_function(name=name)
            except api_exceptions.NotFound:
                self._done("function", function.function_id, False)
                continue
            if self.dry_run:
                self._done("function", function.function_id, True)
                continue
            pending.append((function, self._functions.delete_function(name=name)))
        for function, operation in pending:
            operation.result(timeout=900)
            self._done("function", function.function_id, True, "with its trigger")

    def delete_sink(self) -> None:
        sink = self.setup.clients.logging.sink(SINK)
        existed = bool(sink.exists())
        if existed and not self.dry_run:
            sink.delete()
        self._done("sink", SINK, existed)

    # -- 6, 7. topics and accounts ---------------------------------------------------------

    def delete_topics(self) -> None:
        from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

        subscriber = SubscriberClient()
        keepers = [plan.dead_letter_subscription(self.config).name]
        # The users' own subscriptions (the per-user mode) are spotline's, not Eventarc's.
        keepers += [
            f"projects/{self.config.project}/subscriptions/{route.subscription}"
            for route in plan.routes(self.config)
        ]
        for name in keepers:
            self._delete_pubsub("subscription", name, subscriber.get_subscription,
                                subscriber.delete_subscription)  # fmt: skip
        publisher = PublisherClient()
        for topic in plan.topic_paths(self.config):
            self._delete_pubsub("topic", topic, publisher.get_topic, publisher.delete_topic)

    def _delete_pubsub(
        self, kind: str, name: str, get: Callable[..., Any], delete: Callable[..., Any]
    ) -> None:
        """Delete a topic or subscription (its full name) if it is there; the
        clients name their argument after the kind (``topic=``, ``subscription=``)."""
        try:
            get(**{kind: name})
            existed = True
        except api_exceptions.NotFound:
            existed = False
        if existed and not self.dry_run:
            delete(**{kind: name})
        self._done(kind, name.rsplit("/", 1)[-1], existed)

    def delete_accounts(self) -> None:
        for account, email in self.setup.accounts():
            if account is None:
                self._record(Change("account", email.split("@")[0], "kept", "not made by spotline"))
                continue
            path = f"projects/{self.config.project}/serviceAccounts/{email}"
            existed = self.setup.clients.iam_get(path) is not None
            if existed and not self.dry_run:
                self.setup.clients.iam_call("DELETE", path, None, missing_ok=True)
            self._done("account", account.account_id, existed, email)

    # -- 8. data ------------------------------------------------------------------------

    def delete_stored_data(self) -> None:
        bucket_name = self.config.iam_config.bucket
        database = f"projects/{self.config.project}/databases/{DATABASE}"
        if not self.delete_data:
            self._record(Change("bucket", bucket_name, "kept", "pass --delete-data to delete"))
            self._record(Change("database", DATABASE, "kept", "pass --delete-data to delete"))
            return
        bucket = self.setup.clients.storage.lookup_bucket(bucket_name)
        if bucket is not None and not self.dry_run:
            bucket.delete(force=True)
        self._done("bucket", bucket_name, bucket is not None, "and every object in it")
        admin = self.setup.clients.firestore_admin
        try:
            admin.get_database(name=database)
            existed = True
        except api_exceptions.NotFound:
            existed = False
        if existed and not self.dry_run:
            admin.delete_database(name=database).result(timeout=600)
        self._done("database", DATABASE, existed, "and every document in it")

    # -- clients ------------------------------------------------------------------------

    @cached_property
    def _functions(self) -> functions_v2.FunctionServiceClient:
        from google.cloud import functions_v2

        return functions_v2.FunctionServiceClient(
            transport="rest", **client_options(self.endpoints.functions, self._credentials)
        )

    @cached_property
    def _scheduler(self) -> scheduler_v1.CloudSchedulerClient:
        from google.cloud import scheduler_v1

        return scheduler_v1.CloudSchedulerClient(
            transport="rest", **client_options(self.endpoints.scheduler, self._credentials)
        )

    @cached_property
    def _firestore(self) -> Any:
        from google.cloud import firestore

        return firestore.Client(project=self.config.project, credentials=self._credentials)
