"""The one error the runner reports to its user, as one line."""


class RunnerError(Exception):
    """A problem the user can act on; cli.py prints it as `seqbench-pytorch: error: <message>`."""


class Unmapped(Exception):
    """An experiment this runner has no PyTorch equivalent for (the reason says why)."""
