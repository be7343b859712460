# PYTHON_ARGCOMPLETE_OK
"""The ``spotline`` command: its entry point (``main``, the package's script).

The commands live in modules named for what they do (``jobs_view``, ``submit``,
``logs``, ``local``...); ``parser`` declares them all.
"""

from __future__ import annotations

import argparse
import os
import sys

from spotline.infra.cli.parser import build as _parser

__all__ = ["_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    from spotline.infra.client.connection import workdir_of
    from spotline.infra.client.errors import JobNotFound, NotConnected
    from spotline.shared.settings import SettingsError

    parser = _parser()
    _complete(parser)
    args = parser.parse_args(argv)
    args.workdir = workdir_of(args.workdir)
    try:
        return int(args.run(args) or 0)
    except SettingsError as err:
        # A bad variable or config value is the user's to fix: say which, no traceback.
        print(err, file=sys.stderr)
        return 2
    except NotConnected as err:
        # Nothing to talk to: what to run, as Python's own exit prints it (1).
        raise SystemExit(str(err)) from None
    except JobNotFound as err:
        print(err, file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`spotline schema | head`): stop quietly, as a
        # shell's commands do (128 + SIGPIPE). Python would otherwise complain
        # again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _complete(parser: argparse.ArgumentParser) -> None:
    """Shell completion: answers and exits when the shell asks (argcomplete's
    ``_ARGCOMPLETE``), does nothing otherwise. Turn it on with
    ``eval "$(register-python-argcomplete spotline)"``."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)


if __name__ == "__main__":
    sys.exit(main())
