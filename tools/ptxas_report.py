#!/usr/bin/env python3
"""The ptxas report of a build, per kernel: registers, stack frame and spills.

A build configured with SEQBENCH_PTXAS_VERBOSE=ON (the `ptxas` preset, and tools/gpu.sh's build)
passes -Xptxas -v, so its log holds, for every function ptxas compiles:

    ptxas info    : Compiling entry function '_ZN8seqbench...' for 'sm_90'
    ptxas info    : Function properties for _ZN8seqbench...
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 40 registers, used 1 barriers, 400 bytes cmem[0]

This reads such a log and prints one line of summary; with --markdown it also writes a table, one
row per function (the same function compiled in several objects, or for several architectures, is
one row with its largest numbers; its architectures are listed). It exits 1 when any function spills: a spill in a memory-bound kernel is traffic the
minimal-bytes model does not count, and it is read at every GPU build rather than by hand.
Standard library only; names are demangled through c++filt where it exists.

    tools/ptxas_report.py build.log [--markdown ptxas.md]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
PROPERTIES = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGISTERS = re.compile(r"Used (\d+) registers")


class Function:
    def __init__(self, name):
        self.name = name
        self.archs = set()
        self.entry = False
        self.registers = None
        self.stack = 0
        self.spill_stores = 0
        self.spill_loads = 0
        self.compiles = 0  # how many times ptxas compiled it as an entry (objects x architectures)

    @property
    def spills(self):
        return self.spill_stores + self.spill_loads


def parse(lines):
    """{mangled name: Function} from a build log's lines."""
    functions = {}
    entry = None  # the entry function whose register line is still to come
    pending = None  # the function whose stack-frame line comes next

    def get(name):
        if name not in functions:
            functions[name] = Function(name)
        return functions[name]

    for line in lines:
        m = ENTRY.search(line)
        if m:
            entry = get(m.group(1))
            entry.entry = True
            entry.archs.add(m.group(2))
            entry.compiles += 1
            continue
        m = PROPERTIES.search(line)
        if m:
            pending = get(m.group(1))
            continue
        m = FRAME.search(line)
        if m and pending is not None:
            stack, stores, loads = (int(g) for g in m.groups())
            pending.stack = max(pending.stack, stack)
            pending.spill_stores = max(pending.spill_stores, stores)
            pending.spill_loads = max(pending.spill_loads, loads)
            pending = None
            continue
        m = REGISTERS.search(line)
        if m and entry is not None:
            entry.registers = max(entry.registers or 0, int(m.group(1)))
            entry = None
    return functions


def demangle(names):
    """{mangled: readable}; the mangled names themselves where c++filt is missing or fails."""
    names = list(names)
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    try:
        done = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60,
                              check=True)
        readable = done.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    if len(readable) != len(names):
        return {n: n for n in names}
    return dict(zip(names, readable))


def summary(functions):
    kernels = [f for f in functions.values() if f.entry]
    if not functions:
        return "ptxas: no report in the log (nothing was compiled, or the build lacked -Xptxas -v)"
    spilling = [f for f in functions.values() if f.spills > 0]
    with_stack = [f for f in functions.values() if f.stack > 0]
    archs = sorted({a for f in kernels for a in f.archs})
    widest = max(kernels, key=lambda f: f.registers or 0, default=None)
    parts = [f"ptxas: {len(kernels)} kernel(s) for {', '.join(archs) or 'no architecture'}",
             f"{len(spilling)} function(s) spill" if spilling else "no spills",
             f"{len(with_stack)} with a stack frame"]
    if widest is not None and widest.registers is not None:
        parts.append(f"at most {widest.registers} registers")
    return ", ".join(parts)


def markdown(functions, names):
    def cell(text, limit=200):
        text = text.replace("|", "\\|")
        return text if len(text) <= limit else text[: limit - 1] + "…"

    rows = sorted(functions.values(), key=lambda f: (-f.spills, -f.stack, names[f.name]))
    out = [summary(functions), "",
           "| function | kernel | arch | registers | stack B | spill stores B | spill loads B | compiles |",
           "|---|---|---|---:|---:|---:|---:|---:|"]
    for f in rows:
        out.append(f"| `{cell(names[f.name])}` | {'yes' if f.entry else 'no'} | {', '.join(sorted(f.archs)) or '—'} | "
                   f"{f.registers if f.registers is not None else '—'} | {f.stack} | {f.spill_stores} | "
                   f"{f.spill_loads} | {f.compiles or '—'} |")
    return "\n".join(out) + "\n"


def write_atomic(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ptxas-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600: a report is for reading
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(description="per-kernel ptxas registers, stack and spills from a build log")
    parser.add_argument("log", help="a build log with -Xptxas -v output (tools/gpu.sh's build.log)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table here (atomically)")
    args = parser.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as f:
            functions = parse(f)
    except OSError as e:
        print(f"ptxas_report: error: cannot read '{args.log}': {e.strerror}", file=sys.stderr)
        return 2
    print(summary(functions))
    spilling = sorted((f for f in functions.values() if f.spills > 0), key=lambda f: -f.spills)
    names = demangle(functions)
    for f in spilling:
        print(f"  spills {f.spill_stores} B stored / {f.spill_loads} B loaded: {names[f.name]}")
    if args.markdown:
        try:
            write_atomic(args.markdown, markdown(functions, names))
        except OSError as e:
            print(f"ptxas_report: error: cannot write '{args.markdown}': {e.strerror}", file=sys.stderr)
            return 2
    return 1 if spilling else 0


if __name__ == "__main__":
    sys.exit(main())
