"""The report's meta block: seqbench's build and device (from `seqbench info --json`, so that both
runners describe the machine identically), plus who measured and with which frameworks."""
import datetime
import re
import socket

from .report import RUNNER


def utc_timestamp():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def device_slug(name):
    """As device_slug() in suites/meta.cpp: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    if name is None:
        return "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "gpu"


def collect_meta(info, seed, frameworks, copy_gbps):
    """`info` is `seqbench info --json`; its device gets this run's copy bandwidth (or null)."""
    device = info["device"]
    if device is not None:
        device = dict(device)
        device["copy_gbps"] = copy_gbps
    return {
        "seqbench_version": info["seqbench_version"],
        "git_sha": info["git_sha"],
        "git_dirty": bool(info["git_dirty"]),
        # tools/source_hash.sh of the tree the binary was built from (None from an older binary).
        "source_hash": info.get("source_hash"),
        "timestamp": utc_timestamp(),
        "host": socket.gethostname() or "unknown",
        "seed": int(seed),
        "build": {k: str(info["build"].get(k, "")) for k in ("type", "flags", "cuda_architectures")},
        "device": device,
        "runner": RUNNER,
        "frameworks": dict(frameworks),
    }
