"""tools/pack_tests.py: a build's tests packed into a folder that ctest runs from anywhere (what
tools/prebuild.sh carries to a GPU machine). The pack is checked by running ctest on a copy of it in
another folder: the tests it lists, their outcomes and the properties that decide them."""
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tool_test import ToolTest  # noqa: E402

CTEST = shutil.which("ctest")


@unittest.skipIf(CTEST is None, "ctest not found")
class PackTests(ToolTest):
    tool = "pack_tests.py"

    def setUp(self):
        super().setUp()
        self.build = os.path.join(self.dir, "build")
        os.makedirs(os.path.join(self.build, "tests", "kernels"))
        # A stand-in for a gtest binary: says SKIPPED, passes or fails as its arguments ask.
        self.binary = os.path.join(self.build, "tests", "kernels", "fake_test")
        with open(self.binary, "w", encoding="utf-8") as f:
            f.write('#!/bin/sh\ncase "$1" in\n  skip) echo "[  SKIPPED ] no device" ;;\n'
                    '  fail) echo "mismatch"; exit 1 ;;\n  pwd) pwd ;;\n  env) echo "value=$PACK_VALUE" ;;\n'
                    '  *) echo ok ;;\nesac\n')
        os.chmod(self.binary, 0o755)

    def case(self, name, arg, **extra):
        props = [{"name": "LABELS", "value": ["gpu"]},
                 {"name": "SKIP_REGULAR_EXPRESSION", "value": ["\\[  SKIPPED \\]"]},
                 {"name": "WORKING_DIRECTORY", "value": os.path.dirname(self.binary)}]
        props += [{"name": k, "value": v} for k, v in extra.items()]
        return {"name": name, "command": [self.binary, arg], "properties": props}

    def pack(self, tests, out="pack"):
        listing = self.write("tests.json", json.dumps({"kind": "ctestInfo", "tests": tests}))
        return self.run_tool(listing, self.build, os.path.join(self.dir, out))

    def ctest(self, folder, *args):
        return subprocess.run([CTEST, "--test-dir", folder, "--output-on-failure", *args], capture_output=True,
                              text=True, timeout=60, cwd=self.dir)

    def moved(self, out="pack"):
        """The pack copied to another folder, as a device call's carry puts it elsewhere."""
        there = os.path.join(self.dir, "elsewhere")
        shutil.copytree(os.path.join(self.dir, out), there)
        return there

    def test_a_moved_pack_runs_every_test_with_its_outcome_and_properties(self):
        tests = [self.case("Suite.Passes", "ok"), self.case("Suite.Skips", "skip"), self.case("Suite.Fails", "fail"),
                 self.case("Suite.Serial", "ok", RUN_SERIAL=True, TIMEOUT=30),
                 self.case("Suite.Env", "env", ENVIRONMENT=["PACK_VALUE=42"], PASS_REGULAR_EXPRESSION=["value=42"]),
                 self.case("Odd]=]name[=[", "ok"), self.case("Ends]=", "ok")]
        result = self.pack(tests)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("packed 7 tests of 1 binaries", result.stdout)
        there = self.moved()
        shutil.rmtree(self.build)  # nothing of the build may be needed any more
        run = self.ctest(there)
        self.assertNotEqual(run.returncode, 0)  # Suite.Fails fails
        self.assertIn("86% tests passed, 1 tests failed out of 7", run.stdout)
        self.assertRegex(run.stdout, r"Suite\.Skips \.+\*\*\*Skipped")
        self.assertRegex(run.stdout, r"Suite\.Fails \.+\*\*\*Failed")
        self.assertRegex(run.stdout, r"Suite\.Env \.+ +Passed")
        self.assertRegex(run.stdout, r"Odd\]=\]name\[=\[ \.+ +Passed")
        self.assertRegex(run.stdout, r"Ends\]= \.+ +Passed")
        listing = json.loads(self.ctest(there, "--show-only=json-v1").stdout)
        by_name = {t["name"]: t for t in listing["tests"]}
        serial = {p["name"]: p["value"] for p in by_name["Suite.Serial"]["properties"]}
        self.assertEqual(serial.get("RUN_SERIAL"), True)
        self.assertEqual(serial.get("TIMEOUT"), 30)
        self.assertEqual(serial.get("LABELS"), ["gpu"])
        # Commands resolve inside the pack; the working folder is the pack's.
        self.assertEqual(by_name["Suite.Passes"]["command"][0], os.path.join(there, "bin", "fake_test"))
        self.assertEqual(len(json.loads(self.ctest(there, "-L", "gpu", "--show-only=json-v1").stdout)["tests"]), 7)

    def names_in(self, folder):
        return [t["name"] for t in json.loads(self.ctest(folder, "--show-only=json-v1").stdout)["tests"]]

    def test_the_pack_replaces_an_older_one_whole_and_a_failed_one_leaves_it(self):
        pack = os.path.join(self.dir, "pack")
        self.assertEqual(self.pack([self.case("A.One", "ok"), self.case("A.Two", "ok")]).returncode, 0)
        self.assertEqual(self.pack([self.case("B.Only", "ok")]).returncode, 0)
        self.assertEqual(self.names_in(pack), ["B.Only"])
        # Two binaries of one name fail while the pack is written: the older pack stays, whole.
        twin = os.path.join(self.build, "tests", "layers", "fake_test")
        os.makedirs(os.path.dirname(twin))
        shutil.copy2(self.binary, twin)
        clash = {**self.case("C.Twin", "ok"), "command": [twin, "ok"],
                 "properties": [{"name": "WORKING_DIRECTORY", "value": os.path.dirname(twin)}]}
        result = self.pack([self.case("C.One", "ok"), clash])
        self.assertEqual(result.returncode, 1)
        self.assertIn("two binaries are named 'fake_test'", result.stderr)
        self.assertEqual(self.names_in(pack), ["B.Only"])
        for left in ("pack.tmp", "pack.old"):
            self.assertFalse(os.path.exists(os.path.join(self.dir, left)), left)

    def test_tests_that_need_this_machine_are_refused_by_name_and_no_pack_is_left(self):
        outside = shutil.which("sh")
        cases = [
            ({"name": "X.Outside", "command": [outside, "-c", "true"], "properties": []}, "not a binary of the build"),
            (self.case("X.Arg", os.path.join(self.build, "data.bin")), "a path of this machine's trees"),
            (self.case("X.Env", "ok", ENVIRONMENT=[f"SEQBENCH_BINARY={self.build}/suites/seqbench"]),
             "ENVIRONMENT"),
            ({**self.case("X.Where", "ok"),
              "properties": [{"name": "WORKING_DIRECTORY", "value": self.dir}]}, "not its binary's folder"),
            ({"name": "X.NotBuilt", "command": [], "properties": []}, "has no command"),
            (self.case("X.Groups", "ok", RESOURCE_GROUPS=[{"requirements": [{".type": "gpus", "slots": 1}]}]),
             "structured value"),
        ]
        for bad, why in cases:
            with self.subTest(bad["name"]):
                result = self.pack([self.case("Fine.One", "ok"), bad], out="refused")
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(bad["name"], result.stderr)
                self.assertIn(why, result.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.dir, "refused")))

    def test_an_empty_list_packs_nothing_and_bad_usage_exits_2(self):
        self.assertEqual(self.pack([]).returncode, 1)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "pack")))
        self.assertEqual(self.run_tool().returncode, 2)
        self.assertEqual(self.run_tool(self.write("bad.json", "{not json"), self.build, "p").returncode, 2)
        self.assertEqual(self.run_tool(self.write("list.json", "[]"), self.build, "p").returncode, 2)
        missing = self.run_tool(self.write("ok.json", '{"tests": []}'), os.path.join(self.dir, "no-build"), "p")
        self.assertEqual(missing.returncode, 2)


if __name__ == "__main__":
    unittest.main()
