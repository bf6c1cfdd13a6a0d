"""One report per suite and folder, made of parts. A lease's call is limited to 10 minutes, so the
PyTorch baselines of a suite are measured in several calls with --filter, each writing the same
DIR/pytorch-<suite>.json: each run merges into the report it finds there instead of replacing it.

What merges. The existing file must be a valid seqbench.report/1 document (`seqbench table`'s
validator decides) of the same suite, written by this runner (meta.runner "pytorch"), measured on
the same device, from the same seqbench git sha (never "unknown", which proves nothing) and the same
seqbench sources (meta.source_hash where both parts have one; where either has none, neither may be
git_dirty: one sha of an uncommitted tree is no one build) and with the same torch version: numbers of two
builds or two torches side by side in one table would compare what was never run together, so any
difference there is an error naming both values, before anything is measured. A file that cannot
be read as a report is moved aside (`<name>.unreadable-<UTC time>`, which `seqbench table DIR/*.json`
does not pick up) and the run starts a fresh report: nothing could be merged from it, and refusing
would cost the whole call; the move is logged.

How. This run's experiments replace the earlier part's of the same name variant by variant (a
run filtered to torch_compile keeps the earlier torch_eager), and the baseline and speedups are
recomputed; its checks replace the earlier checks of the same experiment; its unmapped entries
replace the earlier ones of the same experiment and variant, and an entry that says only that
something was not started or not run is dropped where the merged report has that variant measured.

Honest metadata. `meta` is the latest part's (its timestamp, host, copy bandwidth), with
`meta.parts` listing every part whose numbers the file still holds (id, timestamp, host, seed,
git_dirty, copy_gbps, filter, quick); every variant and check carries its part's `id` as `part`, so
a variant's pct_copy_bw is against its own part's copy_gbps. meta.git_dirty is true when any kept
part's was. (Members the schema does not name; readers ignore them.)
"""
import copy
import json
import os

from .errors import RunnerError, failure_reason
from .report import RUNNER, finalize_speedups

# Report order of the variants; the first present is the baseline (plan.variants[0] is torch_eager).
VARIANT_ORDER = ("torch_eager", "torch_compile", "torch_fused")
ABSENT = ("not started", "not run")
UNKNOWN_SHA = "unknown"  # cmake/WriteBuildInfo.cmake's git sha when neither git nor BUILD_STAMP answers  # unmapped reasons that record no more than an absence


def new_part(meta, filter_text, quick):
    """This run's entry of meta.parts."""
    device = meta.get("device") or {}
    return {"id": meta["timestamp"], "timestamp": meta["timestamp"], "host": meta["host"], "seed": meta["seed"],
            "git_dirty": bool(meta["git_dirty"]), "source_hash": meta.get("source_hash"),
            "copy_gbps": device.get("copy_gbps"),
            "filter": filter_text or None, "quick": bool(quick)}


def device_of(meta):
    return (meta.get("device") or {}).get("name")


def torch_of(meta):
    return (meta.get("frameworks") or {}).get("torch")


def check_compatible(path, doc, suite, meta):
    """RunnerError unless the report at `path` (`doc`) may take this run's part."""
    old = doc.get("meta") or {}
    if old.get("runner") != RUNNER:
        raise RunnerError(f"'{path}' is not a PyTorch report (meta.runner {old.get('runner')!r}); "
                          "move it away or choose another --out")
    for what, theirs, ours in (("suite", doc.get("suite"), suite),
                               ("device", device_of(old), device_of(meta)),
                               ("seqbench git sha", old.get("git_sha"), meta.get("git_sha")),
                               ("torch version", torch_of(old), torch_of(meta))):
        if theirs != ours:
            raise RunnerError(f"cannot merge into '{path}': it holds {what} {theirs!r}, this run {ours!r}; "
                              "the parts of one report must agree (move the old file away to start a new one)")
    # 'unknown' == 'unknown' says nothing: two builds without .git or BUILD_STAMP may be any commits.
    if meta.get("git_sha") == UNKNOWN_SHA:
        raise RunnerError(f"cannot merge into '{path}': seqbench git sha 'unknown' (a build without .git or "
                          "BUILD_STAMP: run tools/stamp.sh before the device call), so the parts cannot be "
                          "shown to be of one build (move the old file away to start a new one)")
    # One sha is not one build (the parts are often measured from an uncommitted tree): the source
    # hashes decide where both have one; where either has none, neither part may be dirty.
    theirs, ours = old.get("source_hash"), meta.get("source_hash")
    if theirs and ours:
        if theirs != ours:
            raise RunnerError(f"cannot merge into '{path}': it was built from other seqbench sources (source hash "
                              f"{theirs[:12]}, this run {ours[:12]}) of git sha {meta.get('git_sha')}; the parts "
                              "of one report must agree (move the old file away to start a new one)")
    elif old.get("git_dirty") or meta.get("git_dirty"):
        raise RunnerError(f"cannot merge into '{path}': a part is dirty (uncommitted source changes) and "
                          f"{'it' if not theirs else 'this run'} records no source hash, so the sources cannot be "
                          "compared (move the old file away to start a new one)")


def aside_path(path, stamp, kind="unreadable"):
    candidate, n = f"{path}.{kind}-{stamp}", 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{path}.{kind}-{stamp}.{n}"
    return candidate


def other_quick_setting(doc, quick):
    """The --quick setting ("quick" or "full") of a part of `doc` that differs from `quick`, or None.
    Parts that do not say (older reports) decide nothing."""
    for p in parts_of(doc):
        theirs = p.get("quick") if isinstance(p, dict) else None
        if isinstance(theirs, bool) and theirs != bool(quick):
            return "quick" if theirs else "full"
    return None


def load_existing(path, suite, meta, validate, log, quick=None):
    """The report already at `path` to merge into, or None: absent, or unreadable, or of the other
    --quick setting than `quick` (when given), and moved aside (`.unreadable-`, `.quick-`/`.full-`
    as seqbench run does). `validate(path)` is None for a valid report, else the problem (seqbench's
    validator's line). A quick part merged into a full report replaced full-shape variants of the
    names both lists share, and its speedups mixed the two policies."""
    if not os.path.lexists(path):
        return None
    problem = validate(path)
    doc = None
    if problem is None:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            problem = failure_reason(e)
    if problem is None and not (isinstance(doc, dict) and isinstance(doc.get("meta"), dict)):
        problem = "not a report object"
    if problem is not None:
        aside = aside_path(path, meta["timestamp"].replace("-", "").replace(":", ""))
        try:
            os.replace(path, aside)
        except OSError as e:
            raise RunnerError(f"'{path}' cannot be read as a report ({problem}) and cannot be moved aside: "
                              f"{e.strerror}") from None
        log(f"  {path} is not a readable report ({problem}); moved aside to {aside}")
        return None
    check_compatible(path, doc, suite, meta)
    setting = other_quick_setting(doc, quick) if quick is not None else None
    if setting is not None:
        aside = aside_path(path, meta["timestamp"].replace("-", "").replace(":", ""), setting)
        try:
            os.replace(path, aside)
        except OSError as e:
            raise RunnerError(f"'{path}' holds a {setting} run and cannot be moved aside: {e.strerror}") from None
        log(f"  {path} holds a {setting} run, this one is {'quick' if quick else 'full'}; moved aside to {aside}")
        return None
    return doc


def parts_of(doc):
    """meta.parts of a report; a report written before parts existed is one part, from its meta."""
    meta = doc["meta"]
    if isinstance(meta.get("parts"), list) and meta["parts"]:
        return meta["parts"]
    return [{"id": meta.get("timestamp"), "timestamp": meta.get("timestamp"), "host": meta.get("host"),
             "seed": meta.get("seed"), "git_dirty": bool(meta.get("git_dirty")),
             "source_hash": meta.get("source_hash"),
             "copy_gbps": (meta.get("device") or {}).get("copy_gbps"), "filter": None, "quick": None}]


def tagged(entries, pid, only_untagged=False):
    for x in entries:
        if not only_untagged or "part" not in x:
            x["part"] = pid
    return entries


def variant_key(v):
    name = v["name"]
    return VARIANT_ORDER.index(name) if name in VARIANT_ORDER else len(VARIANT_ORDER)


def merge_experiment(old, new):
    """`new`'s variants over `old`'s, same names replaced; baseline and speedups recomputed."""
    variants = {v["name"]: v for v in old["variants"]}
    variants.update({v["name"]: v for v in new["variants"]})
    entry = dict(new)
    entry["variants"] = sorted(variants.values(), key=variant_key)  # stable: other names keep their order
    names = [v["name"] for v in entry["variants"]]
    entry["baseline"] = VARIANT_ORDER[0] if VARIANT_ORDER[0] in names else names[0]
    finalize_speedups(entry)
    return entry


def merge_experiments(old, new):
    by_name = {e["name"]: e for e in new}
    out = [merge_experiment(e, by_name[e["name"]]) if e["name"] in by_name else e for e in old]
    seen = {e["name"] for e in old}
    return out + [e for e in new if e["name"] not in seen]


def merge_checks(old, new):
    experiments = {c["experiment"] for c in new if "experiment" in c}
    names = {c["name"] for c in new}
    return [c for c in old if c.get("experiment") not in experiments and c["name"] not in names] + list(new)


def key(u):
    return u.get("experiment"), u.get("variant")


def merge_unmapped(old, new, experiments, new_checks, new_experiments=()):
    """`experiments` are the merged ones; `new_checks` and `new_experiments` this part's. An old entry
    goes when this part says something of the same variant: an entry of its own, or a measurement
    (an old failure beside this part's number would no longer hold)."""
    measured = {(e["name"], v["name"]) for e in experiments for v in e["variants"]}
    measured_now = {(e["name"], v["name"]) for e in new_experiments for v in e["variants"]}
    new_keys = {key(u) for u in new}
    checked = {c["experiment"] for c in new_checks if "experiment" in c}
    kept = []
    for u in old:
        superseded = (key(u) in new_keys or key(u) in measured_now
                      or (key(u) in measured and u.get("reason", "").startswith(ABSENT))
                      or (u.get("variant") == "parity" and u.get("experiment") in checked))
        if not superseded:
            kept.append(u)
    fresh = [u for u in new if not (u.get("reason", "").startswith(ABSENT) and key(u) in measured)]
    return kept + fresh


def merged(old, new, part):
    """The document to write: this run's part `new` (its variants and checks tagged with the part's
    id) merged into `old`, the report found at the start (None: there was none)."""
    doc = copy.deepcopy(new)
    old = copy.deepcopy(old) if old is not None else None
    old_parts = parts_of(old) if old is not None else []
    part = dict(part)
    ids = {p["id"] for p in old_parts}
    base, n = part["id"], 1
    while part["id"] in ids:  # two parts in the same second
        n += 1
        part["id"] = f"{base}#{n}"
    for e in doc["experiments"]:
        tagged(e["variants"], part["id"])
    tagged(doc["checks"], part["id"])
    if old is None:
        doc["meta"]["parts"] = [part]
        return doc
    if len(old_parts) == 1:  # a report from before parts: its entries are that one part's
        for e in old["experiments"]:
            tagged(e["variants"], old_parts[0]["id"], only_untagged=True)
        tagged(old["checks"], old_parts[0]["id"], only_untagged=True)
    new_checks, new_experiments = doc["checks"], doc["experiments"]
    doc["experiments"] = merge_experiments(old["experiments"], new_experiments)
    doc["checks"] = merge_checks(old["checks"], new_checks)
    doc["unmapped"] = merge_unmapped(old.get("unmapped", []), doc["unmapped"], doc["experiments"], new_checks,
                                     new_experiments)
    used = {v.get("part") for e in doc["experiments"] for v in e["variants"]} | {c.get("part") for c in doc["checks"]}
    parts = [p for p in old_parts if p["id"] in used] + [part]
    doc["meta"]["parts"] = parts
    doc["meta"]["git_dirty"] = any(bool(p.get("git_dirty")) for p in parts)
    return doc
