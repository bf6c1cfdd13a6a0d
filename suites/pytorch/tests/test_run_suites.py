"""measure.run_suites on a stand-in torch (no torch or GPU): the report is rewritten after every
experiment, a progress line with the elapsed seconds precedes each variant, the time budget leaves
experiments unstarted (said once, listed, exit 3), SIGTERM and a sticky CUDA error end the run with
the measured part written and the rest listed as not run, parity runs after the timing with each
dumped experiment's error its own failed check, and a second run merges into the first's report."""
import json
import os
import re
import signal
import sys
import types
import unittest
from unittest import mock

from tests import support
from tests.test_report import FRAMEWORKS, INFO
from tests.test_timing import FakeTensor, FakeTorch
from seqbench_torch import listing, meta
from seqbench_torch.budget import Budget
from seqbench_torch.errors import RunnerError
from seqbench_torch.families.common import COMPILE, EAGER, Plan
from seqbench_torch.interrupt import sigterm_raises
from seqbench_torch.measure import EXIT_INCOMPLETE, run_suites

ILLEGAL = "CUDA error: an illegal memory access was encountered"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Timer:
    """Each sample_ms call is one variant: it runs the work once, advances the clock 10 s, and calls
    `hook(experiment name, variant)` first (to read the report, raise, or send SIGTERM)."""

    def __init__(self, clock, hook=None):
        self.clock, self.hook, self.measured = clock, hook, []

    def sample_ms(self, work, calls=1):
        name, variant = work.label
        self.measured.append((name, variant))
        if self.hook:
            self.hook(name, variant)
        work()
        self.clock.now += 10.0
        return [2.0, 2.0, 2.0] if variant == EAGER else [1.0, 1.0, 1.0]


def plan_of(name):
    def build(torch):
        def work(variant):
            def call():
                return FakeTensor([1.0])

            call.label = (name, variant)
            return call

        return {EAGER: work(EAGER), COMPILE: work(COMPILE)}

    return Plan((EAGER, COMPILE), False, build)


def experiment(suite, name):
    return listing.Experiment(suite, name, {"dtype": "f32"}, "unfused", (listing.Variant("unfused", 1e6, 0.0),), {}, 1)


def suite_of(name, *experiments):
    exps = tuple(experiment(name, e) for e in experiments)
    return listing.Suite(name, "", True, exps), ([(e, plan_of(e.name), (EAGER, COMPILE)) for e in exps], [])


E1, E2, E3 = "dropout_fwd/f32/elements=1", "dropout_fwd/f32/elements=2", "dropout_fwd/f32/elements=3"
T1 = "adam/f32/params=1"


class RunSuites(support.ScratchTest):
    def setUp(self):
        super().setUp()
        self.torch = FakeTorch(lambda: None)
        self.torch.cuda.empty_cache = staticmethod(lambda: None)
        dynamo = types.ModuleType("torch._dynamo")
        dynamo.reset = lambda: None
        patch = mock.patch.dict(sys.modules, {"torch": types.ModuleType("torch"), "torch._dynamo": dynamo})
        patch.start()
        self.addCleanup(patch.stop)
        self.clock = Clock()
        self.lines = []
        self.out = self.path("out")
        os.makedirs(self.out)

    def run_suites(self, suites, seconds=None, hook=None, parity="", filter_text="", timestamp="2026-11-22T10:00:00Z",
                   git_sha=INFO["git_sha"]):
        self.timer = Timer(self.clock, hook)
        m = meta.collect_meta(dict(INFO, git_sha=git_sha), 7, FRAMEWORKS, 3000.0)
        m["timestamp"] = timestamp
        args = types.SimpleNamespace(filter=filter_text, quick=True, parity=parity)
        budget = Budget(seconds, clock=self.clock)
        plans = {s.name: p for s, p in suites}
        return run_suites(self.torch, self.timer, 3000.0, m, [s for s, _ in suites], plans, args, self.out,
                          self.lines.append, budget, lambda path: self.validate(path))

    def validate(self, path):
        done = support.run_seqbench("table", path)
        return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]

    def report(self, suite="operators"):
        path = os.path.join(self.out, f"pytorch-{suite}.json")
        self.assertIsNone(self.validate(path))
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def unmapped(self, doc):
        return [(u["experiment"], u.get("variant"), u["reason"]) for u in doc["unmapped"]]

    def test_the_report_is_rewritten_after_every_experiment(self):
        seen = {}

        def hook(name, variant):
            path = os.path.join(self.out, "pytorch-operators.json")
            if variant == EAGER:
                seen[name] = [e["name"] for e in self.report()["experiments"]] if os.path.exists(path) else None

        self.assertEqual(self.run_suites([suite_of("operators", E1, E2, E3)], hook=hook), 0)
        self.assertEqual(seen, {E1: None, E2: [E1], E3: [E1, E2]})
        self.assertEqual([e["name"] for e in self.report()["experiments"]], [E1, E2, E3])
        self.assertEqual(self.lines[-1], "seqbench-pytorch: done")
        self.assertEqual(self.report()["unmapped"], [])  # the rewrites' pending entries are gone

    def test_each_rewrite_names_what_is_still_to_come(self):
        # A run killed past its handlers (SIGKILL) must not leave its unreached experiments unnamed.
        pending = {}

        def hook(name, variant):
            path = os.path.join(self.out, "pytorch-operators.json")
            if variant == EAGER and os.path.exists(path):
                pending[name] = sorted({u["experiment"] for u in self.report()["unmapped"]
                                        if u["reason"] == "not run: the run ended before it"})

        self.assertEqual(self.run_suites([suite_of("operators", E1, E2, E3)], hook=hook), 0)
        self.assertEqual(pending, {E2: [E2, E3], E3: [E3]})

    def test_a_progress_line_with_the_elapsed_seconds_comes_before_each_variant(self):
        self.run_suites([suite_of("operators", E1, E2)])
        progress = [i for i, line in enumerate(self.lines) if line.endswith(" ...")]
        self.assertEqual([self.lines[i] for i in progress], [
            f"  [    0.0 s] operators/{E1}/torch_eager ...", f"  [   10.0 s] operators/{E1}/torch_compile ...",
            f"  [   20.0 s] operators/{E2}/torch_eager ...", f"  [   30.0 s] operators/{E2}/torch_compile ..."])
        for i in progress:  # each variant's result follows its own progress line
            self.assertRegex(self.lines[i + 1], r"^  operators/\S+/torch_\w+: median ")

    def test_the_time_budget_leaves_the_rest_unstarted_says_so_once_and_exits_3(self):
        # 20 s an experiment: E1 starts with 45 s left; E2 at 25 s left, over the 20 s margin (the
        # longest so far, above the 15 s floor); E3 at 5 s left does not start, nor does the trainer's.
        code = self.run_suites([suite_of("operators", E1, E2, E3), suite_of("trainer", T1)], seconds=45)
        self.assertEqual(code, EXIT_INCOMPLETE)
        self.assertEqual([e["name"] for e in self.report()["experiments"]], [E1, E2])
        self.assertEqual(self.unmapped(self.report()), [(E3, EAGER, "not started: time budget"),
                                                        (E3, COMPILE, "not started: time budget")])
        self.assertEqual(self.unmapped(self.report("trainer"))[0], (T1, EAGER, "not started: time budget"))
        said = [line for line in self.lines if "time budget:" in line]
        self.assertEqual(said, ["  time budget: 5 s of 45 s left, under the 20 s margin: what follows is not started"])
        self.assertIn("2 experiment(s) or parity check(s) not started (time budget)", self.lines[-2])
        self.assertEqual(self.timer.measured, [(E1, EAGER), (E1, COMPILE), (E2, EAGER), (E2, COMPILE)])

    def test_a_failure_and_the_budget_exit_1(self):
        def hook(name, variant):
            if name == E1 and variant == COMPILE:
                raise RuntimeError("compile failed")

        self.assertEqual(self.run_suites([suite_of("operators", E1, E2, E3)], seconds=30, hook=hook), 1)

    def test_sigterm_writes_what_was_measured_and_lists_the_rest(self):
        def hook(name, variant):
            if name == E2 and variant == COMPILE:
                os.kill(os.getpid(), signal.SIGTERM)

        with sigterm_raises():
            with self.assertRaisesRegex(RunnerError, rf"^terminated by SIGTERM during operators/{re.escape(E2)}; "
                                                     r"wrote .*pytorch-operators\.json, .*pytorch-trainer\.json"):
                self.run_suites([suite_of("operators", E1, E2, E3), suite_of("trainer", T1)], hook=hook)
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)  # put back after the block
        doc = self.report()
        self.assertEqual([e["name"] for e in doc["experiments"]], [E1])
        self.assertEqual(self.unmapped(doc), [(n, v, "not run: terminated by SIGTERM") for n in (E2, E3)
                                              for v in (EAGER, COMPILE)])
        self.assertEqual(self.unmapped(self.report("trainer"))[0], (T1, EAGER, "not run: terminated by SIGTERM"))

    def test_a_sticky_cuda_error_stops_the_run_with_the_reports_written(self):
        def hook(name, variant):
            if name == E2 and variant == EAGER:
                raise RuntimeError(ILLEGAL)

        with self.assertRaisesRegex(RunnerError, rf"^the CUDA context is unusable after operators/{re.escape(E2)} "
                                                 r"failed \(RuntimeError: CUDA error: an illegal memory access"):
            self.run_suites([suite_of("operators", E1, E2, E3), suite_of("trainer", T1)], hook=hook)
        doc = self.report()
        self.assertEqual([e["name"] for e in doc["experiments"]], [E1])
        rows = self.unmapped(doc)
        self.assertEqual(rows[0], (E2, EAGER, f"failed: RuntimeError: {ILLEGAL}"))
        self.assertEqual(rows[1][:2], (E2, COMPILE))
        self.assertRegex(rows[1][2], r"^not run: CUDA context unusable \(RuntimeError: CUDA error: an illegal")
        self.assertEqual([r[:2] for r in rows[2:]], [(E3, EAGER), (E3, COMPILE)])
        self.assertTrue(rows[2][2].startswith(f"not run: CUDA context unusable after operators/{E2} failed"))
        self.assertTrue(self.unmapped(self.report("trainer"))[0][2].startswith("not run: CUDA context unusable"))
        self.assertEqual(self.timer.measured, [(E1, EAGER), (E1, COMPILE), (E2, EAGER)])

    def test_a_cleanup_that_fails_is_a_broken_context_not_a_traceback(self):
        def empty_cache():
            raise RuntimeError(ILLEGAL)

        self.torch.cuda.empty_cache = staticmethod(empty_cache)
        with self.assertRaisesRegex(RunnerError, r"unusable after operators/.* \(torch.cuda.empty_cache\(\) failed"):
            self.run_suites([suite_of("operators", E1, E2)])
        doc = self.report()
        self.assertEqual([e["name"] for e in doc["experiments"]], [E1])  # measured before the cleanup failed
        self.assertEqual([r[:2] for r in self.unmapped(doc)], [(E2, EAGER), (E2, COMPILE)])

    def test_a_failure_the_device_survives_costs_one_variant(self):
        def hook(name, variant):
            if name == E1 and variant == EAGER:
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

        self.assertEqual(self.run_suites([suite_of("operators", E1, E2)], hook=hook), 1)
        doc = self.report()
        self.assertEqual([e["name"] for e in doc["experiments"]], [E1, E2])
        self.assertEqual(doc["experiments"][0]["baseline"], COMPILE)

    def dump(self, *experiments, bad_json=False):
        root = self.path("dump", "operators")
        for i, (name, schema) in enumerate(experiments):
            folder = os.path.join(root, f"{i:02d}")
            os.makedirs(folder)
            with open(os.path.join(folder, "manifest.json"), "w", encoding="utf-8") as f:
                json.dump({"schema": schema, "experiment": name, "params": {}, "arrays": []}, f)
        if bad_json:
            os.makedirs(os.path.join(root, "zz"))
            with open(os.path.join(root, "zz", "manifest.json"), "w", encoding="utf-8") as f:
                f.write("{ cut off")
        return self.path("dump")

    def test_parity_runs_after_the_timing_and_each_error_is_a_failed_check(self):
        dump = self.dump((E1, "seqbench.dump/2"), ("no_oracle_fwd/f32/n=1", "seqbench.dump/1"), bad_json=True)
        self.assertEqual(self.run_suites([suite_of("operators", E1)], parity=dump), 1)
        parity_at = next(i for i, line in enumerate(self.lines) if line.startswith("  parity:"))
        last_result = max(i for i, line in enumerate(self.lines) if ": median " in line)
        self.assertGreater(parity_at, last_result)
        self.assertEqual(self.lines[parity_at], "  parity: 0 passed, 2 failed")
        checks = self.report()["checks"]
        self.assertEqual([(c["experiment"], c["passed"]) for c in checks], [(E1, False), ("zz", False)])
        self.assertIn("expected schema 'seqbench.dump/1', got 'seqbench.dump/2'", checks[0]["detail"])
        self.assertTrue(checks[1]["detail"].startswith("error: RunnerError: "), checks[1]["detail"])
        self.assertIn("JSONDecodeError", checks[1]["detail"])

    def test_parity_that_finds_nothing_to_check_fails(self):
        # A dump folder without this suite's manifests (a dump that timed out) made no check: exit 1.
        dump = self.dump((E1, "seqbench.dump/1"))
        self.assertEqual(self.run_suites([suite_of("operators", E2)], parity=dump, filter_text="elements=2"), 1)
        self.assertIn("no dumped experiment of the selected suites was found", self.lines[-2])

    def test_parity_that_the_budget_leaves_out_is_listed(self):
        dump = self.dump((E1, "seqbench.dump/1"))
        self.assertEqual(self.run_suites([suite_of("operators", E1)], seconds=30, parity=dump), EXIT_INCOMPLETE)
        self.assertEqual(self.unmapped(self.report()), [(E1, "parity", "not started: time budget")])

    def test_a_second_run_merges_into_the_first(self):
        self.run_suites([suite_of("operators", E1)], filter_text="elements=1")
        self.run_suites([suite_of("operators", E2)], filter_text="elements=2", timestamp="2026-11-22T10:10:00Z")
        doc = self.report()
        self.assertEqual([e["name"] for e in doc["experiments"]], [E1, E2])
        self.assertEqual([(p["id"], p["filter"]) for p in doc["meta"]["parts"]],
                         [("2026-11-22T10:00:00Z", "elements=1"), ("2026-11-22T10:10:00Z", "elements=2")])

    def test_a_part_of_another_build_is_refused_before_anything_is_measured(self):
        self.run_suites([suite_of("operators", E1)])
        with self.assertRaisesRegex(RunnerError, "cannot merge into .*pytorch-operators.json.: it holds seqbench git "
                                                 f"sha '{INFO['git_sha']}', this run '{'1' * 40}'"):
            self.run_suites([suite_of("operators", E2)], git_sha="1" * 40)
        self.assertEqual(self.timer.measured, [])
        self.assertEqual([e["name"] for e in self.report()["experiments"]], [E1])


if __name__ == "__main__":
    unittest.main()
