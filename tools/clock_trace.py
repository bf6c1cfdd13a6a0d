#!/usr/bin/env python3
"""One line that says what the GPU's clocks did while the suites timed.

tools/gpu.sh samples nvidia-smi every 500 ms while it runs the suites and the PyTorch baselines
(clocks.csv in logs.tar). A report's meta.clocks is one reading, taken when the report starts, so it
cannot show a power cap or a thermal slowdown that came and went mid-run; this trace can, and the
summary line puts it next to the results it may explain.

Input: the lines of

  nvidia-smi --query-gpu=index,timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,<reasons>
             --format=csv,noheader,nounits -lms 500

where <reasons> is clocks_event_reasons.active (or, on older drivers, clocks_throttle_reasons.active),
a bit mask such as 0x0000000000000004. Fields nvidia-smi cannot read ("[N/A]", "[Not Supported]")
and lines that are not samples (an error message) are left out of the figures and counted.

  tools/clock_trace.py clocks.csv        prints the line; exit 0, or 2 when the file cannot be read
  tools/clock_trace.py --fields          prints the query's fields before <reasons> (gpu.sh asks,
                                         so that the query and this parser cannot drift apart)
"""
import csv
import statistics
import sys

# What gpu.sh asks nvidia-smi for, in this order; the clock-event reasons field follows them.
FIELDS = ["index", "timestamp", "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu"]

# NVML's clocks event reasons (nvml.h, nvmlClocksEventReason*): the bits nvidia-smi prints.
REASONS = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
]
# The reasons that mean the clocks were held below what the load asked for: timings taken while one
# was active are slower than the card's sustained rate.
SLOWDOWNS = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def reason_names(mask):
    names = [name for bit, name in REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in REASONS)
    if rest:
        names.append(f"other_0x{rest:x}")
    return names


def parse(lines):
    """Samples as dicts (gpu, sm, mem, power, temp, reasons: names or None); the count of lines skipped."""
    samples, skipped = [], 0
    for row in csv.reader(lines):
        row = [field.strip() for field in row]
        if len(row) != len(FIELDS) + 1 or number(row[0]) is None:
            skipped += int(any(row))
            continue
        value = dict(zip(FIELDS + ["reasons"], row))
        try:
            reasons = reason_names(int(value["reasons"], 16))
        except ValueError:
            reasons = None
        samples.append({"gpu": value["index"], "sm": number(value["clocks.sm"]), "mem": number(value["clocks.mem"]),
                        "power": number(value["power.draw"]), "temp": number(value["temperature.gpu"]),
                        "reasons": reasons})
    return samples, skipped


def span(values, unit):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    low, mid, high = min(values), statistics.median(values), max(values)
    if low == high:
        return f"{low:.0f} {unit}"
    return f"p50 {mid:.0f} {unit} (min {low:.0f}, max {high:.0f})"


def summary(samples, skipped):
    if not samples:
        return f"NO SAMPLES ({skipped} line(s) unreadable)"
    parts = []
    gpus = sorted({s["gpu"] for s in samples})
    for gpu in gpus:
        mine = [s for s in samples if s["gpu"] == gpu]
        counts = {}
        for s in mine:
            for name in s["reasons"] or []:
                counts[name] = counts.get(name, 0) + 1
        slowed = sorted(name for name in counts if name in SLOWDOWNS)
        powers = [s["power"] for s in mine if s["power"] is not None]
        temps = [s["temp"] for s in mine if s["temp"] is not None]
        text = "gpu " + gpu + ": " if len(gpus) > 1 else ""
        text += f"{len(mine)} samples; SM {span([s['sm'] for s in mine], 'MHz')}; "
        text += f"memory {span([s['mem'] for s in mine], 'MHz')}; "
        text += f"power max {max(powers):.0f} W; " if powers else "power n/a; "
        text += f"temperature max {max(temps):.0f} C; " if temps else "temperature n/a; "
        if counts:
            text += "reasons: " + ", ".join(f"{name} in {n}" for name, n in sorted(counts.items()))
        else:
            text += "reasons: none"
        if slowed:
            text = "SLOWED (" + ", ".join(slowed) + ") " + text
        parts.append(text)
    if skipped:
        parts.append(f"{skipped} line(s) unreadable")
    return "; ".join(parts)


def main(argv):
    if len(argv) != 2:
        print("usage: clock_trace.py CLOCKS_CSV | --fields", file=sys.stderr)
        return 2
    if argv[1] == "--fields":
        print(",".join(FIELDS))
        return 0
    try:
        with open(argv[1], encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"clock_trace.py: cannot read {argv[1]}: {e.strerror}", file=sys.stderr)
        return 2
    print(summary(*parse(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
