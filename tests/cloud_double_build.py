"""What Cloud Build needs of the account a function is built as, for ``CloudDouble``.

Since 2024 a new project's default build account may be Compute Engine's default
service account, which organization policy leaves without roles; a build as it
fails (Google: "Cloud Build service account change"). A build writes its logs,
fetches the uploaded source from ``gcf-v2-sources-NUMBER-REGION`` and pushes the
image to Artifact Registry, so the account needs those three permissions on the
project. The double grants them only through roles the project's policy gives
the account, and fails the build as the real one does, with its words where
they are public (logs, fetch) and a guess where not (the push, a named account
that does not exist).
"""

from __future__ import annotations

import re

from spotline.infra.localcloud.wire import ApiError
from tests.cloud_double_project import PROJECT_NUMBER, ProjectApis

WRITE_LOGS = "logging.logEntries.create"
FETCH_SOURCE = "storage.objects.get"
PUSH_IMAGE = "artifactregistry.repositories.uploadArtifacts"
# The roles that hold them (Google's predefined roles, these permissions only).
ROLE_PERMISSIONS = {
    "roles/run.builder": {WRITE_LOGS, FETCH_SOURCE, PUSH_IMAGE},
    "roles/cloudbuild.builds.builder": {WRITE_LOGS, FETCH_SOURCE, PUSH_IMAGE},
    "roles/logging.logWriter": {WRITE_LOGS},
    "roles/storage.objectViewer": {FETCH_SOURCE},
    "roles/storage.objectUser": {FETCH_SOURCE},
    "roles/storage.objectAdmin": {FETCH_SOURCE},
    "roles/artifactregistry.writer": {PUSH_IMAGE},
    "roles/editor": {WRITE_LOGS, FETCH_SOURCE, PUSH_IMAGE},
    "roles/owner": {WRITE_LOGS, FETCH_SOURCE, PUSH_IMAGE},
}
# What a new project builds as when the function names no account.
DEFAULT_BUILD_ACCOUNT = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"


def build_account(apis: ProjectApis, named: str | None) -> str:
    """The email of the account a build runs as; a named one must be
    ``projects/PROJECT/serviceAccounts/EMAIL`` (the discovery document's format)
    and, if of this project, exist."""
    if not named:
        return DEFAULT_BUILD_ACCOUNT
    match = re.fullmatch(r"projects/([^/]+)/serviceAccounts/([^/]+@[^/]+)", named)
    if match is None:
        wanted = "projects/PROJECT/serviceAccounts/EMAIL"
        raise ApiError(400, f"buildConfig.serviceAccount {named!r} is not {wanted}")
    email = match.group(2)
    if email.endswith(f"@{apis.project}.iam.gserviceaccount.com") and email not in apis.accounts:
        raise ApiError(400, f"Build service account {named} does not exist.")
    return email


def build_failure(apis: ProjectApis, region: str, function_id: str, email: str) -> str | None:
    """Why a build as ``email`` fails, in Cloud Build's words; None if it succeeds."""
    member = f"serviceAccount:{email}"
    policy = apis.policies.get(f"projects/{apis.project}") or {}
    held: set[str] = set()
    for binding in policy.get("bindings") or []:
        if member in (binding.get("members") or []):
            held |= ROLE_PERMISSIONS.get(binding.get("role", ""), set())
    account = f"projects/{apis.project}/serviceAccounts/{email}"
    bucket = f"gcf-v2-sources-{PROJECT_NUMBER}-{region}"
    if WRITE_LOGS not in held:
        return (
            f"Build failed with status: FAILURE. The service account running this build "
            f"{account} does not have permission to write logs to Cloud Logging. To fix this, "
            "grant the Logs Writer (roles/logging.logWriter) role to the service account."
        )
    if FETCH_SOURCE not in held:
        return (
            "Build failed with status: FAILURE and message: failed to Fetch: failed to download "
            f"archive gs://{bucket}/{function_id}/function-source.zip: Access to bucket {bucket} "
            f"denied. You must grant Storage Object Viewer permission to {email}."
        )
    if PUSH_IMAGE not in held:
        return (
            "Build failed with status: FAILURE and message: denied: Permission "
            f"'{PUSH_IMAGE}' denied on resource "
            f"projects/{apis.project}/locations/{region}/repositories/gcf-artifacts."
        )
    return None
