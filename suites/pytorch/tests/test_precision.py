"""precision.py: TF32 off through the switch this torch has (fp32_precision on PyTorch >= 2.9,
allow_tf32 before), restored through the same one. Stand-ins for torch.backends.cuda.matmul that
answer unknown names with AttributeError, as torch's cuBLASModule does."""
import types
import unittest

from tests import support  # noqa: F401  (puts the runner on sys.path)
from seqbench_torch import precision


class _Matmul:
    """torch.backends.cuda.matmul: only the names in `known` exist; others raise AttributeError;
    `forbidden` names raise RuntimeError when read or written (the mixed legacy/new API state)."""

    def __init__(self, known, forbidden=()):
        object.__setattr__(self, "_values", dict(known))
        object.__setattr__(self, "_forbidden", set(forbidden))
        object.__setattr__(self, "log", [])

    def __getattr__(self, name):
        if name in self._forbidden:
            raise RuntimeError(f"mixed legacy and new TF32 APIs: read {name}")
        if name not in self._values:
            raise AttributeError("Unknown attribute " + name)
        return self._values[name]

    def __setattr__(self, name, value):
        if name in self._forbidden:
            raise RuntimeError(f"mixed legacy and new TF32 APIs: set {name}")
        if name not in self._values:
            raise AttributeError("Unknown attribute " + name)
        self.log.append((name, value))
        self._values[name] = value


def fake_torch(matmul):
    return types.SimpleNamespace(backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul)))


class Tf32(unittest.TestCase):
    def test_legacy_torch_uses_allow_tf32(self):
        m = _Matmul({"allow_tf32": True, "allow_fp16_reduced_precision_reduction": True})
        torch = fake_torch(m)
        self.assertEqual(precision.matmul_switch(torch), "allow_tf32")
        saved = precision.disable_tf32_matmul(torch)
        self.assertEqual(saved, ("allow_tf32", True))
        self.assertIs(m.allow_tf32, False)
        precision.restore_tf32_matmul(torch, saved)
        self.assertIs(m.allow_tf32, True)
        self.assertEqual(m.log, [("allow_tf32", False), ("allow_tf32", True)])

    def test_new_torch_uses_fp32_precision_and_never_touches_allow_tf32(self):
        # A process that has used the new API: the legacy flag must be neither read nor written.
        m = _Matmul({"fp32_precision": "tf32"}, forbidden=("allow_tf32",))
        torch = fake_torch(m)
        self.assertEqual(precision.matmul_switch(torch), "fp32_precision")
        saved = precision.disable_tf32_matmul(torch)
        self.assertEqual(saved, ("fp32_precision", "tf32"))
        self.assertEqual(m.fp32_precision, "ieee")
        precision.restore_tf32_matmul(torch, saved)
        self.assertEqual(m.fp32_precision, "tf32")
        self.assertEqual(m.log, [("fp32_precision", "ieee"), ("fp32_precision", "tf32")])

    def test_inherited_setting_is_restored_as_it_was(self):
        m = _Matmul({"fp32_precision": "none", "allow_tf32": False})
        torch = fake_torch(m)
        saved = precision.disable_tf32_matmul(torch)
        self.assertEqual(m.fp32_precision, "ieee")
        precision.restore_tf32_matmul(torch, saved)
        self.assertEqual(m.fp32_precision, "none")
        self.assertEqual([name for name, _ in m.log], ["fp32_precision", "fp32_precision"])


if __name__ == "__main__":
    unittest.main()
