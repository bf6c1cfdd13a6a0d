#!/usr/bin/env python3
"""Checks that the kernels' whole-vector paths write 16 bytes at a time, in their PTX.

The memory-bound kernels move Packed<T> vectors (kernels/packed.h): one 16-byte ld.global.v4 and
one 16-byte st.global.v4 per vector on the aligned path. Whether a store stays one instruction is
the compiler's choice, and nvcc 13.0 was seen to break one into an st.global per element (4 of 4
bytes, or 8 of 2 bytes) while the loads beside it stayed 16 bytes wide: in row_tile_kernel and
heads_tile_kernel, whose column index was built from a compile-time block width (see
kernels/dropout_mask.h). Nothing else shows it without a GPU, and on one it shows only as lost
bandwidth. So: every kernel entry that loads 16-byte vectors must also write 16-byte vectors,
except the entries listed in EXCEPTIONS, which by design write per-row or per-segment results.
A write is a store or a reduction into global memory (red/atom): the embedding's atomic backward
adds each 16-byte vector with one red.global.add.v4 (kernels/vector_atomic.cuh), where pair or
scalar atomics would take four instructions a vector. It asks for at least one 16-byte write an
entry, not for every write site: an entry whose only vector path lost its wide write fails, one
that kept it on one of several paths passes.

    tools/ptx_vector_check.py FILE.ptx [FILE.ptx ...]     (an argument may also be a ';' list)

Prints one line per file and the entries that break the rule; exits 1 if any does, 2 if a file
cannot be read or holds no kernel entry. Standard library only.
"""
import re
import sys

ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)\s*\(", re.M)
# 16 bytes at once: .v4 of a 32-bit type, or .v2 of a 64-bit one (ld.global.nc.v4.u32,
# st.global.v4.f32, st.global.wb.v2.u64, ...).
VECTOR16 = r"\.(?:v4\.(?:[fbsu]32)|v2\.(?:[fbsu]64))"
LOAD16 = re.compile(r"\bld\.global(?:\.[a-z0-9:]+)*?" + VECTOR16 + r"\b")
# A write to global memory: st, red or atom in .global or generic addressing (nvcc writes the 16-bit
# pair atomics generic: atom.add.noftz.bf16x2), never .shared, .local or .param.
NOT_ON_CHIP = r"(?!\.(?:shared|local|param))"
STORE16 = re.compile(r"\bst" + NOT_ON_CHIP + r"(?:\.[a-z0-9:]+)*?" + VECTOR16 + r"\b")
# 16 bytes reduced at once (sm_90): red.global.add.v4.f32, red.global.add.noftz.v4.bf16x2, and the
# atom.global...v4.f32 that atomicAdd(float4*, float4) becomes in PTX.
REDUCE16 = re.compile(r"\b(?:red|atom)" + NOT_ON_CHIP + r"(?:\.[a-z0-9:]+)*?\.v4\.(?:f32|f16x2|bf16x2)\b")
ANY_WRITE = re.compile(r"\b(?:st|red|atom)" + NOT_ON_CHIP + r"\.")

# Substrings of mangled entry names that may load 16-byte vectors without storing them, and why.
EXCEPTIONS = {
    "cross_entropy_forward_kernel": "writes a row's loss, nll and lse (scalars per row)",
    "layernorm_backward_row_sums_kernel": "writes one float2 of row sums per row",
    "embedding_merge_kernel": "writes only the rows whose run of tokens spans sort windows",
}


def entries(text):
    """(name, body) of every kernel entry in a PTX text."""
    found = list(ENTRY.finditer(text))
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        yield m.group(1), text[m.start():end]


def check(text):
    """(number of entries, [(name, 16-byte loads, writes of any width)] that break the rule)."""
    count = 0
    broken = []
    for name, body in entries(text):
        count += 1
        loads = len(LOAD16.findall(body))
        if loads == 0 or STORE16.search(body) or REDUCE16.search(body) or any(key in name for key in EXCEPTIONS):
            continue
        writes = len(ANY_WRITE.findall(body))
        if writes:
            broken.append((name, loads, writes))
    return count, broken


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[0])
        print("usage: ptx_vector_check.py FILE.ptx [FILE.ptx ...]")
        return 2
    failed = False
    # An argument may be a CMake list (paths joined by ';'), as ctest passes $<TARGET_OBJECTS:...>.
    paths = [p for arg in argv[1:] for p in arg.split(";") if p]
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            print(f"{path}: cannot read: {e}")
            return 2
        count, broken = check(text)
        if count == 0:
            print(f"{path}: no kernel entry (is it PTX?)")
            return 2
        status = "ok" if not broken else f"{len(broken)} entr{'y' if len(broken) == 1 else 'ies'} BROKEN"
        print(f"{path}: {count} entries, {status}")
        for name, loads, writes in broken:
            print(f"  {name}: {loads} 16-byte vector load(s) but none of its {writes} write(s) is 16 bytes")
        failed = failed or bool(broken)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
