#!/usr/bin/env python3
"""Instructions per element of the dropout kernels' vector loops, against the issue rate.

A memory-bound kernel reaches the copy bandwidth only if its SMs can issue its instructions as fast
as the memory delivers its elements. This reads the SASS of the bias families' row-tiled kernels
(kernels/dropout_mask.h row_tile_kernel: bias + activation + dropout, bias + dropout + residual),
and the embedding kernels that stream a row per token (the forward, the atomic backward, the
sorted backward's window kernel; kernels/embedding.cu), walks the vector path through each
instance's row loop (at every conditional branch the way with no access narrower than 16 bytes
and no loop of its own, then the one with more 16-byte accesses, then the longer: the path that
moves the data at every shape the operator suite times; predicated instructions count, as they
issue either way), counts its instructions per element, and sets them against what the memory
asks for:

    ratio = instructions per element x elements per second at the copy bandwidth / issue rate

where elements per second = copy bandwidth / minimal bytes per element, and the issue rate is
4 warp instructions a clock an SM (Hopper's four schedulers) x 32 threads x SMs x clock. A ratio
above 1 means the kernel cannot reach the copy bandwidth: at best 1/ratio of it. Near 1, expect
less than either limit, since the two rarely overlap perfectly. The MUFU operations on the path
(rcp, ex2: kernels/gelu.h) get a ratio of their own against the special-function unit's rate
(16 results a clock an SM); the larger of the two ratios caps the kernel.

The device constants are leads until the suite measures them (H100 SXM: 3.0 TB/s copy assumed in
the NOTES; H200: about 4.3 TB/s copied by torch on one such machine here, the device README's KINDS
table; both 132 SMs at a 1.98 GHz boost clock). Override them per device: --h100-copy-tbs,
--h200-sms, --h200-clock-ghz and so on.

    tools/issue_budget.py OBJECT.o... [--cuobjdump PATH] [--markdown FILE]   (or saved FILE.sass)

OBJECT: kernels/CMakeFiles/seqbench_kernels.dir/{bias_act_dropout,bias_dropout_residual,embedding}.cu.o
of a build (any preset with sm_90 code; the family comes from the file name). cuobjdump (and the
nvdisasm it calls) must be on PATH or given; the GPU image has both; elsewhere the
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels carry them. Standard library only.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
PREDICATE = r"@!?U?P\w+\s+"  # an instruction's guard, "@P0 " or "@!UP1 "
# A branch to an address: group 1 its guard, group 2 its predicate operands (the condition is the
# guard and them: "@P2 BRA P1, 0x9c0", "BRA.U !UP0, 0x..."), group 3 the target. Unconditional
# when it has neither.
BRANCH = re.compile(rf"^({PREDICATE})?BRA(?:\.\w+)*\s+((?:!?U?P\w+\s*,\s*)*)0x([0-9a-f]+)")
# sm_90 writes global reductions REDG (and generic atomics ATOM.E): "RED\b" missed REDG.E.ADD.F32.
ACCESS = re.compile(r"^(LDG|STG|REDG?|ATOMG?)\b")
# Bytes an access moves a thread, by a part of its opcode; 4 otherwise (F16x2 and BF16x2 included).
WIDTHS = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1, "F32x4": 16, "F16x8": 16, "BF16x8": 16,
          "F32x2": 8, "F16x4": 8, "BF16x4": 8}
DTYPE_BYTES = {"float": 4, "__half": 2, "__nv_bfloat16": 2}
DTYPE_NAMES = {"float": "f32", "__half": "f16", "__nv_bfloat16": "bf16"}
ACTIVATIONS = {"0": "relu", "1": "gelu_erf", "2": "gelu_tanh"}

# mufu_per_clock: MUFU results a clock an SM (rcp, ex2, ...), 16 for compute capability 9.0 in the
# CUDA C++ Programming Guide's arithmetic throughput table, an eighth of the FFMA rate: a path can
# be bound by its MUFU operations before its issue slots run out.
DEVICES = {
    "H100": {"copy_tbs": 3.0, "sms": 132, "clock_ghz": 1.98, "mufu_per_clock": 16},
    "H200": {"copy_tbs": 4.3, "sms": 132, "clock_ghz": 1.98, "mufu_per_clock": 16},
}


def opcode(text):
    text = re.sub(rf"^{PREDICATE}", "", text)
    return text.split()[0] if text else ""


def access_width(op):
    for part in op.split(".")[1:]:
        if part in WIDTHS:
            return WIDTHS[part]
    return 4


def parse_sass(text):
    functions, current = {}, None
    for line in text.splitlines():
        match = FUNCTION.search(line)
        if match:
            current = match.group(1)
            functions[current] = []
            continue
        match = INSTRUCTION.match(line)
        if match and current is not None:
            functions[current].append((int(match.group(1), 16), match.group(2)))
    return functions


def loops(instructions):
    """Each backward branch's (target, branch) addresses: the loops of a function."""
    found = []
    for address, text in instructions:
        match = BRANCH.match(text)
        if match and int(match.group(3), 16) < address:
            found.append((int(match.group(3), 16), address))
    return found


class Path:
    """What one path through a stretch of SASS executes."""

    def __init__(self):
        self.count = 0  # instructions, NOPs left out
        self.wide_loads = 0  # 16-byte global loads
        self.wide_stores = 0  # 16-byte global stores
        self.narrow = 0  # global accesses narrower than 16 bytes
        self.mufu = 0  # MUFU operations (rcp, ex2, ...): the special-function unit, an eighth of FFMA's rate
        self.loop = False  # holds a loop of its own (a backward branch)
        self.trace = []  # the (address, text) counted, for --trace

    def add(self, other):
        for key in ("count", "wide_loads", "wide_stores", "narrow", "mufu"):
            setattr(self, key, getattr(self, key) + getattr(other, key))
        self.loop = self.loop or other.loop
        self.trace.extend(other.trace)


def better(a, b):
    """The path the vector loop takes: no narrow access and no loop of its own (the element path,
    the keep bits of a partial vector), then the more 16-byte accesses, then the longer one."""
    def key(path):
        return (not path.narrow and not path.loop, path.wide_loads + path.wide_stores, path.count)
    return a if key(a) >= key(b) else b


def walk(instructions, index, start, stop):
    """The vector path from address `start` up to (not including) `stop`. At a conditional forward
    branch both ways are walked up to where they join (the enclosing BSSY's reconvergence address,
    or the branch target when no region encloses it) and the better() one is counted; predicated
    instructions count as executed (they issue either way)."""
    path = Path()
    regions = []  # reconvergence addresses of the BSSY regions entered on this path
    i = index.get(start)
    while i is not None and i < len(instructions) and instructions[i][0] < stop:
        address, text = instructions[i]
        while regions and address >= regions[-1]:
            regions.pop()
        op = opcode(text)
        if op == "NOP":
            i += 1
            continue
        path.count += 1
        path.trace.append((address, text))
        if op.startswith("MUFU"):
            path.mufu += 1
        if op.startswith("BSSY"):
            target = re.search(r"0x([0-9a-f]+)", text)
            if target:
                regions.append(int(target.group(1), 16))
        if ACCESS.match(op):
            width = access_width(op)
            if width != 16:
                path.narrow += 1
            elif op.startswith("LDG"):
                path.wide_loads += 1
            elif op.startswith("STG"):
                path.wide_stores += 1
        branch = BRANCH.match(text)
        if branch:
            target = int(branch.group(3), 16)
            if target <= address:
                path.loop = True  # a loop inside the stretch: not the vector path
                return path
            if branch.group(1) is None and not branch.group(2):  # unconditional: jump
                if target >= stop:
                    return path
                i = index.get(target)
                continue
            join = regions[-1] if regions and target <= regions[-1] else target
            join = min(join, stop)
            taken = walk(instructions, index, target, join)
            fall = walk(instructions, index, instructions[i + 1][0], join) if i + 1 < len(instructions) else Path()
            path.add(better(taken, fall))
            i = index.get(join)
            continue
        i += 1
    return path


def vector_path(instructions, loop):
    """The vector path through one iteration of `loop` (target, branch): see walk()."""
    index = {address: i for i, (address, _) in enumerate(instructions)}
    target, branch = loop
    # Walk the body up to the backward branch, then count the branch itself.
    body = walk(instructions, index, target, branch)
    body.count += 1
    body.trace.append(instructions[index[branch]])
    return body


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool:
        return {name: name for name in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def describe(demangled, family):
    """(dtype, inputs, mask, reduce, in_place, what) of a row_tile_kernel instance or of an embedding
    kernel (one per launch variant: the nonpad_count instances, the same loop as the slot ones,
    are skipped as in-place rows are), or None."""
    embedding = describe_embedding(demangled)
    if embedding:
        return embedding
    match = re.search(r"row_tile_kernel<(\w+), (\d), (true|false), (true|false), (true|false), (true|false), (.*)>\(",
                      demangled)
    if not match:
        return None
    dtype, inputs, _, mask, reduce_, in_place, fn = match.groups()
    what = re.sub(r"seqbench::kernels::|\(anonymous namespace\)::", "", fn)
    activation = re.search(r"\(seqbench::kernels::Activation\)(\d)", fn) or re.search(r"\(Activation\)(\d)", what)
    name = re.match(r"\w+", what).group(0)
    if activation:
        name += "/" + ACTIVATIONS.get(activation.group(1), activation.group(1))
    return dtype, int(inputs), mask == "true", reduce_ == "true", in_place == "true", f"{family}:{name}"


POSITION_SOURCES = {"0": "learned", "1": "sinusoid_table", "2": "sinusoid_computed"}


def describe_embedding(demangled):
    """The kernels/embedding.cu kernels that stream a row per token (always with dropout): the
    forward, the atomic backward and the sorted backward's window kernel. Their vector loop moves
    one dy or y vector per element group, so each counts as one input."""
    match = re.search(r"embedding_fwd_kernel<(\w+), \([\w:() ]*?PositionSource\)(\d), (true|false)>\(", demangled)
    if match:
        dtype, source, nonpad = match.groups()
        return dtype, 1, True, False, nonpad == "true", f"embedding:Forward/{POSITION_SOURCES.get(source, source)}"
    match = re.search(r"embedding_bwd_atomic_kernel<(\w+), (true|false), (true|false)>\(", demangled)
    if match:
        dtype, learned, nonpad = match.groups()
        positions = "learned" if learned == "true" else "sinusoidal"
        return dtype, 1, True, False, nonpad == "true", f"embedding:BackwardAtomic/{positions}"
    match = re.search(r"embedding_window_kernel<(\w+)>\(", demangled)
    if match:
        return match.group(1), 1, True, False, False, "embedding:BackwardSortedWindow"
    return None


# Minimal bytes per element, in elements of T, of each fused op (suites/operators, issue #3):
# inputs read once and outputs written once (the bias and the column partials are per column).
MINIMAL_ELEMENTS = {
    "bias_act_dropout:FusedForward": 2,   # x, y
    "bias_act_dropout:FusedBackward": 3,  # dy, x, dx
    "bias_dropout_residual:FusedForward": 3,  # x, residual, y
    "bias_dropout_residual:FusedBackward": 2,  # dy, dx
}
# The embedding kernels, per element of y (forward) or dy (backwards): that element, and the
# distinct-row share of a token-table row (the forward reads each distinct row once, a repeat
# coming from L2; the backwards write each row with a gradient once). The position rows and the
# sinusoid table are L2-resident (L rows against B·L tokens), and the backward's zero fill of the
# rows without a gradient is another kernel's (or another block's) work, so neither is counted.
# The distinct share of the operator suite's 16384 x 1024 uniform case: 11825 distinct rows among
# 14734 non-padding tokens (kernels/NOTES-cross-entropy-embedding-qkv.md), --embedding-distinct.
EMBEDDING_DISTINCT = 11825 / 14734
EMBEDDING_KERNELS = ("embedding:Forward", "embedding:BackwardAtomic", "embedding:BackwardSortedWindow")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("objects", nargs="+")
    parser.add_argument("--cuobjdump", default=None)
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--all", action="store_true", help="also the unfused baselines' instances")
    parser.add_argument("--embedding-distinct", type=float, default=EMBEDDING_DISTINCT,
                        help="distinct token rows per non-padding token, for the embedding kernels' "
                             f"minimal bytes (default {EMBEDDING_DISTINCT:.3f})")
    parser.add_argument("--trace", default=None, metavar="REGEX",
                        help="print the counted path of the instances whose name matches")
    for device, values in DEVICES.items():
        for key, value in values.items():
            parser.add_argument(f"--{device.lower()}-{key.replace('_', '-')}", type=float, default=value)
    args = parser.parse_args()
    devices = {d: {k: getattr(args, f"{d.lower()}_{k}") for k in v} for d, v in DEVICES.items()}

    cuobjdump = args.cuobjdump or shutil.which("cuobjdump")
    if not cuobjdump and not all(path.endswith(".sass") for path in args.objects):
        sys.exit("issue_budget: error: cuobjdump not found (give --cuobjdump, or put it and nvdisasm on PATH)")
    rows = []
    for path in args.objects:
        if not os.path.isfile(path):
            sys.exit(f"issue_budget: error: {path}: no such file")
        family = os.path.basename(path).split(".")[0]
        if path.endswith(".sass"):  # cuobjdump -sass output saved earlier
            with open(path) as sass:
                functions = parse_sass(sass.read())
        else:
            result = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True)
            if result.returncode != 0:
                sys.exit(f"issue_budget: error: cuobjdump -sass {path}: {result.stderr.strip()}")
            functions = parse_sass(result.stdout)
        names = demangle(list(functions))
        for mangled, instructions in functions.items():
            info = describe(names[mangled], family)
            if info is None:
                continue
            dtype, inputs, mask, reduce_, in_place, what = info
            key = re.sub(r"/.*", "", what)
            if key not in MINIMAL_ELEMENTS and key not in EMBEDDING_KERNELS and not args.all:
                continue
            if in_place:
                continue  # the same loop as the out-of-place instance, less the read-only loads
            candidates = []
            for loop in loops(instructions):
                path = vector_path(instructions, loop)
                if path.wide_loads > 0 and not path.narrow and not path.loop:
                    candidates.append(path)
            if not candidates:
                rows.append((what, DTYPE_NAMES[dtype], mask, None, None, None, {}))
                continue
            # The row loop: the one whose vector path moves the most (the unrolled rows).
            best = max(candidates, key=lambda path: (path.wide_loads, path.count))
            count, loads, stores = best.count, best.wide_loads, best.wide_stores
            if args.trace and re.search(args.trace, names[mangled]):
                print(f"# {names[mangled]}: {count} instructions", file=sys.stderr)
                for address, text in best.trace:
                    print(f"  {address:#06x}  {text}", file=sys.stderr)
            k = 16 // DTYPE_BYTES[dtype]
            rows_per_iteration = stores if stores else loads // inputs
            elements = rows_per_iteration * k
            per_element = count / elements
            mufu_per_element = best.mufu / elements
            if key in EMBEDDING_KERNELS:
                minimal = (1 + args.embedding_distinct) * DTYPE_BYTES[dtype]
            else:
                minimal = MINIMAL_ELEMENTS.get(key, inputs + (1 if stores else 0)) * DTYPE_BYTES[dtype]
            verdicts = {}
            for device, c in devices.items():
                issue_rate = 4 * 32 * c["sms"] * c["clock_ghz"] * 1e9
                mufu_rate = c["mufu_per_clock"] * c["sms"] * c["clock_ghz"] * 1e9
                elements_per_s = c["copy_tbs"] * 1e12 / minimal
                verdicts[device] = (per_element * elements_per_s / issue_rate,
                                    mufu_per_element * elements_per_s / mufu_rate)
            rows.append((what, DTYPE_NAMES[dtype], mask, per_element, mufu_per_element, minimal, verdicts))

    rows.sort(key=lambda r: (r[0], r[1], not r[2]))
    header = ("| kernel | dtype | dropout | instr / element | MUFU / element | minimal B / element | " +
              " | ".join(f"{d} issue / memory" for d in devices) + " | " +
              " | ".join(f"{d} MUFU / memory" for d in devices) + " |")
    lines = [header, "|" + "---|" * (6 + 2 * len(devices))]
    for what, dtype, mask, per_element, mufu_per_element, minimal, verdicts in rows:
        if per_element is None:
            lines.append(f"| {what} | {dtype} | {'yes' if mask else 'no'} | no vector loop found | | | " +
                         " | ".join("" for _ in range(2 * len(devices))) + " |")
            continue
        cells = []
        for part in (0, 1):  # the issue ratios, then the MUFU ratios; the larger one caps the kernel
            for device in devices:
                ratio = verdicts[device][part]
                bound = max(verdicts[device]) == ratio and ratio > 1
                cells.append(f"{ratio:.2f}" + (f" (≤ {100 / ratio:.0f} % of copy)" if bound else ""))
        lines.append(f"| {what} | {dtype} | {'yes' if mask else 'no'} | {per_element:.1f} | "
                     f"{mufu_per_element:.2f} | {minimal:.3g} | " + " | ".join(cells) + " |")
    constants = "; ".join(f"{d}: copy {c['copy_tbs']} TB/s, {c['sms']:.0f} SMs, {c['clock_ghz']} GHz, "
                          f"{c['mufu_per_clock']:.0f} MUFU results a clock an SM" for d, c in devices.items())
    text = "\n".join(lines) + f"\n\n({constants}; issue 4 warp instructions a clock an SM.)\n"
    print(text, end="")
    if args.markdown:
        tmp = args.markdown + ".tmp"
        with open(tmp, "w") as out:
            out.write(text)
        os.replace(tmp, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
