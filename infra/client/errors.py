"""What the API raises: every error is a ``SpotlineError`` (the one root, shared
with the functions), so a notebook can catch them all at once; the CLI turns
each into its message and exit code."""

from __future__ import annotations

from spotline.shared.domain.errors import SpotlineError
from spotline.shared.settings import SettingsError

__all__ = [
    "ConfigError",
    "InputsError",
    "JobNotFound",
    "LogsUnreadable",
    "NotConnected",
    "NothingStored",
    "ReplayError",
    "SecretInSpec",
    "SpecError",
    "SpecUnreadable",
    "SpotlineError",
    "WaitTimeout",
]


class NotConnected(SpotlineError):
    """No spotline to talk to: no emulators in the environment, no local stack
    in the working folder, no deployed project in the config file."""


class ConfigError(SettingsError):
    """A setting (a variable or the config file) is bad; ``problems`` names each."""


class SpecError(SpotlineError, ValueError):
    """A job spec spotline would refuse; nothing was published.

    ``problems`` has one line per bad field (``"field: what is wrong"``), or
    per admission check the spec fails (the catalog, the region, the quota).
    """

    def __init__(self, problems: list[str], source: str = "the job spec") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  {problem}" for problem in self.problems)
        super().__init__(f"{source} was not submitted; spotline would refuse it:\n{lines}")


class SecretInSpec(SpecError):
    """A literal value for a secret-like env name: refused before anything is
    reached, so the secret never leaves this machine."""

    def __init__(self, problems: list[str], source: str = "the job spec") -> None:
        super().__init__(problems, source)
        self.args = ("not published: " + "; ".join(self.problems),)


class SpecUnreadable(SpecError):
    """The spec's file cannot be read."""

    def __init__(self, problems: list[str], source: str = "the job spec") -> None:
        super().__init__(problems, source)
        self.args = ("; ".join(self.problems),)


class InputsError(SpotlineError):
    """A job's inputs could not be uploaded or recorded: a folder with no file,
    nothing under ``code_uri``, or a recorded job id whose snapshot is of other
    sources. Nothing was published."""


class JobNotFound(SpotlineError, LookupError):
    """No job of that id (``spotline.jobs()`` lists them)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id} (`spotline status` lists them)")


class WaitTimeout(SpotlineError, TimeoutError):
    """``Job.wait(timeout)`` ran out before the job ended; it goes on running."""

    def __init__(self, job_id: str, timeout: float, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(
            f"job {job_id} has not ended after {timeout:g} s (it is {status}); it goes on running"
        )


class NothingStored(SpotlineError, FileNotFoundError):
    """A job has none of what was asked for (yet): no checkpoints, outputs or
    TensorBoard logs in its storage."""


class ReplayError(SpotlineError):
    """A job cannot be replayed as asked (its recorded snapshot is not whole,
    or the copy's spec is not valid); nothing was published."""


class LogsUnreadable(SpotlineError):
    """Cloud Logging cannot be read (no credentials, no right, down); ``query``
    is what to give ``gcloud logging read`` instead."""

    def __init__(self, reason: str, query: str, project: str) -> None:
        self.reason, self.query, self.project = reason, query, project
        super().__init__(f"cannot read Cloud Logging: {reason}")
