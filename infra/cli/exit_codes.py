"""What ``spotline`` exits with: the one table of exit codes, which the command
line reference (docs/reference/cli.md) documents and every command returns by name."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """A command's exit code; scripts may rely on each value."""

    OK = 0
    # What was asked did not happen: no such job, nothing stored, a job
    # watched ended FAILED, a stack that did not start.
    FAILED = 1
    # The input was refused: a bad option, a spec spotline would refuse, a bad
    # setting. Nothing was published or changed. (argparse's own code.)
    USAGE = 2
    # A job watched was canceled.
    CANCELED = 3
    # Nothing to talk to, or no right to: no local stack or deployed project,
    # missing or expired Google credentials, a permission Google refused.
    NOT_CONNECTED = 4
    # Google's API (or an emulator) failed or refused the request for another
    # reason; the message is Google's.
    CLOUD = 5
    # An error spotline did not expect: a bug; `--traceback` shows where.
    SOFTWARE = 70
    # Ctrl-C (128 + SIGINT).
    INTERRUPTED = 130
    # The reader of the output went away, as `spotline schema | head` (128 + SIGPIPE).
    BROKEN_PIPE = 141


def table() -> str:
    """The codes as ``spotline --help`` lists them."""
    meanings = {
        Exit.OK: "done",
        Exit.FAILED: "not done: no such job, nothing stored, a watched job FAILED",
        Exit.USAGE: "input refused (option, spec, setting); nothing was changed",
        Exit.CANCELED: "a watched job was CANCELED",
        Exit.NOT_CONNECTED: "no stack or project found, or credentials missing or refused",
        Exit.CLOUD: "Google's API or an emulator failed the request",
        Exit.SOFTWARE: "unexpected error (rerun with --traceback and report it)",
        Exit.INTERRUPTED: "interrupted (Ctrl-C)",
        Exit.BROKEN_PIPE: "the output's reader went away",
    }
    return "\n".join(f"  {int(code):>3}  {meaning}" for code, meaning in meanings.items())
