"""tools/issue_budget.py on a SASS listing shaped like a row-tiled kernel's row loop: the walk takes
the vector path at every branch (the 16-byte load over the element loads, the aligned keep bits
over the general loop, the store over its skip), counts predicated instructions, and the table
gives the instructions per element, the MUFU operations per element and the issue/memory and
MUFU/memory ratios from them, the larger of the two marked as the cap. A branch with a predicate
operand ("@P2 BRA P1, 0x...") is conditional; the embedding kernels get rows of their own."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tool_test import ToolTest  # noqa: E402
import issue_budget  # noqa: E402

# The bf16 fused ReLU forward with dropout (row_tile_kernel<bf16, 1, true, true, false, false, ...>).
NAME = ("_ZN8seqbench7kernels14dropout_detail15row_tile_kernelI13__nv_bfloat16Li1ELb1ELb1ELb0ELb0ENS0_52_"
        "GLOBAL__N__39cefdff_19_bias_act_dropout_cu_7e38196612FusedForwardILNS0_10ActivationE0EEEEEvNS1_"
        "11RowTileArgsIT_EET5_")

# One row an iteration (8 bf16 elements), addresses 16 apart as cuobjdump prints them.
BODY = [
    "IMAD.WIDE.U32 R2, R4, 0x2, R6",         # 0x100 loop head
    "BSSY B0, 0x170",                         # 0x110 load: vector or element path
    "@P6 BRA 0x150",                          # 0x120
    "LDG.E.U16.CONSTANT R8, desc[UR4][R2.64]",  # 0x130 element path
    "BRA 0x160",                              # 0x140
    "LDG.E.128.CONSTANT R8, desc[UR4][R2.64]",  # 0x150 vector path
    "BSYNC B0",                               # 0x160
    "BSSY B0, 0x230",                         # 0x170 keep bits: aligned or general
    "@P6 BRA 0x200",                          # 0x180
    "IMAD.WIDE.U32 R20, R21, 0x2, RZ",        # 0x190 general: longer than the aligned one, and a loop
    "IMAD.WIDE.U32 R22, R23, 0x2, RZ",        # 0x1a0
    "IMAD.WIDE.U32 R24, R25, 0x2, RZ",        # 0x1b0
    "IADD3 R9, R9, 0x1, RZ",                  # 0x1c0
    "@!P1 BRA 0x1c0",                         # 0x1d0
    "BRA 0x220",                              # 0x1e0
    "NOP",                                    # 0x1f0
    "MUFU.EX2 R10, R11",                      # 0x200 aligned (a MUFU operation: its own ratio)
    "@P2 FSEL R12, RZ, R13, !P3",             # 0x210 predicated: counted
    "BSYNC B0",                               # 0x220
    "NOP",                                    # 0x230 not counted
    "@!P0 BRA 0x260",                         # 0x240 out == nullptr skips the store
    "STG.E.128 desc[UR4][R2.64], R8",         # 0x250
    "ISETP.GE.AND P0, PT, R4, R5, PT",        # 0x260
    "@!P0 BRA 0x100",                         # 0x270 the row loop's back edge
]
# The vector path: 0x100, 0x110, 0x120, 0x150, 0x160, 0x170, 0x180, 0x200, 0x210, 0x220, 0x240,
# 0x250, 0x260, 0x270: 14 instructions for 8 elements.
VECTOR_PATH = 14


def listing():
    lines = [f"\t\tFunction : {NAME}", '\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"',
             "        /*00f0*/                   MOV R1, c[0x0][0x28] ;"]
    for i, text in enumerate(BODY):
        lines.append(f"        /*{0x100 + 16 * i:04x}*/                   {text} ;  /* 0x000fe20000000f00 */")
    lines.append(f"        /*{0x100 + 16 * len(BODY):04x}*/                   EXIT ;")
    return "\n".join(lines) + "\n"


class IssueBudget(ToolTest):
    tool = "issue_budget.py"

    def row_cells(self, result, label):
        """The cells of the one table row whose text holds `label`."""
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = [line for line in result.stdout.splitlines() if label in line]
        self.assertEqual(len(rows), 1, result.stdout)
        return [cell.strip() for cell in rows[0].split("|")]

    def test_the_walk_takes_the_vector_path_at_every_branch(self):
        functions = issue_budget.parse_sass(listing())
        instructions = functions[NAME]
        loops = issue_budget.loops(instructions)
        self.assertIn((0x100, 0x270), loops)
        self.assertIn((0x1c0, 0x1d0), loops)
        path = issue_budget.vector_path(instructions, (0x100, 0x270))
        self.assertEqual(path.count, VECTOR_PATH)
        self.assertEqual((path.wide_loads, path.wide_stores, path.narrow, path.loop), (1, 1, 0, False))
        self.assertEqual(path.mufu, 1)
        self.assertNotIn(0x130, [address for address, _ in path.trace])  # the element load
        self.assertNotIn(0x190, [address for address, _ in path.trace])  # the general keep bits

    def test_the_table_gives_instructions_per_element_and_the_ratio(self):
        result = self.run_tool(self.write("bias_act_dropout.sass", listing()))
        cells = self.row_cells(result, "FusedForward/relu")
        self.assertEqual(cells[2:7], ["bf16", "yes", f"{VECTOR_PATH / 8:.1f}", f"{1 / 8:.2f}", "4"])
        # H200 by default: 1.75 instructions an element x 4.3e12 / 4 B / (4 x 32 x 132 x 1.98e9).
        ratio = VECTOR_PATH / 8 * 4.3e12 / 4 / (4 * 32 * 132 * 1.98e9)
        self.assertEqual(cells[8], f"{ratio:.2f}")
        # Its MUFU ratio: 1/8 an element x 4.3e12 / 4 B / (16 x 132 x 1.98e9).
        mufu_ratio = 1 / 8 * 4.3e12 / 4 / (16 * 132 * 1.98e9)
        self.assertEqual(cells[10], f"{mufu_ratio:.2f}")

    def test_the_larger_ratio_caps_the_kernel(self):
        # At 100 TB/s the issue ratio (1.75 an element against 128 a clock) passes 1 and caps the
        # kernel; the MUFU ratio (1/8 against 16) stays below it and is not marked.
        result = self.run_tool(self.write("bias_act_dropout.sass", listing()), "--h200-copy-tbs", "100")
        cells = self.row_cells(result, "FusedForward/relu")
        ratio = VECTOR_PATH / 8 * 100e12 / 4 / (4 * 32 * 132 * 1.98e9)
        self.assertEqual(cells[8], f"{ratio:.2f} (≤ {100 / ratio:.0f} % of copy)")
        self.assertNotIn("% of copy", cells[10])
        # With three MUFU operations on the path (the predicated select and the compare made MUFU
        # too) the MUFU ratio is the larger, and the cap moves to it.
        text = listing().replace("@P2 FSEL R12, RZ, R13, !P3", "@P2 MUFU.RCP R12, R13")
        text = text.replace("ISETP.GE.AND P0, PT, R4, R5, PT", "MUFU.EX2 R4, R5")
        result = self.run_tool(self.write("bias_act_dropout.sass", text), "--h200-copy-tbs", "100")
        cells = self.row_cells(result, "FusedForward/relu")
        mufu_ratio = 3 / 8 * 100e12 / 4 / (16 * 132 * 1.98e9)
        self.assertEqual(cells[5], f"{3 / 8:.2f}")
        self.assertEqual(cells[10], f"{mufu_ratio:.2f} (≤ {100 / mufu_ratio:.0f} % of copy)")
        self.assertEqual(cells[8], f"{ratio:.2f}")

    def test_sm90_reductions_and_vector_atomics_are_global_accesses_of_their_width(self):
        # sm_90 spells global reductions REDG and generic atomics ATOM.E; "RED\\b" missed REDG.
        for op, width in (("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU", 4), ("REDG.E.ADD.F32x4.FTZ.RN", 16),
                          ("ATOM.E.ADD.BF16x2.RN", 4), ("ATOMG.E.ADD.F32x2", 8), ("RED.E.ADD.F32", 4),
                          ("LDG.E.128", 16), ("STG.E.U16", 2)):
            self.assertTrue(issue_budget.ACCESS.match(op), op)
            self.assertEqual(issue_budget.access_width(op), width, op)
        for op in ("ATOMS.ADD", "LDS.128", "REDUX.SUM"):
            self.assertFalse(issue_budget.ACCESS.match(op), op)
        # In place of the store: a vector add stays on the vector path; a scalar one is a narrow
        # access, so the walk takes the branch around it (unseen, it was counted on the path).
        for op, count in (("REDG.E.ADD.F32x4.FTZ.RN", VECTOR_PATH), ("REDG.E.ADD.F32.FTZ.RN", VECTOR_PATH - 1)):
            text = listing().replace("STG.E.128 desc[UR4][R2.64], R8", f"{op} desc[UR4][R2.64], R8")
            path = issue_budget.vector_path(issue_budget.parse_sass(text)[NAME], (0x100, 0x270))
            self.assertEqual((path.count, path.narrow), (count, 0), op)

    def test_a_branch_with_a_predicate_operand_is_conditional(self):
        # ptxas writes some branches with a second condition as an operand: "@P6 BRA P1, 0x150" is
        # taken when P6 and P1 hold. Read as anything but a conditional branch, the walk would miss
        # the vector load behind it (or fall through into the element path and count both).
        text = listing().replace("@P6 BRA 0x150", "@P6 BRA P1, 0x150")
        instructions = issue_budget.parse_sass(text)[NAME]
        path = issue_budget.vector_path(instructions, (0x100, 0x270))
        self.assertEqual(path.count, VECTOR_PATH)
        self.assertEqual((path.wide_loads, path.narrow), (1, 0))
        self.assertNotIn(0x130, [address for address, _ in path.trace])
        # With no guard at all it is conditional all the same: "BRA !P0, 0x260" skips the store only
        # when P0 is clear, so the vector path still holds the store (taken as a jump, it would not).
        text = listing().replace("@!P0 BRA 0x260", "BRA !P0, 0x260")
        path = issue_budget.vector_path(issue_budget.parse_sass(text)[NAME], (0x100, 0x270))
        self.assertEqual((path.count, path.wide_loads, path.wide_stores), (VECTOR_PATH, 1, 1))

    def test_the_embedding_kernels_get_rows_of_their_own(self):
        # The same loop under the bf16 forward's name (learned positions, slot indexing): one store
        # of 8 elements an iteration, minimal bytes (1 + the distinct share) x 2.
        forward = ("_ZN8seqbench7kernels12_GLOBAL__N_120embedding_fwd_kernelI13__nv_bfloat16LNS1_"
                   "14PositionSourceE0ELb0EEEvNS1_7FwdArgsIT_EE")
        result = self.run_tool(self.write("embedding.sass", listing().replace(NAME, forward)),
                               "--embedding-distinct", "0.5")
        cells = self.row_cells(result, "embedding:Forward/learned")
        self.assertEqual(cells[2:7], ["bf16", "yes", f"{VECTOR_PATH / 8:.1f}", f"{1 / 8:.2f}", "3"])
        ratio = VECTOR_PATH / 8 * 4.3e12 / 3 / (4 * 32 * 132 * 1.98e9)
        self.assertEqual(cells[8], f"{ratio:.2f}")
        # Its nonpad_count twin is the same loop and gets no row.
        twin = forward.replace("ELb0EEEvNS1_7FwdArgs", "ELb1EEEvNS1_7FwdArgs")
        result = self.run_tool(self.write("embedding.sass", listing().replace(NAME, twin)))
        self.assertNotIn("embedding:", result.stdout)

    def test_a_missing_object_is_an_error_naming_it(self):
        result = self.run_tool(os.path.join(self.dir, "nothing.sass"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("nothing.sass", result.stderr)


if __name__ == "__main__":
    unittest.main()
