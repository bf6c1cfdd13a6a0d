"""One suite's report as the run goes. It is rewritten whole (atomically: report.write_json_atomic)
after every experiment, so that a run that is killed, stopped by its time budget or by a broken CUDA
context leaves every experiment it finished on disk, merged into the part that was there before
(merge.py), and lists what it did not get to, with the reason."""
from . import merge
from .report import new_report, write_json_atomic


# What a rewrite says of an experiment still to come (a reason merge.ABSENT covers).
PENDING_REASON = "not run: the run ended before it"


class SuiteRun:
    """`planned` is [(experiment, plan, variants)] as cli.plan_suite makes it; `unmapped` the
    experiments without a torch equivalent; `existing` the report found at `path` (or None)."""

    def __init__(self, suite, meta, path, existing, part, planned, unmapped):
        self.suite = suite
        self.path = path
        self.existing = existing
        self.part = part
        self.report = new_report(suite, meta)
        self.report["unmapped"] = list(unmapped)
        self.pending = [(e.name, tuple(variants)) for e, _, variants in planned]  # not yet recorded

    def _done(self, name):
        self.pending = [p for p in self.pending if p[0] != name]

    def add(self, name, entry, failures):
        """An experiment's measured entry (or None) and its failed variants."""
        self._done(name)
        if entry:
            self.report["experiments"].append(entry)
        self.report["unmapped"].extend(failures)

    def absent(self, name, variants, reason):
        """An experiment not measured at all: one unmapped entry per variant, with the reason."""
        self._done(name)
        self.report["unmapped"].extend({"experiment": name, "variant": v, "reason": reason} for v in variants)

    def absent_rest(self, reason):
        """Every experiment not yet recorded, as absent; how many."""
        rest = list(self.pending)
        for name, variants in rest:
            self.absent(name, variants, reason)
        return len(rest)

    def add_checks(self, checks):
        self.report["checks"].extend(checks)

    def empty(self):
        r = self.report
        return not (r["experiments"] or r["unmapped"] or r["checks"])

    def write(self):
        """The merged report, written atomically; the path. The experiments not yet recorded are in
        it as "not run: the run ended before it" (as seqbench run writes them), so that a run killed
        past its handlers (SIGKILL, the lease's hard limit) still names what it did not reach; the
        next write replaces them, and a merge drops them where a measurement exists."""
        doc = dict(self.report)
        doc["unmapped"] = self.report["unmapped"] + [
            {"experiment": name, "variant": v, "reason": PENDING_REASON} for name, variants in self.pending
            for v in variants]
        write_json_atomic(self.path, merge.merged(self.existing, doc, self.part))
        return self.path
