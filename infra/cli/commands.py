# PYTHON_ARGCOMPLETE_OK
"""The ``spotline`` command: its entry point (``main``, the package's script).

The commands live in modules named for what they do (``jobs_view``, ``submit``,
``logs``, ``local``...); ``parser`` declares them all.
"""

from __future__ import annotations

import argparse
import os
import sys

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.cli.parser import build as _parser

__all__ = ["_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    from spotline.infra.cli import failures
    from spotline.infra.client.connection import workdir_of

    parser = _parser()
    _complete(parser)
    args = parser.parse_args(argv)
    args.workdir = workdir_of(args.workdir)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:
        # The reader went away (`spotline schema | head`): stop quietly, as a
        # shell's commands do. Python would otherwise complain again when it
        # flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return Exit.BROKEN_PIPE
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return Exit.INTERRUPTED
    except Exception as err:
        if args.traceback:
            raise
        code, message = failures.describe(err)
        print(f"spotline {args.command}: {message}", file=sys.stderr)
        return code


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
