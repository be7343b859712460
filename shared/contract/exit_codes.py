"""What a trainer's exit code says, the same on the VM and in the spec.

A process killed by a signal has no exit code of its own: Python's
``returncode`` is then the signal's number, negated (-6 for SIGABRT), while a
shell, Docker and torchrun report 128+N (134). The agent reports the shell's
form, so a code is always 0..255 and ``restart_on_exit_codes`` can name a
death by a signal, by its number (134) or its name (``"SIGABRT"``).
"""

from __future__ import annotations

# Linux's numbers, written out rather than read from ``signal``: the VMs run
# Linux, while a spec may be checked on a laptop whose numbers differ (on
# macOS SIGUSR1 is 30, SIGBUS 10).
SIGNAL_NUMBERS = {
    "SIGHUP": 1,
    "SIGINT": 2,
    "SIGQUIT": 3,
    "SIGILL": 4,
    "SIGTRAP": 5,
    "SIGABRT": 6,
    "SIGBUS": 7,
    "SIGFPE": 8,
    "SIGKILL": 9,
    "SIGUSR1": 10,
    "SIGSEGV": 11,
    "SIGUSR2": 12,
    "SIGPIPE": 13,
    "SIGALRM": 14,
    "SIGTERM": 15,
    "SIGXCPU": 24,
    "SIGXFSZ": 25,
    "SIGSYS": 31,
}
SIGNAL_BASE = 128  # a shell's code for a death by signal N is 128 + N


def exit_status(returncode: int) -> int:
    """The code a shell would report for a process that ended with Python's
    ``returncode``: a death by signal N (``-N``) is 128+N."""
    return SIGNAL_BASE - returncode if returncode < 0 else returncode


def code_of_signal(name: str) -> int:
    """128+N for the signal named ``name`` (``"SIGABRT"``: 134).

    Raises:
        ValueError: not a signal a trainer dies of that spotline knows.
    """
    number = SIGNAL_NUMBERS.get(name)
    if number is None:
        raise ValueError(
            f"{name!r} is not an exit code or a signal name ({', '.join(SIGNAL_NUMBERS)})"
        )
    return SIGNAL_BASE + number
