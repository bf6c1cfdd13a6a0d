"""The one error the runner reports to its user, as one line."""


class RunnerError(Exception):
    """A problem the user can act on; cli.py prints it as `seqbench-pytorch: error: <message>`."""


class UsageError(RunnerError):
    """An option value that names nothing (a suite) or does not parse (a regex): bad usage, exit 2,
    as seqbench's own; found after argparse where the check needs the binary's experiment list."""


class Unmapped(Exception):
    """An experiment this runner has no PyTorch equivalent for (the reason says why)."""


def failure_reason(ex):
    """`Type: message` on one line (at most 300 characters of the message): what a report's unmapped
    entry and a failed check's detail say, and what fits the one-line error."""
    return f"{type(ex).__name__}: {' '.join(str(ex).split())[:300]}"
