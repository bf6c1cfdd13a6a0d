"""tools/resume_filter.py: the --filter with which tools/gpu.sh (RUN_RESUME=1) finishes a suite an
earlier call left incomplete. The regex is checked by what it selects among SUITE/EXPERIMENT/VARIANT
subjects, searched as the runner searches them (Python's re and ECMAScript read every escape it
writes the same way)."""
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tool_test import ToolTest  # noqa: E402

# Names as the suites write them, and ones with every character the regex would otherwise read.
NAMES = ["layernorm_fwd/bf16/tokens=1024,hidden=256", "layernorm_fwd/bf16/tokens=1024,hidden=2560",
         "softmax_fwd/bf16/bh=16x16,len=2048", "softmax_fwd/bf16/bh=16x16,len=2048/tail", "a.b", "axb",
         "c(d)|e", "f[g]{2}+?*^$\\h"]


def plan(quick=False, names=NAMES, suite="operators"):
    return {"schema": "seqbench.list/1", "quick": quick,
            "suites": [{"name": "device", "experiments": [{"name": "copy/16MiB", "variants": []}]},
                       {"name": suite, "experiments": [{"name": n, "variants": [{"name": "unfused"},
                                                                                {"name": "fused"}]}
                                                       for n in names]}]}


def report(measured, quick=False, suite="operators", not_run=()):
    return {"schema": "seqbench.report/1", "suite": suite, "meta": {"quick": quick},
            "experiments": [{"name": n, "variants": [{"name": "fused"}]} for n in measured],
            "not_run": [{"experiment": n, "reason": "not started: time budget"} for n in not_run]}


class ResumeFilter(ToolTest):
    tool = "resume_filter.py"

    def resume(self, the_plan, the_report, suite="operators"):
        p = self.write("plan.json", json.dumps(the_plan))
        r = self.write("report.json", json.dumps(the_report))
        return self.run_tool(p, r, suite)

    def selected(self, regex, names=NAMES, suite="operators"):
        return {n for n in names for v in ("unfused", "fused") if re.search(regex, f"{suite}/{n}/{v}")}

    def test_selects_exactly_the_experiments_the_report_lacks(self):
        for measured in ([], NAMES[::2], NAMES[1::2], NAMES[:-1], [NAMES[3]]):
            result = self.resume(plan(), report(measured, not_run=[n for n in NAMES if n not in measured]))
            self.assertEqual(result.returncode, 0, result.stderr)
            regex = result.stdout.strip()
            self.assertEqual(self.selected(regex), set(NAMES) - set(measured), regex)
            # Never another suite's experiments, nor a check name that only starts like one.
            self.assertFalse(re.search(regex, "device/copy/16MiB/cudaMemcpyAsync"))
            self.assertFalse(re.search(regex, f"operators/{NAMES[0]}/fused/more"))

    def test_an_experiment_measured_without_variants_is_still_pending(self):
        r = report(NAMES[1:])
        r["experiments"][0]["variants"] = []
        result = self.resume(plan(), r)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.selected(result.stdout.strip()), {NAMES[0], NAMES[1]})

    def test_a_complete_report_exits_3_with_nothing_to_run(self):
        result = self.resume(plan(), report(NAMES))
        self.assertEqual((result.returncode, result.stdout), (3, ""))

    def test_another_quick_setting_or_suite_is_not_resumable(self):
        result = self.resume(plan(quick=True), report(NAMES[:2]))
        self.assertEqual(result.returncode, 4)
        self.assertIn("quick=False, the plan quick=True", result.stderr)
        no_setting = report(NAMES[:2])
        del no_setting["meta"]["quick"]
        self.assertEqual(self.resume(plan(), no_setting).returncode, 4)
        result = self.resume(plan(), report(NAMES[:2], suite="trainer"))
        self.assertEqual(result.returncode, 4)
        self.assertIn("suite 'trainer', not 'operators'", result.stderr)

    def test_a_report_of_another_build_is_not_resumable(self):
        # The runner's merge rule: the same sha (not "unknown"), the same source hash where both have
        # one, else neither dirty. Without it a complete report of an older build exited 3 and
        # stood as this build's.
        sha, other = "a" * 40, "b" * 40

        def resume_with(meta, build, measured=NAMES):
            r = report(measured)
            r["meta"].update(meta)
            p = self.write("plan.json", json.dumps(plan()))
            rp = self.write("report.json", json.dumps(r))
            b = self.write("build.json", json.dumps(build))
            return self.run_tool(p, rp, "operators", "--build", b)

        same = {"git_sha": sha, "git_dirty": False, "source_hash": "h1"}
        self.assertEqual(resume_with(same, same).returncode, 3)
        self.assertEqual(resume_with(same, same, NAMES[:2]).returncode, 0)
        for meta, build, why in (
                (same, dict(same, git_sha=other), f"it holds git sha {sha}, the build is {other}"),
                (dict(same, git_sha="unknown"), same, "git sha unknown"),
                (same, dict(same, source_hash="h2"), "built from other sources"),
                (dict(same, source_hash=None, git_dirty=True), same, "a side is dirty"),
                (same, dict(same, source_hash=None, git_dirty=True), "a side is dirty")):
            result = resume_with(meta, build)
            self.assertEqual(result.returncode, 4, (meta, build, result.stderr))
            self.assertIn(why, result.stderr)
        # Clean on both sides, one without a hash: the sha names the sources.
        self.assertEqual(resume_with(dict(same, source_hash=None), same).returncode, 3)
        # Build info that is not an object is bad input.
        p = self.write("plan.json", json.dumps(plan()))
        rp = self.write("report.json", json.dumps(report(NAMES)))
        self.assertEqual(self.run_tool(p, rp, "operators", "--build", self.write("b.json", "[1]")).returncode, 2)
        self.assertEqual(self.run_tool(p, rp, "operators", "--build", self.write("b.json", "")).returncode, 2)

    def test_bad_input_exits_2(self):
        result = self.resume(plan(), report([]), suite="layers")
        self.assertEqual(result.returncode, 2)
        self.assertIn("no suite 'layers'", result.stderr)
        p = self.write("plan.json", "{")
        r = self.write("report.json", json.dumps(report([])))
        self.assertEqual(self.run_tool(p, r, "operators").returncode, 2)
        self.assertEqual(self.run_tool(p, os.path.join(self.dir, "absent.json"), "operators").returncode, 2)


if __name__ == "__main__":
    unittest.main()
