#!/usr/bin/env python3
"""Rewrites CUDA sources into host C++ for the simt build (tests/simt/simt.h).

    rewrite.py ROOT OUT FILE...

Each FILE (relative to ROOT) is written to OUT/FILE, a `.cu` file as OUT/FILE.cpp, with:
  - `kernel<...><<<grid, block[, smem[, stream]]>>>(args)` ->
    `::simt::launch("kernel<...>", kernel<...>, grid, block[, smem[, stream]])(args)`;
  - `extern __shared__ T name[];` -> `T* name = reinterpret_cast<T*>(::simt::detail::g_launch->dynamic_shared);`;
  - `__CUDACC__` -> `SEQBENCH_SIMT_CUDACC` (defined by tests/simt/prelude.h);
  - `#pragma unroll` lines emptied (the host compiler does not know the pragma);
  - `asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(x));` -> `x = ::simt::globaltimer_ns();`
    (any other inline PTX is refused, except inside an `#if defined(__CUDA_ARCH__)` branch, which
    the host compiler never sees: kernels/vector_atomic.cuh's sm_90 vector reductions);
and line counts kept; a header gets a `#line 1 "ROOT/FILE"` first line, so that diagnostics name
the original. A file is only written when its text changes, so that an unchanged
source does not rebuild.
"""
import os
import re
import sys

EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:alignas\s*\(\s*\w+\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s+(\w+)\s*\[\s*\]\s*;")
PRAGMA_UNROLL = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b.*$", re.MULTILINE)
# A read of the global nanosecond timer (a spin of known length in tests/suites/gpu_timer_test.cu).
ASM_GLOBALTIMER = re.compile(
    r'asm\s+volatile\s*\(\s*"mov\.u64\s+%0,\s*%%globaltimer;"\s*:\s*"=l"\s*\(\s*(\w+)\s*\)\s*\)\s*;')


class RewriteError(Exception):
    pass


DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
# A condition that is false in the host compilation whatever else it says: defined(__CUDA_ARCH__)
# as the first term of a conjunction, with no || anywhere (and no comparison of the macro: an
# undefined __CUDA_ARCH__ is 0 to the host's preprocessor, so `__CUDA_ARCH__ < 900` holds there).
DEVICE_CONDITION = re.compile(r"^\s*(?:defined\s*\(\s*__CUDA_ARCH__\s*\)|defined\s+__CUDA_ARCH__)\s*(?:$|&&)")


def is_device_condition(condition):
    condition = condition.split("//")[0].split("/*")[0]
    return "||" not in condition and bool(DEVICE_CONDITION.match(condition))


def device_only_lines(text):
    """Line numbers (0-based) inside a preprocessor branch that only device compilation enters:
    `#if defined(__CUDA_ARCH__) ...` or `#ifdef __CUDA_ARCH__`, up to its #elif, #else or #endif."""
    lines = text.split("\n")
    stack = []  # per open conditional: is the current branch device-only?
    inside = set()
    for number, line in enumerate(lines):
        m = DIRECTIVE.match(line)
        if m:
            kind, rest = m.group(1), m.group(2)
            if kind in ("if", "elif"):
                device = is_device_condition(rest)
            elif kind == "ifdef":
                device = rest.split("//")[0].strip() == "__CUDA_ARCH__"
            else:
                device = False
            if kind in ("if", "ifdef", "ifndef"):
                stack.append(device)
            elif kind in ("elif", "else"):
                if not stack:
                    raise RewriteError(f"#{kind} without #if at line {number + 1}")
                stack[-1] = device
            else:
                if not stack:
                    raise RewriteError(f"#endif without #if at line {number + 1}")
                stack.pop()
            continue
        if any(stack):
            inside.add(number)
    return inside


def kernel_expression_start(text, end):
    """Start of the kernel expression that ends just before `end` (where `<<<` begins)."""
    i = end - 1
    while i >= 0 and text[i].isspace():
        i -= 1
    if i >= 0 and text[i] == ">":  # template arguments: match the angle brackets backwards
        angle, paren = 0, 0
        while i >= 0:
            c = text[i]
            if c == ")":
                paren += 1
            elif c == "(":
                paren -= 1
            elif paren == 0 and c == ">":
                angle += 1
            elif paren == 0 and c == "<":
                angle -= 1
                if angle == 0:
                    break
            i -= 1
        if i < 0:
            raise RewriteError("unbalanced template arguments before <<<")
        i -= 1
        while i >= 0 and text[i].isspace():
            i -= 1
    j = i
    while j >= 0 and (text[j].isalnum() or text[j] in "_:"):
        j -= 1
    if j == i:
        raise RewriteError("no kernel name before <<<")
    return j + 1


def rewrite_launches(text, path):
    out = []
    pos = 0
    while True:
        open_at = text.find("<<<", pos)
        if open_at < 0:
            out.append(text[pos:])
            return "".join(out)
        line_start = text.rfind("\n", 0, open_at) + 1
        if "//" in text[line_start:open_at]:  # in a comment: leave the line as it is
            line_end = text.find("\n", open_at)
            line_end = len(text) if line_end < 0 else line_end
            out.append(text[pos:line_end])
            pos = line_end
            continue
        close_at = text.find(">>>", open_at)
        if close_at < 0:
            raise RewriteError(f"{path}: <<< without >>>")
        paren = close_at + 3
        while paren < len(text) and text[paren].isspace():
            paren += 1
        if paren >= len(text) or text[paren] != "(":
            raise RewriteError(f"{path}: >>> not followed by the argument list")
        start = kernel_expression_start(text, open_at)
        if start < pos:
            raise RewriteError(f"{path}: overlapping launches")
        kernel = text[start:open_at].strip()
        config = text[open_at + 3:close_at].strip()
        span = text[start:paren + 1]
        name = " ".join(kernel.split()).replace("\\", "\\\\").replace('"', '\\"')
        flat_kernel = " ".join(kernel.split())
        flat_config = " ".join(config.split())
        out.append(text[pos:start])
        out.append(f'::simt::launch("{name}", {flat_kernel}, {flat_config})(' + "\n" * span.count("\n"))
        pos = paren + 1


def rewrite(text, path):
    text = rewrite_launches(text, path)
    text = EXTERN_SHARED.sub(
        lambda m: f"{m.group(1)}* {m.group(2)} = reinterpret_cast<{m.group(1)}*>"
        "(::simt::detail::g_launch->dynamic_shared);", text)
    if "extern __shared__" in text:
        raise RewriteError(f"{path}: an extern __shared__ declaration this script does not understand")
    text = text.replace("__CUDACC__", "SEQBENCH_SIMT_CUDACC")
    text = PRAGMA_UNROLL.sub("", text)
    text = ASM_GLOBALTIMER.sub(lambda m: f"{m.group(1)} = ::simt::globaltimer_ns();", text)
    device_only = device_only_lines(text)
    for m in re.finditer(r"\basm\s+volatile\b", text):
        line = text.count("\n", 0, m.start())
        if line not in device_only:
            raise RewriteError(f"{path}:{line + 1}: inline PTX this script does not understand, outside a "
                               "#if defined(__CUDA_ARCH__) branch")
    return text


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, out_dir, files = argv[1], argv[2], argv[3:]
    try:
        for rel in files:
            src = os.path.join(root, rel)
            with open(src, encoding="utf-8") as f:
                text = f.read()
            # Headers name their original in diagnostics; a .cu keeps its copy's name (the same
            # lines), since GCC takes a main file renamed by #line for a header (-Wsubobject-linkage).
            result = rewrite(text, rel)
            if not rel.endswith(".cu"):
                result = f'#line 1 "{os.path.abspath(src)}"\n' + result
            dst = os.path.join(out_dir, rel + (".cpp" if rel.endswith(".cu") else ""))
            try:
                with open(dst, encoding="utf-8") as f:
                    if f.read() == result:
                        continue
            except OSError:
                pass
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            tmp = dst + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(result)
            os.replace(tmp, dst)
    except RewriteError as e:
        print(f"rewrite.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
