"""Finding torch and a CUDA device, and the versions the report records. Imports torch only when asked."""
import importlib
import platform

from .errors import RunnerError, failure_reason


def require_torch_cuda():
    """torch, imported; RunnerError with a one-line reason when torch or a CUDA device is missing.
    Not only ImportError: a torch whose CUDA libraries are broken or mismatched raises OSError (a
    missing libcudart, an undefined symbol) or RuntimeError from its import, which would otherwise
    end the run with a traceback instead of the documented line."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise RunnerError(
            f"PyTorch is not importable ({' '.join(str(e).split())}); install PyTorch 2.x with CUDA to measure "
            "the baselines"
        ) from None
    except Exception as e:
        raise RunnerError(f"PyTorch is not importable ({failure_reason(e)}); check its CUDA libraries") from None
    major = str(getattr(torch, "__version__", "0")).split(".")[0]
    if not major.isdigit() or int(major) < 2:
        raise RunnerError(f"PyTorch {getattr(torch, '__version__', '?')} is too old: torch.compile needs 2.x")
    try:
        available = torch.cuda.is_available()
    except Exception as e:
        raise RunnerError(f"PyTorch {torch.__version__} cannot query CUDA ({failure_reason(e)})") from None
    if not available:
        raise RunnerError(
            f"PyTorch {torch.__version__} sees no CUDA device (torch.version.cuda = {torch.version.cuda}); "
            "the baselines need a GPU"
        )
    return torch


def _version(module_name):
    try:
        return str(importlib.import_module(module_name).__version__)
    except Exception:  # absent or broken: the report says null
        return None


def frameworks(torch):
    """meta.frameworks: every version a reader needs to reproduce the numbers; null where unknown."""
    cudnn = None
    try:
        if torch.backends.cudnn.is_available():
            cudnn = str(torch.backends.cudnn.version())
    except Exception:
        pass
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "torch_cuda": torch.version.cuda,
        "triton": _version("triton"),
        "cudnn": cudnn,
        "numpy": _version("numpy"),
    }
