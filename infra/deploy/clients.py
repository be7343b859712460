"""The clients ``spotline deploy`` and ``destroy`` set a project up with, built
on first use (each library costs a fraction of a second to import).

Service Usage, Resource Manager, Firestore Admin, Compute Engine (the VMs'
network and firewall) and Pub/Sub (for IAM policies) are their client libraries
over REST; Storage and Logging their handwritten
clients over HTTP/JSON. The IAM Admin library speaks gRPC only, so service
accounts and their policies go through IAM's REST API with an authorized
session; so do Firestore's security rules, through the Firebase Rules API, which
has no Python client library.

Who pays for a call: every API here but Firebase Rules is resource-based, and
bills the project that holds the resource. Firebase Rules is client-based: it
bills the caller's quota project, and refuses a person's Application Default
Credentials that name none (what ``gcloud auth application-default login``
writes). So its calls name the project being deployed, where deploy has just
enabled the API (``billed_to``); a service account's are billed to its own
project and left alone.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from spotline.infra.endpoints import Endpoints, client_options

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

IAM_API = "https://iam.googleapis.com"
RULES_API = "https://firebaserules.googleapis.com"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class ProjectClients:
    """One project's clients, at ``endpoints`` (Google's by default)."""

    def __init__(
        self, project: str, endpoints: Endpoints, credentials: Credentials | None = None
    ) -> None:
        self.project = project
        self.endpoints = endpoints
        self._credentials = credentials

    # -- the IAM and Firebase Rules APIs over REST ------------------------------------------

    def iam_get(self, path: str) -> dict[str, Any] | None:
        return self.iam_call("GET", path, None, missing_ok=True)

    def iam_call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        missing_ok: bool = False,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """One call to IAM's REST API, with ``params`` in the query; None for a
        404 when ``missing_ok``."""
        base = self.endpoints.iam or IAM_API
        return _call(self.iam_session, f"{base}/v1/{path}", method, body, missing_ok, params)

    def rules_call(
        self, method: str, path: str, body: dict[str, Any] | None, *, missing_ok: bool = False
    ) -> dict[str, Any] | None:
        """One call to the Firebase Rules API; None for a 404 when ``missing_ok``."""
        base = self.endpoints.firebase_rules or RULES_API
        return _call(self.rules_session, f"{base}/v1/{path}", method, body, missing_ok)

    # -- client libraries ------------------------------------------------------------------

    def _options(self, endpoint: str | None) -> dict[str, Any]:
        return client_options(endpoint, self._credentials)

    @cached_property
    def service_usage(self) -> Any:
        from google.cloud import service_usage_v1

        return service_usage_v1.ServiceUsageClient(
            transport="rest", **self._options(self.endpoints.service_usage)
        )

    @cached_property
    def projects(self) -> Any:
        from google.cloud import resourcemanager_v3

        return resourcemanager_v3.ProjectsClient(
            transport="rest", **self._options(self.endpoints.resource_manager)
        )

    @cached_property
    def firestore_admin(self) -> Any:
        from google.cloud import firestore_admin_v1

        return firestore_admin_v1.FirestoreAdminClient(
            transport="rest", **self._options(self.endpoints.firestore_admin)
        )

    @cached_property
    def pubsub_iam(self) -> Any:
        """Pub/Sub's REST API, for topics' and subscriptions' policies. The
        transport is built here: given a transport name, the client would follow
        PUBSUB_EMULATOR_HOST to the emulator, which serves no IAM."""
        from google.pubsub_v1 import PublisherClient
        from google.pubsub_v1.services.publisher.transports.rest import PublisherRestTransport

        endpoint = self.endpoints.pubsub
        options = self._options(endpoint)
        transport = PublisherRestTransport(
            credentials=options["credentials"], host=endpoint or "pubsub.googleapis.com"
        )
        return PublisherClient(transport=transport)

    @cached_property
    def networks(self) -> Any:
        from google.cloud import compute_v1

        return compute_v1.NetworksClient(transport="rest", **self._options(self.endpoints.compute))

    @cached_property
    def firewalls(self) -> Any:
        from google.cloud import compute_v1

        return compute_v1.FirewallsClient(transport="rest", **self._options(self.endpoints.compute))

    @cached_property
    def storage(self) -> Any:
        from google.cloud.storage import Client

        return Client(project=self.project, **self._options(self.endpoints.storage))

    @cached_property
    def logging(self) -> Any:
        from google.cloud import logging

        return logging.Client(
            project=self.project, _use_grpc=False, **self._options(self.endpoints.logging)
        )

    @cached_property
    def iam_session(self) -> Any:
        return self._session(self.endpoints.iam)

    @cached_property
    def rules_session(self) -> Any:
        return self._session(self.endpoints.firebase_rules, billed=True)

    def _session(self, endpoint: str | None, *, billed: bool = False) -> Any:
        """An authorized session: the deploying user's credentials (none for an
        ``http://`` endpoint not given any); ``billed``: a client-based API's,
        whose calls by a person name this project as their quota project."""
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials = self._options(endpoint)["credentials"]
        if credentials is None:
            credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
        if billed:
            credentials = billed_to(credentials, self.project)
        return AuthorizedSession(credentials)


def billed_to(credentials: Credentials, project: str) -> Credentials:
    """A person's credentials with ``project`` as their quota project: each call
    then carries ``x-goog-user-project: PROJECT``. Used even where ADC names
    another quota project, since the API must be enabled there and deploy knows
    it enabled it here; the deploying owner may use the project
    (``serviceusage.services.use``). Anything else is returned as it is: a
    service account's calls (a key, impersonation, the metadata server) bill
    its own project, and naming one would need that permission too."""
    from google.oauth2.credentials import Credentials as UserCredentials

    if isinstance(credentials, UserCredentials):
        return credentials.with_quota_project(project)
    return credentials


def _call(
    session: Any,
    url: str,
    method: str,
    body: dict[str, Any] | None,
    missing_ok: bool,
    params: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    from google.api_core.exceptions import from_http_response

    answer = session.request(method, url, json=body, params=params, timeout=60)
    if answer.status_code == 404 and missing_ok:
        return None
    if not answer.ok:
        raise from_http_response(answer)
    result: dict[str, Any] = answer.json() if answer.content else {}
    return result
