"""What starting the local stack raises on purpose: a missing emulator, or a
server that died before it was ready (its log named). The CLI shows it as
one line (``spotline.infra.cli.failures``)."""

from __future__ import annotations

from spotline.shared.domain.errors import SpotlineError


class StackError(SpotlineError, RuntimeError):
    """The local stack cannot start; the message names why and what to do."""
