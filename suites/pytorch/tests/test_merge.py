"""Merging a run's part into the report already in the folder (merge.py): variant by variant, checks
by experiment, absences dropped where a measurement exists, meta.parts honest, the result still a
report `seqbench table` reads; parts of another git sha, torch or device refused naming both, and a
file that is no report moved aside."""
import copy
import json
import os
import unittest

from tests import support
from tests.test_report import FRAMEWORKS, INFO
from seqbench_torch import merge, meta, report
from seqbench_torch.errors import RunnerError
from seqbench_torch.stats import summarize_samples

NAME_A = "layernorm_fwd/bf16/tokens=4096,hidden=1024"
NAME_B = "softmax_fwd/bf16/bh=8x16,len=512"


def part_meta(timestamp, git_sha=INFO["git_sha"], torch="2.11.0", device=None, dirty=False, copy_gbps=3000.0,
              source_hash=None):
    m = meta.collect_meta(dict(INFO, git_sha=git_sha, git_dirty=dirty, source_hash=source_hash), 7,
                          dict(FRAMEWORKS, torch=torch), copy_gbps)
    m["timestamp"] = timestamp
    if device:
        m["device"]["name"] = device
    return m


def entry(name, variants):
    e = {"name": name, "params": {"dtype": "bf16"}, "baseline": variants[0][0],
         "variants": [report.make_variant(n, summarize_samples([ms]), 1e6, 0.0, 3000.0) for n, ms in variants]}
    report.finalize_speedups(e)
    return e


def part(m, experiments=(), checks=(), unmapped=(), filter_text=""):
    doc = report.new_report("operators", m)
    doc["experiments"] = list(experiments)
    doc["checks"] = list(checks)
    doc["unmapped"] = list(unmapped)
    return doc, merge.new_part(m, filter_text, True)


def parity_check(experiment, passed, name=None):
    c = report.check(name or f"{experiment} y vs PyTorch 2.11.0", passed, 0.001, 0.001, 0.01)
    c["experiment"] = experiment
    return c


class Merged(support.ScratchTest):
    def first(self):
        doc, p = part(part_meta("2026-11-22T10:00:00Z"),
                      [entry(NAME_A, [("torch_eager", 2.0), ("torch_compile", 1.0)])],
                      [parity_check(NAME_A, False)],
                      [{"experiment": NAME_B, "variant": "torch_eager", "reason": "not started: time budget"},
                       {"experiment": "beam_search/x", "reason": "skipped: no torch equivalent"}], "layernorm")
        return merge.merged(None, doc, p)

    def test_a_fresh_report_is_its_one_part(self):
        doc = self.first()
        self.assertEqual([p["id"] for p in doc["meta"]["parts"]], ["2026-11-22T10:00:00Z"])
        self.assertEqual(doc["meta"]["parts"][0]["filter"], "layernorm")
        self.assertEqual({v["part"] for v in doc["experiments"][0]["variants"]}, {"2026-11-22T10:00:00Z"})
        self.assertEqual(doc["checks"][0]["part"], "2026-11-22T10:00:00Z")

    def test_a_second_part_adds_and_replaces_by_experiment_and_variant(self):
        old = self.first()
        # Only torch_compile of A again (a --filter on the variant), B for the first time, A's parity
        # again (now passing), B's budget absence resolved.
        doc, p = part(part_meta("2026-11-22T10:09:00Z", copy_gbps=2900.0),
                      [entry(NAME_A, [("torch_compile", 0.5)]), entry(NAME_B, [("torch_eager", 4.0)])],
                      [parity_check(NAME_A, True)], [], "softmax|compile")
        doc = merge.merged(old, doc, p)
        self.assertEqual([e["name"] for e in doc["experiments"]], [NAME_A, NAME_B])
        a = doc["experiments"][0]
        self.assertEqual([v["name"] for v in a["variants"]], ["torch_eager", "torch_compile"])
        self.assertEqual(a["baseline"], "torch_eager")
        self.assertEqual([v["speedup"] for v in a["variants"]], [1.0, 4.0])  # recomputed: 2.0 / 0.5
        self.assertEqual([v["part"] for v in a["variants"]], ["2026-11-22T10:00:00Z", "2026-11-22T10:09:00Z"])
        self.assertEqual([(c["experiment"], c["passed"]) for c in doc["checks"]], [(NAME_A, True)])
        # B's absence is gone (B is measured); the unmapped family stays.
        self.assertEqual(doc["unmapped"], [{"experiment": "beam_search/x", "reason": "skipped: no torch equivalent"}])
        self.assertEqual([(x["id"], x["copy_gbps"]) for x in doc["meta"]["parts"]],
                         [("2026-11-22T10:00:00Z", 3000.0), ("2026-11-22T10:09:00Z", 2900.0)])
        self.assertEqual(doc["meta"]["timestamp"], "2026-11-22T10:09:00Z")
        path = self.path("pytorch-operators.json")
        report.write_json_atomic(path, doc)
        done = support.run_seqbench("table", path)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(NAME_B.split("/")[0], done.stdout)

    def test_a_part_no_longer_referenced_is_dropped_and_dirty_is_any_kept_parts(self):
        old = self.first()
        doc, p = part(part_meta("2026-11-22T10:09:00Z", dirty=True),
                      [entry(NAME_A, [("torch_eager", 2.0), ("torch_compile", 1.0)])], [parity_check(NAME_A, True)])
        doc = merge.merged(old, doc, p)
        self.assertEqual([x["id"] for x in doc["meta"]["parts"]], ["2026-11-22T10:09:00Z"])
        self.assertTrue(doc["meta"]["git_dirty"])

    def test_a_new_failure_keeps_the_old_measurement_and_says_so(self):
        old = self.first()
        failure = {"experiment": NAME_A, "variant": "torch_compile", "reason": "failed: RuntimeError: x"}
        absent = {"experiment": NAME_A, "variant": "torch_eager", "reason": "not run: terminated by SIGTERM"}
        doc, p = part(part_meta("2026-11-22T10:09:00Z"), [], [], [failure, absent])
        doc = merge.merged(old, doc, p)
        self.assertEqual([v["name"] for v in doc["experiments"][0]["variants"]], ["torch_eager", "torch_compile"])
        self.assertIn(failure, doc["unmapped"])
        self.assertNotIn(absent, doc["unmapped"])  # it was measured before: an absence says nothing

    def test_a_measurement_supersedes_an_old_failure_of_that_variant(self):
        old = self.first()
        failure = {"experiment": NAME_A, "variant": "torch_compile", "reason": "failed: RuntimeError: x"}
        old["unmapped"].append(failure)
        doc, p = part(part_meta("2026-11-22T10:09:00Z"), [entry(NAME_A, [("torch_compile", 0.5)])])
        doc = merge.merged(old, doc, p)
        self.assertNotIn(failure, doc["unmapped"])
        # Another variant's failure stays.
        other = dict(failure, variant="torch_fused")
        old["unmapped"].append(other)
        doc, p = part(part_meta("2026-11-22T10:19:00Z"), [entry(NAME_A, [("torch_compile", 0.5)])])
        self.assertIn(other, merge.merged(old, doc, p)["unmapped"])

    def test_parts_in_the_same_second_get_distinct_ids(self):
        old = self.first()
        doc, p = part(part_meta("2026-11-22T10:00:00Z"), [entry(NAME_B, [("torch_eager", 4.0)])])
        doc = merge.merged(old, doc, p)
        self.assertEqual([x["id"] for x in doc["meta"]["parts"]], ["2026-11-22T10:00:00Z", "2026-11-22T10:00:00Z#2"])
        self.assertEqual(doc["experiments"][1]["variants"][0]["part"], "2026-11-22T10:00:00Z#2")

    def test_a_report_from_before_parts_is_one_part(self):
        old = self.first()
        del old["meta"]["parts"]
        for v in old["experiments"][0]["variants"]:
            del v["part"]
        doc, p = part(part_meta("2026-11-22T10:09:00Z"), [entry(NAME_B, [("torch_eager", 4.0)])])
        doc = merge.merged(old, doc, p)
        self.assertEqual([x["id"] for x in doc["meta"]["parts"]], ["2026-11-22T10:00:00Z", "2026-11-22T10:09:00Z"])
        self.assertEqual(doc["experiments"][0]["variants"][0]["part"], "2026-11-22T10:00:00Z")


class LoadExisting(support.ScratchTest):
    def setUp(self):
        super().setUp()
        self.lines = []
        self.file = self.path("pytorch-operators.json")

    def validate(self, path):
        done = support.run_seqbench("table", path)
        return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]

    def write_first(self, m):
        doc, p = part(m, [entry(NAME_A, [("torch_eager", 2.0)])])
        report.write_json_atomic(self.file, merge.merged(None, doc, p))

    def load(self, m):
        return merge.load_existing(self.file, "operators", m, self.validate, self.lines.append)

    def test_absent_is_none(self):
        self.assertIsNone(self.load(part_meta("2026-11-22T10:00:00Z")))
        self.assertEqual(self.lines, [])

    def test_a_matching_report_is_returned(self):
        self.write_first(part_meta("2026-11-22T10:00:00Z"))
        doc = self.load(part_meta("2026-11-22T10:09:00Z"))
        self.assertEqual(doc["experiments"][0]["name"], NAME_A)

    def test_another_git_sha_torch_or_device_is_refused_naming_both(self):
        self.write_first(part_meta("2026-11-22T10:00:00Z"))
        other_sha = "0" * 40
        with self.assertRaisesRegex(RunnerError, f"seqbench git sha '{INFO['git_sha']}', this run '{other_sha}'"):
            self.load(part_meta("2026-11-22T10:09:00Z", git_sha=other_sha))
        with self.assertRaisesRegex(RunnerError, "torch version '2.11.0', this run '2.12.0'"):
            self.load(part_meta("2026-11-22T10:09:00Z", torch="2.12.0"))
        with self.assertRaisesRegex(RunnerError, "device 'NVIDIA H100 80GB HBM3', this run 'NVIDIA H200'"):
            self.load(part_meta("2026-11-22T10:09:00Z", device="NVIDIA H200"))
        self.assertTrue(os.path.isfile(self.file))  # refused, not touched

    def test_an_unknown_git_sha_is_refused_even_against_unknown(self):
        self.write_first(part_meta("2026-11-22T10:00:00Z", git_sha="unknown"))
        with self.assertRaisesRegex(RunnerError, "seqbench git sha 'unknown'.*tools/stamp.sh"):
            self.load(part_meta("2026-11-22T10:09:00Z", git_sha="unknown"))
        self.assertTrue(os.path.isfile(self.file))  # refused, not touched

    def test_one_sha_is_not_one_build_the_source_hash_or_clean_trees_decide(self):
        a, b = "a" * 64, "b" * 64
        self.write_first(part_meta("2026-11-22T10:00:00Z", dirty=True, source_hash=a))
        with self.assertRaisesRegex(RunnerError, "other seqbench sources \\(source hash aaaaaaaaaaaa, this run bbbbbbbbbbbb\\)"):
            self.load(part_meta("2026-11-22T10:09:00Z", dirty=True, source_hash=b))
        self.assertIsNotNone(self.load(part_meta("2026-11-22T10:09:00Z", dirty=True, source_hash=a)))
        with self.assertRaisesRegex(RunnerError, "a part is dirty .* this run records no source hash"):
            self.load(part_meta("2026-11-22T10:09:00Z", dirty=False))
        # Neither has a hash: clean parts of one sha merge, a dirty one is refused.
        self.write_first(part_meta("2026-11-22T10:00:00Z"))
        self.assertIsNotNone(self.load(part_meta("2026-11-22T10:09:00Z")))
        with self.assertRaisesRegex(RunnerError, "a part is dirty .* it records no source hash"):
            self.load(part_meta("2026-11-22T10:09:00Z", dirty=True, source_hash=a))
        self.assertTrue(os.path.isfile(self.file))  # refused, not touched

    def test_a_report_of_the_other_quick_setting_is_moved_aside(self):
        # A quick part merged into a full report replaced full-shape variants of the shared names.
        self.write_first(part_meta("2026-11-22T10:00:00Z"))  # part() writes quick parts
        with open(self.file, encoding="utf-8") as f:
            before = f.read()
        self.assertIsNotNone(merge.load_existing(self.file, "operators", part_meta("2026-11-22T10:09:00Z"),
                                                 self.validate, self.lines.append, True))
        self.assertIsNone(merge.load_existing(self.file, "operators", part_meta("2026-11-22T10:09:00Z"),
                                              self.validate, self.lines.append, False))
        self.assertFalse(os.path.exists(self.file))
        aside = self.path("pytorch-operators.json.quick-20261122T100900Z")
        with open(aside, encoding="utf-8") as f:
            self.assertEqual(f.read(), before)
        self.assertIn("holds a quick run, this one is full; moved aside to", self.lines[-1])

    def test_a_seqbench_report_is_refused(self):
        m = part_meta("2026-11-22T10:00:00Z")
        doc = report.new_report("operators", m)
        del doc["meta"]["runner"]
        report.write_json_atomic(self.file, doc)
        with self.assertRaisesRegex(RunnerError, "is not a PyTorch report"):
            self.load(m)

    def test_a_file_that_is_no_report_is_moved_aside(self):
        for text in ("{ not json", json.dumps({"schema": "seqbench.report/1"})):
            with open(self.file, "w", encoding="utf-8") as f:
                f.write(text)
            self.assertIsNone(self.load(part_meta("2026-11-22T10:00:00Z")))
            self.assertFalse(os.path.exists(self.file))
        aside = sorted(n for n in os.listdir(self.dir) if ".unreadable-" in n)
        self.assertEqual(aside, ["pytorch-operators.json.unreadable-20261122T100000Z",
                                 "pytorch-operators.json.unreadable-20261122T100000Z.2"])
        with open(self.path(aside[0]), encoding="utf-8") as f:
            self.assertEqual(f.read(), "{ not json")  # kept as it was
        self.assertIn("moved aside to", self.lines[0])
        self.assertIn("does not match seqbench.report/1", self.lines[1])  # the C++ validator's reason


class CheckedEntriesStayValid(support.ScratchTest):
    def test_checks_with_experiment_part_and_unchecked_members_validate(self):
        m = part_meta("2026-11-22T10:00:00Z")
        c = report.check("x y vs PyTorch 2.11.0", False, None, None, None, "unchecked: ...")
        c["experiment"], c["unchecked"] = "x", True
        doc, p = part(m, [entry(NAME_A, [("torch_eager", 2.0)])], [c])
        path = self.path("r.json")
        report.write_json_atomic(path, merge.merged(None, copy.deepcopy(doc), p))
        done = support.run_seqbench("table", path)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("Checks: 0 passed, 1 failed", done.stdout)


if __name__ == "__main__":
    unittest.main()
