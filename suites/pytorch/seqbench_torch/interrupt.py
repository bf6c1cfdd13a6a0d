"""SIGTERM as an exception. gpu.sh runs the runner under `timeout`, which ends it with SIGTERM, and
Python's default for that signal is to die at once: the report of the suite in flight would be lost.
With the handler, the signal raises Terminated where the runner is, measure.py writes what was
measured (the rest listed as not run) and the runner exits 1 with one line."""
import contextlib
import signal


class Terminated(BaseException):
    """Raised by the SIGTERM handler. A BaseException, as KeyboardInterrupt: the `except Exception`
    around each variant (a compile error fails that variant only) must not take it for a failure."""


@contextlib.contextmanager
def sigterm_raises():
    """Within the block, SIGTERM raises Terminated once; a second SIGTERM kills as usual (the
    handler puts the default back before raising). Outside the main thread, where Python cannot set
    handlers, the block runs with the signal's disposition unchanged."""

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated("terminated by SIGTERM")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
