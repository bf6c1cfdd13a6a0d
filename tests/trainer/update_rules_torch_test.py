"""reference/optimizers (Adam, AdamW, SGD with momentum, dampening and Nesterov) and the loss
scaler's state machine (trainer/loss_scaler.h) against PyTorch itself, the oracle their docs name:
torch.optim's single-tensor path (foreach=False) in float64, and torch._amp_update_scale_ (what
GradScaler.update runs) in float32. Run by ctest as trainer_update_rules_vs_torch through
tests/common/torch_test.sh (skipped without torch):

    python3 update_rules_torch_test.py TOOL    (TOOL: the built update_rules_tool)

Tolerance. Both sides compute the same formula in double, in possibly different association
orders (torch divides sqrt(v) by sqrt(1 - β2^t), the reference takes sqrt(v / (1 - β2^t)), say):
each step's update then differs by a few units of double rounding, u = 2^-53, relative to the
update, and the trajectories by at most about STEPS · 16 · u relative to max |θ|. A different rule
(eps inside or outside the square root, L2 against decoupled decay, a missing bias correction,
Nesterov's lookahead, dampening on the first step) moves θ by at least lr · eps or lr · wd · |θ|
relative, orders of magnitude above that (the configurations below keep those terms large).
The scaler is exact: float32 on both sides, compared bit for bit, tracker included.
"""
import json
import random
import subprocess
import sys

import torch

STEPS = 6
U = 2.0 ** -53
TOLERANCE = STEPS * 16 * U  # relative to max |θ| (see the top)


def random_case(rng, kind):
    n = rng.choice([1, 2, 3, 7, 31, 64])
    case = {"kind": kind, "param": [rng.uniform(-2, 2) for _ in range(n)],
            "grads": [[rng.uniform(-1, 1) * rng.choice([1e-3, 1.0, 10.0]) for _ in range(n)] for _ in range(STEPS)],
            "lr": rng.choice([1e-3, 0.05, 0.3]), "weight_decay": rng.choice([0.0, 0.01, 0.3])}
    if kind in ("adam", "adamw"):
        case.update(beta1=rng.choice([0.0, 0.8, 0.9]), beta2=rng.choice([0.9, 0.99, 0.999]),
                    eps=rng.choice([1e-8, 1e-3, 0.1]))
    else:
        momentum = rng.choice([0.0, 0.5, 0.9])
        nesterov = momentum > 0 and rng.random() < 0.5
        case.update(momentum=momentum, nesterov=nesterov,
                    dampening=0.0 if nesterov or momentum == 0 else rng.choice([0.0, 0.1, 0.5]))
    return case


def torch_trajectory(case):
    p = torch.tensor(case["param"], dtype=torch.float64, requires_grad=True)
    kind = case["kind"]
    if kind == "sgd":
        opt = torch.optim.SGD([p], lr=case["lr"], momentum=case["momentum"], dampening=case["dampening"],
                              weight_decay=case["weight_decay"], nesterov=case["nesterov"], foreach=False)
    else:
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        opt = cls([p], lr=case["lr"], betas=(case["beta1"], case["beta2"]), eps=case["eps"],
                  weight_decay=case["weight_decay"], foreach=False)
    out = []
    for g in case["grads"]:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        out.append(p.detach().tolist())
    return out


def torch_scaler(case):
    scale = torch.full((), case["init_scale"], dtype=torch.float32)
    tracker = torch.full((), 0, dtype=torch.int32)
    found_inf = torch.full((), 0.0, dtype=torch.float32)
    scales, trackers = [], []
    for overflow in case["overflow"]:
        found_inf.fill_(1.0 if overflow else 0.0)
        torch._amp_update_scale_(scale, tracker, found_inf, case["growth_factor"], case["backoff_factor"],
                                 case["growth_interval"])
        scales.append(scale.item())
        trackers.append(int(tracker.item()))
    return scales, trackers


def scaler_cases(rng):
    cases = [
        # torch's defaults over a run with overflows between growths
        {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
         "overflow": [False, False, False, True, False, False, False, False, True, True] + [False] * 7},
        # growth that would overflow float32: torch keeps the scale and resets the tracker
        {"init_scale": 2.0 ** 127, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2,
         "overflow": [False] * 6 + [True] + [False] * 4},
        # the growth's rounding at the top of float's range: a product at the midpoint between
        # FLT_MAX and 2^128 rounds to inf (scale kept), just below it to FLT_MAX
        {"init_scale": 2.0 ** 127, "growth_factor": 2.0 - 2.0 ** -24, "backoff_factor": 0.5, "growth_interval": 1,
         "overflow": [False]},
        {"init_scale": 2.0 ** 127, "growth_factor": 2.0 - 2.0 ** -23, "backoff_factor": 0.5, "growth_interval": 1,
         "overflow": [False, False]},
        {"init_scale": 2.0 ** 128 - 2.0 ** 105, "growth_factor": 1.0 + 2.0 ** -24, "backoff_factor": 0.5,
         "growth_interval": 1, "overflow": [False, False]},
        # backoff down to subnormal scales
        {"init_scale": 2.0 ** -120, "growth_factor": 1.5, "backoff_factor": 0.25, "growth_interval": 1,
         "overflow": [True] * 20 + [False] * 3},
    ]
    for _ in range(20):
        cases.append({"init_scale": rng.choice([1.0, 1024.0, 65536.0, 3.0e38]),
                      "growth_factor": rng.choice([1.0001, 2.0, 3.0]), "backoff_factor": rng.choice([0.5, 0.9, 0.125]),
                      "growth_interval": rng.choice([1, 2, 5]),
                      "overflow": [rng.random() < 0.2 for _ in range(40)]})
    return cases


def main(tool):
    rng = random.Random(20261124)
    optimizers = [random_case(rng, kind) for kind in ("adam", "adamw", "sgd") for _ in range(40)]
    scalers = scaler_cases(rng)
    done = subprocess.run([tool], input=json.dumps({"optimizers": optimizers, "scalers": scalers}), text=True,
                          capture_output=True, check=False)
    if done.returncode != 0:
        print(f"FAIL: {tool} exited {done.returncode}: {done.stderr.strip()}")
        return 1
    ours = json.loads(done.stdout)
    failures = 0
    worst = {}
    for case, result in zip(optimizers, ours["optimizers"], strict=True):
        theirs = torch_trajectory(case)
        scale = max(1e-300, max(abs(x) for step in theirs for x in step))
        err = max(abs(a - b) for s_ours, s_theirs in zip(result["params"], theirs, strict=True)
                  for a, b in zip(s_ours, s_theirs, strict=True)) / scale
        worst[case["kind"]] = max(worst.get(case["kind"], 0.0), err)
        if not err <= TOLERANCE:
            failures += 1
            settings = {k: v for k, v in case.items() if k not in ("param", "grads")}
            print(f"FAIL: {case['kind']} {settings}: max |reference - torch| / max |θ| = {err:.3e} > {TOLERANCE:.3e}")
    for kind, err in worst.items():
        print(f"{kind}: 40 random cases of {STEPS} steps, worst max |reference - torch| / max |θ| = {err:.3e} "
              f"(bound {TOLERANCE:.3e})")
    for case, result in zip(scalers, ours["scalers"], strict=True):
        scales, trackers = torch_scaler(case)
        if result["scale"] != scales or result["growth_tracker"] != trackers:
            failures += 1
            settings = {k: v for k, v in case.items() if k != "overflow"}
            print(f"FAIL: loss scaler {settings}: ours {list(zip(result['scale'], result['growth_tracker']))} "
                  f"torch {list(zip(scales, trackers))}")
    print(f"loss scaler: {len(scalers)} trajectories against torch._amp_update_scale_, bit for bit")
    print(f"PyTorch {torch.__version__}: {'FAILED ' + str(failures) if failures else 'all passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: update_rules_torch_test.py UPDATE_RULES_TOOL", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
