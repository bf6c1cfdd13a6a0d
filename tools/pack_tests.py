#!/usr/bin/env python3
"""Packs a build's tests into a folder that ctest runs from anywhere: tools/prebuild.sh packs the gpu
tests built on a machine without a GPU, so that a GPU lease's call runs them with no compile.

    ctest --test-dir build/gpu -L gpu --show-only=json-v1 > tests.json
    tools/pack_tests.py tests.json build/gpu PACK
    ctest --test-dir PACK            # on any machine, in any folder the pack is copied to

PACK/bin/ gets a copy of every binary the tests run, and PACK/CTestTestfile.cmake names each test
with its binary relative to PACK (ctest resolves a relative command against the folder it tests)
and the same properties (labels, skip and pass expressions, RUN_SERIAL, timeouts, environment).
Every test runs in PACK itself, not beside its binary, so a test's working folder must be its
binary's own build folder (gtest_discover_tests gives it that one) and nothing may depend on it; a
test whose command, arguments, environment or working folder names a path of this machine's trees
cannot run elsewhere, and the pack refuses it by name (exit 1) rather than carry a test that would
fail for a reason that is not the code's (a relative path in an argument is not caught: the gpu
tests take none). Bad usage exits 2. The pack is written to PACK.tmp and swapped into place, so a
failure leaves no partial pack.
"""
import json
import os
import shutil
import sys

# Properties ctest records that say where the test ran here; the pack runs in its own folder.
WHERE = {"WORKING_DIRECTORY"}


class Unpackable(Exception):
    pass


def cmake_arg(text):
    """A CMake bracket argument: taken literally, so regexes and ';'-lists pass through unchanged.
    The closing bracket may not occur in the text, nor start at its end (text "a]=" would close as
    "a" then "=]"); CMake drops a newline right after the opening bracket, so one is always written."""
    text = str(text)
    eq = "="
    while f"]{eq}]" in text + "]":
        eq += "="
    return f"[{eq}[\n{text}]{eq}]"


def property_value(name, key, value):
    """A property's value as ctest's test file spells it; Unpackable for the object-valued ones
    (RESOURCE_GROUPS and the like), which the pack does not know how to write back."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)):
        raise Unpackable(f"test '{name}' has {key} with a structured value, which the pack cannot write")
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    return str(value)


def names_a_local_path(text, roots):
    return any(root in str(text) for root in roots)


def plan(tests, build_dir, roots):
    """[(name, binary, args, [(property, value)])] for every test, or Unpackable naming the first
    test that cannot run from a pack."""
    build_dir = os.path.realpath(build_dir)
    packed = []
    for test in tests:
        name = test.get("name", "")
        command = test.get("command") or []
        if not command:
            raise Unpackable(f"test '{name}' has no command (a test of a target that was not built?)")
        binary = os.path.realpath(command[0])
        if not binary.startswith(build_dir + os.sep):
            raise Unpackable(f"test '{name}' runs '{command[0]}', which is not a binary of the build "
                             f"folder {build_dir}")
        for arg in command[1:]:
            if names_a_local_path(arg, roots):
                raise Unpackable(f"test '{name}' passes '{arg}', a path of this machine's trees")
        props = []
        for prop in test.get("properties", []):
            key, value = prop.get("name"), prop.get("value")
            if key in WHERE:
                if os.path.realpath(str(value)) != os.path.dirname(binary):
                    raise Unpackable(f"test '{name}' runs in '{value}', not its binary's folder")
                continue
            text = property_value(name, key, value)
            if names_a_local_path(text, roots):
                raise Unpackable(f"test '{name}' has {key} '{text}', which names a path of this machine's trees")
            props.append((key, text))
        packed.append((name, binary, command[1:], props))
    return packed


def write_pack(packed, out_dir):
    """Writes the pack into OUT.tmp, then swaps it in (an older pack moves to OUT.old first and is
    removed after): a failure leaves the older pack, or none, and never a partial one at OUT."""
    out_dir = out_dir.rstrip(os.sep)
    tmp, old = out_dir + ".tmp", out_dir + ".old"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        binaries = fill_pack(packed, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(out_dir):
        os.rename(out_dir, old)
    os.rename(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return binaries


def fill_pack(packed, tmp):
    os.makedirs(os.path.join(tmp, "bin"))
    copied = {}
    for _, binary, _, _ in packed:
        base = os.path.basename(binary)
        if base in copied and copied[base] != binary:
            raise Unpackable(f"two binaries are named '{base}': {copied[base]} and {binary}")
        if base not in copied:
            shutil.copy2(binary, os.path.join(tmp, "bin", base))
            copied[base] = binary
    lines = ["# Written by tools/pack_tests.py: the tests of a build, relocatable (ctest --test-dir <this folder>).",
             "# Each command is relative to this folder, where ctest runs it."]
    for name, binary, args, props in packed:
        command = " ".join(cmake_arg(a) for a in [f"bin/{os.path.basename(binary)}", *args])
        lines.append(f"add_test({cmake_arg(name)} {command})")
        if props:
            body = " ".join(f"{key} {cmake_arg(value)}" for key, value in props)
            lines.append(f"set_tests_properties({cmake_arg(name)} PROPERTIES {body})")
    with open(os.path.join(tmp, "CTestTestfile.cmake"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return len(copied)


def main(argv):
    if len(argv) != 4:
        print("usage: pack_tests.py TESTS.json BUILD_DIR PACK_DIR  (TESTS.json: ctest --show-only=json-v1; "
              "- for standard input)", file=sys.stderr)
        return 2
    source, build_dir, out_dir = argv[1:]
    try:
        doc = json.load(sys.stdin if source == "-" else open(source, encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"pack_tests.py: cannot read the test list {source}: {e}", file=sys.stderr)
        return 2
    tests = doc.get("tests") if isinstance(doc, dict) else None
    if not isinstance(tests, list) or not os.path.isdir(build_dir):
        print(f"pack_tests.py: want ctest's --show-only=json-v1 list and a build folder (got {source}, "
              f"{build_dir})", file=sys.stderr)
        return 2
    if not tests:
        print("pack_tests.py: the list holds no test: nothing to pack", file=sys.stderr)
        return 1
    # Paths that mean nothing on another machine: the build folder and the source tree above it.
    roots = {os.path.realpath(build_dir), os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))}
    try:
        packed = plan(tests, build_dir, roots)
        binaries = write_pack(packed, out_dir)
    except Unpackable as e:
        print(f"pack_tests.py: {e}", file=sys.stderr)
        return 1
    print(f"packed {len(packed)} tests of {binaries} binaries into {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
