"""How a command that raised ends: one line that says what went wrong and what
to do, and its exit code (``exit_codes.Exit``).

spotline's own errors (``SpotlineError``, and a bad setting's
``SettingsError``) carry their message; Google's credentials and API errors
get one saying what to run; anything else is a bug, shown as one line that
points at ``--traceback``. Google's libraries are imported only to recognise
their errors, and only if they are already loaded: a command that never
touched them cannot have raised their errors.
"""

from __future__ import annotations

import sys

from spotline.infra.cli.exit_codes import Exit

LOGIN = "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"


def describe(err: BaseException) -> tuple[Exit, str]:
    """The exit code and the message for ``err``, raised by a command."""
    for check in (_spotline, _credentials, _google_api, _connection):
        found = check(err)
        if found is not None:
            return found
    return Exit.SOFTWARE, (
        f"unexpected error: {type(err).__name__}: {_first_line(err)} "
        "(run the command again with --traceback to see where, and report it)"
    )


def _spotline(err: BaseException) -> tuple[Exit, str] | None:
    from spotline.infra.client.errors import NotConnected, SpecError
    from spotline.shared.domain.errors import SpotlineError
    from spotline.shared.settings import SettingsError

    if isinstance(err, NotConnected):
        return Exit.NOT_CONNECTED, str(err)
    if isinstance(err, SpecError | SettingsError):
        return Exit.USAGE, str(err)  # one line per problem: each is named
    if isinstance(err, SpotlineError):
        return Exit.FAILED, str(err)
    return None


def _credentials(err: BaseException) -> tuple[Exit, str] | None:
    exceptions = sys.modules.get("google.auth.exceptions")
    if exceptions is None:
        return None
    if isinstance(err, exceptions.DefaultCredentialsError):
        return Exit.NOT_CONNECTED, f"no Google credentials found: {LOGIN}"
    if isinstance(err, exceptions.RefreshError):
        return Exit.NOT_CONNECTED, (
            f"Google refused the credentials ({_first_line(err)}): they may have expired; {LOGIN}"
        )
    if isinstance(err, exceptions.GoogleAuthError):
        return Exit.NOT_CONNECTED, f"Google credentials failed: {_first_line(err)}; {LOGIN}"
    return None


def _google_api(err: BaseException) -> tuple[Exit, str] | None:
    core = sys.modules.get("google.api_core.exceptions")
    if core is not None:
        if isinstance(err, core.PermissionDenied | core.Unauthenticated | core.Forbidden):
            return Exit.NOT_CONNECTED, (
                f"Google refused the request: {_first_line(err)}; check the project "
                "(`spotline settings`) and that your account has the roles the docs' "
                "Deploying to Google Cloud page lists"
            )
        if isinstance(err, core.GoogleAPIError):
            return Exit.CLOUD, f"Google's API failed: {_first_line(err)}"
    client = sys.modules.get("googleapiclient.errors")
    if client is not None and isinstance(err, client.HttpError):
        code = Exit.NOT_CONNECTED if err.status_code in (401, 403) else Exit.CLOUD
        return code, f"Google's API answered {err.status_code}: {_first_line(err)}"
    return None


def _connection(err: BaseException) -> tuple[Exit, str] | None:
    if isinstance(err, ConnectionError | TimeoutError):
        return Exit.CLOUD, (
            f"cannot reach the service ({_first_line(err)}): if it is the local stack, "
            "is `spotline up` still running?"
        )
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
