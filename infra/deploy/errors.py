"""What a deploy or destroy raises on purpose: a project spotline cannot use
as it is, or a step Google refused, each saying what to do. The CLI shows it
as one line (``spotline.infra.cli.failures``)."""

from __future__ import annotations

from spotline.shared.domain.errors import SpotlineError


class DeployError(SpotlineError, RuntimeError):
    """A deploy step that cannot go on; the message names what and what to do."""
