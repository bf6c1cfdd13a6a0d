"""What the runner's commands (run.py, check_dump.py, cpu_smoke.py) share: an argument parser whose
usage errors are one line, and a main() that turns the runner's errors into one line on stderr
and an exit code (2 bad usage: argparse's or a UsageError; 1 another RunnerError or an
interruption)."""
import argparse
import contextlib
import sys

from .errors import RunnerError, UsageError

EXIT_FAILURE = 1
EXIT_USAGE = 2


class Usage(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like seqbench's own usage errors
        raise Usage(message)


def main(prog, parser, run, argv=None, around=contextlib.nullcontext, errors=()):
    """`run(args, sys.stdout)`'s exit code, inside the context manager `around()`. `errors` lists
    (exception type, message) pairs for other exceptions that end the command with one line."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parser.parse_args(argv)
    except Usage as e:
        print(f"{prog}: error: {e} (see --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        with around():
            return run(args, sys.stdout)
    except UsageError as e:
        print(f"{prog}: error: {e} (see --help)", file=sys.stderr)
        return EXIT_USAGE
    except RunnerError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{prog}: error: interrupted", file=sys.stderr)
        return EXIT_FAILURE
    except tuple(t for t, _ in errors) as e:
        print(f"{prog}: error: {next(m for t, m in errors if isinstance(e, t))}", file=sys.stderr)
        return EXIT_FAILURE
