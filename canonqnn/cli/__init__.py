"""canonqnn's command line: convert, build, run, inspect, parity, ops, patterns, demo.

Every command prints its result on stdout (one JSON document with ``--json``: the schemas are
``canonqnn.cli.schemas``, docs/cli.md) and its notes, progress and errors on stderr. Errors
print as ``canonqnn: error: <message>`` (no traceback) and exit with status 2; ``parity`` (and
``demo``) exit 1 when an output differs. An exception canonqnn did not expect is a bug: one
line ``canonqnn: internal error ...``, status 3 (``--debug`` prints its traceback).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

from .. import budget, extras
from ..errors import CanonqnnError
from . import commands, console
from .parser import parser

EXIT_OK, EXIT_DIFFERS, EXIT_ERROR = 0, 1, 2
EXIT_BUG = 3  # an exception canonqnn did not expect: a bug, reported in one line
EXIT_INTERRUPTED = 130  # as shells report SIGINT


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quiet and args.verbose:
        parser().error("--quiet and --verbose contradict each other: give one")
    args.console = console.Console(quiet=args.quiet, machine_output=args.json)
    try:
        with args.console.session(args.verbose):
            try:
                return _run(args)
            except ModuleNotFoundError as exc:  # a package of an extra: named, as any error
                missing = extras.as_missing_extra(exc)
                if missing is None:
                    raise
                raise missing from None
    except CanonqnnError as exc:
        # each line of a message (an unsupported model lists a node per line) stands alone,
        # as compilers print diagnostics: grep finds every one, none reads as other output
        lines = str(exc).strip().splitlines() or \
            [(type(exc).__doc__ or "refused").strip().splitlines()[0]]
        print("\n".join(f"canonqnn: error: {line}" for line in lines), file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # the reader left (``| head``): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print("canonqnn: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001  (anything else is a bug: one line, not a traceback)
        if args.debug:
            traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0]
        hints = [] if args.debug else ["--debug shows the traceback"]
        hints += [] if args.verbose else ["--verbose what other packages printed"]
        print(f"canonqnn: internal error (a bug in canonqnn: please report it with the command "
              f"and the model): {type(exc).__name__}: {first}"
              + (f"; {', '.join(hints)}" if hints else ""), file=sys.stderr)
        return EXIT_BUG
    finally:
        commands.release_devices()


def _run(args) -> int:
    command = getattr(commands, f"cmd_{args.command}")
    if "max_memory" not in vars(args):  # a command that loads no model
        return command(args)
    with budget.limit(args.max_memory):  # reads the budget: a bad value is refused first
        return command(args)


__all__ = ["EXIT_BUG", "EXIT_DIFFERS", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "main",
           "parser"]


if __name__ == "__main__":
    sys.exit(main())
