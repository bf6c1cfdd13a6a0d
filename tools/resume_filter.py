#!/usr/bin/env python3
"""The `seqbench run --filter` that finishes a suite an earlier run left incomplete.

A GPU call is limited to 10 minutes, so a full suite may not fit in one: the runner then lists what
it did not start in the report's not_run, and a later call must run only the rest. This prints, for
a suite, the regex that selects the experiments `seqbench list --json` plans for it and its report
does not hold measured (left in not_run, failed before any variant was measured, or never selected
by an earlier filter). A `--filter` run merges into the report (same build and --quick setting;
the runner refuses otherwise), so the report ends complete.

    seqbench list --json [--quick] | tools/resume_filter.py - REPORT SUITE [--build INFO]

INFO is `seqbench info --json` of the binary that will run: with it, a report from another build
is not resumable, by the rule the runner's merge applies (suites/runner.cpp require_mergeable: the
same git sha, not "unknown"; the same source hash where both have one, else neither dirty).
Without it, a complete report of an older build read as "nothing to resume" and was never re-run.

Exit status: 0 with the regex on stdout (^SUITE/(exp|exp|...)/[^/]*$, each name escaped: the
runner searches it in SUITE/EXPERIMENT/VARIANT, and variant names have no '/'); 3 when the report holds every planned experiment (nothing
to run); 4 when the report cannot be resumed (another --quick setting than the plan's, no
report of that suite, or another build than INFO's), with the reason on stderr; 2 on bad input. Standard library only.
"""
import argparse
import json
import sys

# The characters an ECMAScript regex gives a meaning outside a class; every other character of an
# experiment name ('/', '=', ',', '-', letters, digits) stands for itself there.
SPECIAL = set("\\^$.|?*+()[]{}")


def escape(text):
    return "".join("\\" + c if c in SPECIAL else c for c in text)


def planned_experiments(plan, suite):
    for s in plan.get("suites", []):
        if s.get("name") == suite:
            return [e["name"] for e in s.get("experiments", [])]
    raise ValueError(f"the plan has no suite '{suite}'")


def other_build(meta, build):
    """Why a report's meta cannot take a part run by `build` (seqbench info --json); None if it can."""
    old_sha, sha = meta.get("git_sha"), build.get("git_sha")
    if old_sha in (None, "unknown") or sha in (None, "unknown"):
        return f"git sha unknown (the report {old_sha}, the build {sha})"
    if old_sha != sha:
        return f"it holds git sha {old_sha}, the build is {sha}"
    old_hash, new_hash = meta.get("source_hash"), build.get("source_hash")
    if isinstance(old_hash, str) and old_hash and isinstance(new_hash, str) and new_hash:
        if old_hash != new_hash:
            return f"it was built from other sources (source hash {old_hash[:12]}, the build {new_hash[:12]})"
    elif meta.get("git_dirty") is True or build.get("git_dirty") is True:
        return "a side is dirty and one records no source hash, so the sources cannot be compared"
    return None


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="`seqbench list --json` output, or - for standard input")
    parser.add_argument("report", help="the suite's report (reports/<device>/<suite>.json)")
    parser.add_argument("suite")
    parser.add_argument("--build", help="`seqbench info --json` of the binary that will run the rest")
    args = parser.parse_args(argv)
    try:
        plan = json.load(sys.stdin if args.plan == "-" else open(args.plan, encoding="utf-8"))
        with open(args.report, encoding="utf-8") as f:
            report = json.load(f)
        build = None
        if args.build is not None:
            with open(args.build, encoding="utf-8") as f:
                build = json.load(f)
        if not isinstance(report, dict) or not isinstance(report.get("meta", {}), dict) or (
                build is not None and not isinstance(build, dict)):
            raise ValueError("the report and the build info must be JSON objects with an object meta")
        planned = planned_experiments(plan, args.suite)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"resume_filter: {e}", file=sys.stderr)
        return 2
    if report.get("suite") != args.suite:
        print(f"resume_filter: {args.report} is a report of suite '{report.get('suite')}', not '{args.suite}'",
              file=sys.stderr)
        return 4
    plan_quick = bool(plan.get("quick", False))
    report_quick = (report.get("meta") or {}).get("quick")
    if report_quick is None or bool(report_quick) != plan_quick:
        print(f"resume_filter: {args.report} says quick={report_quick}, the plan quick={plan_quick}: "
              "not resumable (an unfiltered run replaces it)", file=sys.stderr)
        return 4
    if build is not None:
        why = other_build(report.get("meta") or {}, build)
        if why:
            print(f"resume_filter: {args.report}: {why}: not resumable (an unfiltered run replaces it)",
                  file=sys.stderr)
            return 4
    measured = {e.get("name") for e in report.get("experiments", []) if e.get("variants")}
    pending = [name for name in planned if name not in measured]
    if not pending:
        return 3
    # The variant part has no '/', so that an experiment name that is a prefix of another's never
    # selects the other.
    print(f"^{escape(args.suite)}/({'|'.join(escape(n) for n in pending)})/[^/]*$")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
