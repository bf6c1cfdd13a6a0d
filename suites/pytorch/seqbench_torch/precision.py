"""TF32 off for fp32 matmuls, through the switch this torch has (takes the torch module; no import).

PyTorch 2.9 added per-backend fp32 precision settings (torch.backends.cuda.matmul.fp32_precision =
"ieee" | "tf32" | ..., "none" to inherit torch.backends.fp32_precision) and marked the legacy
torch.backends.cuda.matmul.allow_tf32 as going to be deprecated: setting it warns, and reading it
raises RuntimeError ("... you have used mix of the legacy and new APIs to set the TF32 status for
cublas matmul") once anything in the process has used the new API with a setting the legacy flag
cannot express. So: the new switch where it exists, the legacy one before (PyTorch 2.2 .. 2.8),
and a restore through the same switch that was changed.
"""

NEW_SWITCH = "fp32_precision"  # PyTorch >= 2.9
LEGACY_SWITCH = "allow_tf32"  # PyTorch < 2.9 (still accepted, deprecated, after)
IEEE = "ieee"


def matmul_switch(torch):
    """The name of the cuBLAS fp32 precision switch on torch.backends.cuda.matmul: fp32_precision
    where this torch has it, else allow_tf32. (torch.backends.cuda.matmul answers an unknown name
    with AttributeError, which is how an older torch says it has no new switch.)"""
    return NEW_SWITCH if hasattr(torch.backends.cuda.matmul, NEW_SWITCH) else LEGACY_SWITCH


def disable_tf32_matmul(torch):
    """fp32 matmuls (cuBLAS, and SDPA's math backend, which runs on them) in full fp32, no TF32.
    Returns (switch, previous value) for restore_tf32_matmul."""
    matmul = torch.backends.cuda.matmul
    switch = matmul_switch(torch)
    previous = getattr(matmul, switch)
    setattr(matmul, switch, IEEE if switch == NEW_SWITCH else False)
    return switch, previous


def restore_tf32_matmul(torch, saved):
    """Puts back what disable_tf32_matmul changed, through the same switch."""
    switch, previous = saved
    setattr(torch.backends.cuda.matmul, switch, previous)
