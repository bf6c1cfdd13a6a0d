"""Reading the .npy files `seqbench dump` writes (format 1.0, '<f4', '<f2', '<u2' for bf16 bits, and
the integer arrays '|u1' (dropout keep masks) and '<i4' (token ids, targets); suites/npy.h) without numpy: the header is parsed here and the raw bytes go to torch.frombuffer."""
import ast
import math
import struct

from .errors import RunnerError

MAGIC = b"\x93NUMPY"
ITEM_SIZE = {"<f4": 4, "<f2": 2, "<u2": 2, "|u1": 1, "<i4": 4}


def parse(data, what="npy"):
    """(descr, shape, payload bytes) of a .npy file's contents; RunnerError on anything else."""
    if data[:6] != MAGIC or len(data) < 10:
        raise RunnerError(f"{what}: not a .npy file")
    if data[6:8] != b"\x01\x00":
        raise RunnerError(f"{what}: .npy version {data[6]}.{data[7]}, expected 1.0")
    (header_len,) = struct.unpack("<H", data[8:10])
    try:
        header = ast.literal_eval(data[10:10 + header_len].decode("latin1"))
        descr, fortran, shape = header["descr"], header["fortran_order"], tuple(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError) as e:
        raise RunnerError(f"{what}: bad .npy header ({e})") from None
    if descr not in ITEM_SIZE or fortran:
        raise RunnerError(f"{what}: unsupported .npy layout descr={descr!r} fortran_order={fortran}")
    payload = data[10 + header_len:]
    expected = ITEM_SIZE[descr] * math.prod(shape)
    if len(payload) != expected:
        raise RunnerError(f"{what}: {len(payload)} data bytes, shape {shape} needs {expected}")
    return descr, shape, payload


def read(path):
    with open(path, "rb") as f:
        return parse(f.read(), path)


def values(descr, payload, dtype=None):
    """The elements as Python floats (for small arrays and tests); bf16 bits when dtype is 'bf16'."""
    if descr == "<f4":
        return list(struct.unpack(f"<{len(payload) // 4}f", payload))
    if descr == "<f2":
        return list(struct.unpack(f"<{len(payload) // 2}e", payload))
    if descr == "|u1":
        return list(payload)
    if descr == "<i4":
        return list(struct.unpack(f"<{len(payload) // 4}i", payload))
    bits = struct.unpack(f"<{len(payload) // 2}H", payload)
    if dtype != "bf16":
        return [float(b) for b in bits]
    return [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]


def to_torch(torch, descr, shape, payload, dtype, device="cuda"):
    """A tensor of the array on `device` (the GPU's, unless check_dump.py runs the oracle on the CPU);
    '<u2' with dtype 'bf16' becomes bfloat16 (the same bits)."""
    torch_dtype = {"<f4": torch.float32, "<f2": torch.float16, "|u1": torch.uint8, "<i4": torch.int32}.get(descr)
    if descr == "<u2":
        torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.int16
    t = torch.frombuffer(bytearray(payload), dtype=torch_dtype) if payload else torch.empty(0, dtype=torch_dtype)
    return t.reshape(shape).to(device)
