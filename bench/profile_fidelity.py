#!/usr/bin/env python3
"""Times the variants that autotune-bench-profile exported a second time, with
CuPy, and compares the medians with the profile worker's.

    python3 bench/profile_fidelity.py OUT/fidelity.json [--results FILE]
    python3 bench/profile_fidelity.py --dry-run OUT/fidelity.json

The measurement copies the worker's method (service/worker/profiler.h) with a
different code path: the cubin is loaded with cupy.RawModule; the input sets
are as many as the worker rotated over (pool_sets), each one allocation that
holds every buffer at 256-byte aligned offsets, filled with random data of
the buffer's dtype as its fill asks; the launches of one sample
(launches_per_sample) cycle through the sets and are captured in one CUDA
graph on a non-blocking stream; after warm-up replays (at least 3, and
--warmup-ms of GPU time, default 200: the script idles between variants and
an idle GPU lowers its clocks), replays are timed
one by one with CUDA event pairs, in batches, until both the worker's
min_samples and its timing budget are reached (at most 2000); the per-launch
time is a replay's time / launches per replay, and the median is compared.

--fresh times each variant in a CuPy process of its own. It is what
bench/run_profile_bench.sh compares: timed one after another in one CuPy
process, every variant after the first was seen to take about 0.35 us more
per launch (on an H200, whatever the kernel; freeing the graph, the module
and the memory between variants did not change it), while the first, and
every variant in a process of its own, agreed with the worker.

The goal: every variant's CuPy median within 3 % of the worker's. The exit
status is 0 whether or not it is met (this is a measurement); 1 when the
export cannot be read or nothing could be measured (CuPy missing, no GPU);
2 on bad arguments.

--dry-run reads and checks the export (every field the measurement needs, the
cubin files), prints the plan of each variant and the worker's figures, and
needs neither CuPy nor NumPy.
"""

import argparse
import gc
import json
import math
import os
import struct
import subprocess
import sys
import time

GOAL = 0.03  # |CuPy / worker - 1| allowed per variant
ALIGNMENT = 256  # the worker's buffer alignment inside an input set
WARMUP_REPLAYS = 3
WARMUP_US = 200000.0
MAX_WARMUP_REPLAYS = 20000
MAX_SAMPLES = 2000
MAX_REPLAYS_PER_BATCH = 32
BATCH_TARGET_US = 20000.0
DEFAULT_SHARED_LIMIT = 48 * 1024  # above this a kernel must opt in

# Short dtype name (cache::DTypeName) -> (NumPy storage type, bytes).
# bf16 and fp8 are stored as their bit patterns.
DTYPES = {
    "fp32": ("float32", 4),
    "fp16": ("float16", 2),
    "bf16": ("uint16", 2),
    "fp64": ("float64", 8),
    "int8": ("int8", 1),
    "int32": ("int32", 4),
    "int64": ("int64", 8),
    "uint8": ("uint8", 1),
    "fp8e4m3": ("uint8", 1),
    "fp8e5m2": ("uint8", 1),
}
INTEGER_DTYPES = {"int8", "int32", "int64", "uint8"}
ROLES = {"IN", "OUT", "INOUT"}


class ExportError(ValueError):
    """The export lacks something the measurement needs."""


# ---- Pure parts: no CuPy, no NumPy -------------------------------------------


def align_up(value, alignment=ALIGNMENT):
    return (value + alignment - 1) // alignment * alignment


def bf16_bits(value):
    """The bfloat16 bit pattern of `value`, rounded to nearest even."""
    bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if math.isnan(value):
        return 0x7FC0
    rounding = 0x7FFF + ((bits >> 16) & 1)
    return ((bits + rounding) >> 16) & 0xFFFF


def scalar_argument(scalar):
    """(NumPy type name, value) of one scalar argument, as the worker encodes it."""
    dtype = scalar.get("dtype")
    value = scalar.get("value")
    if not isinstance(value, (int, float)):
        raise ExportError("scalar %r has no numeric value" % scalar.get("name"))
    if dtype == "fp32":
        return ("float32", float(value))
    if dtype == "fp64":
        return ("float64", float(value))
    if dtype == "fp16":
        return ("float16", float(value))
    if dtype == "bf16":
        return ("uint16", bf16_bits(value))
    if dtype in INTEGER_DTYPES:
        if value != math.floor(value):
            raise ExportError("scalar %r: %r is not a whole number" % (scalar.get("name"), value))
        return (DTYPES[dtype][0], int(value))
    raise ExportError("scalar %r: dtype %r is not supported here" % (scalar.get("name"), dtype))


def buffer_layout(buffers):
    """Offsets of the buffers inside one input set, and the set's bytes."""
    offset = 0
    layout = []
    for buffer in buffers:
        name = buffer.get("name", "?")
        dtype = buffer.get("dtype")
        if dtype not in DTYPES:
            raise ExportError("buffer %r: unknown dtype %r" % (name, dtype))
        elements = buffer.get("elements")
        if not isinstance(elements, (int, float)) or elements <= 0 or elements != int(elements):
            raise ExportError("buffer %r: bad element count %r" % (name, elements))
        if buffer.get("role") not in ROLES:
            raise ExportError("buffer %r: bad role %r" % (name, buffer.get("role")))
        nbytes = int(elements) * DTYPES[dtype][1]
        layout.append({"name": name, "dtype": dtype, "elements": int(elements),
                       "role": buffer["role"], "fill": buffer.get("fill") or {},
                       "offset": offset, "bytes": nbytes})
        offset += align_up(nbytes)
    return layout, offset


def launch_dims(values, what):
    if not isinstance(values, list) or not 1 <= len(values) <= 3:
        raise ExportError("%s: expected 1 to 3 values, got %r" % (what, values))
    dims = [int(v) for v in values] + [1] * (3 - len(values))
    if any(v < 1 for v in dims):
        raise ExportError("%s: %r has a value below 1" % (what, values))
    return tuple(dims)


def plan_variant(entry, base_dir):
    """Everything the measurement of one exported variant needs, checked."""
    for key in ("cubin", "lowered_name", "grid", "block", "buffers", "scalars"):
        if key not in entry:
            raise ExportError("missing %r" % key)
    layout, set_bytes = buffer_layout(entry["buffers"])
    if not layout:
        raise ExportError("no buffers")
    measured = entry.get("worker") is not None
    sets = int(entry.get("pool_sets") or 0)
    launches = int(entry.get("launches_per_sample") or 0)
    if measured and (sets < 1 or launches < 1):
        raise ExportError("measured, but pool_sets %r and launches_per_sample %r" % (sets, launches))
    if measured and launches % sets != 0:
        raise ExportError("launches_per_sample %d is not a whole number of cycles over %d sets"
                          % (launches, sets))
    cubin = os.path.join(base_dir, entry["cubin"])
    return {
        "cubin": cubin,
        "lowered_name": entry["lowered_name"],
        "grid": launch_dims(entry["grid"], "grid"),
        "block": launch_dims(entry["block"], "block"),
        "shared": int(entry.get("dynamic_shared_bytes") or 0),
        "layout": layout,
        "set_bytes": set_bytes,
        "scalars": [scalar_argument(s) for s in entry["scalars"]],
        "sets": max(1, sets),
        "launches": max(1, launches),
        "measured": measured,
        "cache_state": entry.get("cache_state", "COLD"),
    }


def check_cubin(path):
    """None when `path` looks like a cubin, else why not."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        return "cannot read %s: %s" % (path, e)
    if head != b"\x7fELF":
        return "%s is not an ELF image" % path
    return None


def worker_median(entry):
    worker = entry.get("worker") or {}
    value = worker.get("median_us")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def median(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return float("nan")
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def replays_per_batch(replay_us):
    return max(1, min(MAX_REPLAYS_PER_BATCH, int(BATCH_TARGET_US / max(replay_us, 1e-3))))


def summarize(rows, goal=GOAL):
    """Overall figures over the rows that have both medians."""
    deviations = [abs(r["ratio"] - 1) for r in rows if r.get("ratio") is not None]
    within = sum(1 for d in deviations if d <= goal)
    return {
        "variants": len(rows),
        "compared": len(deviations),
        "failed": sum(1 for r in rows if r.get("error")),
        "median_abs_deviation": median(deviations) if deviations else None,
        "max_abs_deviation": max(deviations) if deviations else None,
        "within_goal": within,
        "goal": goal,
        "goal_met": bool(deviations) and within == len(rows),
    }


def short(text, width):
    text = str(text)
    return text if len(text) <= width else text[: width - 3] + "..."


def number(value, digits=2):
    return "-" if value is None else "%.*f" % (digits, value)


def print_table(rows):
    print("| %3s | %-36s | %-26s | %4s | %4s | %5s | %10s | %10s | %6s | %s"
          % ("#", "problem", "config", "sets", "lnch", "state", "worker us", "cupy us", "ratio",
             "note"))
    print("| --: | %s | %s | ---: | ---: | ----- | ---------: | ---------: | -----: | ----"
          % ("-" * 36, "-" * 26))
    for i, r in enumerate(rows):
        ratio = "-" if r.get("ratio") is None else "%.3f" % r["ratio"]
        note = r.get("error") or r.get("note") or ""
        print("| %3d | %-36s | %-26s | %4s | %4s | %5s | %10s | %10s | %6s | %s"
              % (i, short(r["problem"], 36), short(r["label"], 26), r.get("sets", "-"),
                 r.get("launches", "-"), r.get("cache_state", "-")[:5],
                 number(r.get("worker_us")), number(r.get("cupy_us")), ratio, short(note, 60)))


def group_rows(rows):
    """Per (problem, cache state), in order of appearance: count, compared,
    median ratio, largest |ratio - 1|."""
    groups = {}
    for r in rows:
        key = (r["problem"], r.get("cache_state") or "COLD")
        groups.setdefault(key, []).append(r)
    out = []
    for (problem, state), members in groups.items():
        ratios = [m["ratio"] for m in members if m.get("ratio") is not None]
        out.append({
            "problem": problem,
            "cache_state": state,
            "variants": len(members),
            "compared": len(ratios),
            "median_ratio": median(ratios) if ratios else None,
            "max_abs_deviation": max(abs(x - 1) for x in ratios) if ratios else None,
        })
    return out


def print_summary(rows, summary, dry_run, device):
    print()
    if dry_run:
        print("Fidelity summary")
        print("dry run: %d variants read and checked, nothing measured" % summary["variants"])
        return

    def pct(value):
        return "-" if value is None else "%.2f%%" % (value * 100)

    print("Fidelity summary: CuPy on %s against the worker; ratio = CuPy / worker median"
          % (device or "an unknown device"))
    print("| %-42s | %-5s | %5s | %9s | %9s |" % ("problem", "state", "n", "ratio md", "max |r-1|"))
    print("| %s | ----- | ----: | --------: | --------: |" % ("-" * 42))
    for g in group_rows(rows):
        print("| %-42s | %-5s | %5s | %9s | %9s |"
              % (short(g["problem"], 42), g["cache_state"][:5],
                 "%d/%d" % (g["compared"], g["variants"]), number(g["median_ratio"], 3),
                 pct(g["max_abs_deviation"])))
    print("overall: %d variants (%d compared, %d failed): median |ratio-1| %s, max %s, "
          "within %.0f%%: %d of %d"
          % (summary["variants"], summary["compared"], summary["failed"],
             pct(summary["median_abs_deviation"]), pct(summary["max_abs_deviation"]),
             summary["goal"] * 100, summary["within_goal"], summary["variants"]))
    print("goal (every variant within %.0f%% of the worker's median): %s"
          % (summary["goal"] * 100, "MET" if summary["goal_met"] else "NOT MET"))


# ---- The measurement (CuPy) ----------------------------------------------------


def fill_buffer(cp, view, dtype, fill):
    """Random data of `dtype` into `view` (an array of the storage type)."""
    n = view.size
    kind = fill.get("kind", "KIND_UNSPECIFIED")
    low = float(fill.get("low", 0.0))
    high = float(fill.get("high", 0.0))
    if kind == "KIND_UNSPECIFIED" and low == 0 and high == 0:
        low, high = -1.0, 1.0
    if dtype in INTEGER_DTYPES:
        if kind in ("ZERO", "ONE"):
            view.fill(0 if kind == "ZERO" else 1)
            return
        lo, hi = (int(math.floor(low)), int(math.floor(high))) if high > low else (0, 100)
        if dtype == "uint8":
            lo, hi = max(lo, 0), min(max(hi, lo + 1), 256)
        view[...] = cp.random.randint(lo, max(hi, lo + 1), size=n).astype(view.dtype)
        return
    if dtype in ("fp8e4m3", "fp8e5m2"):
        # Finite bit patterns of either sign (no NaN or infinity).
        magnitude = cp.random.randint(0, 0x78, size=n).astype(cp.uint8)
        sign = (cp.random.randint(0, 2, size=n).astype(cp.uint8) << 7).astype(cp.uint8)
        view[...] = magnitude | sign
        return
    if kind == "ZERO":
        values = cp.zeros(n, dtype=cp.float32)
    elif kind == "ONE":
        values = cp.ones(n, dtype=cp.float32)
    elif kind == "NORMAL":
        values = cp.random.standard_normal(n, dtype=cp.float32) * high + low
    else:
        values = cp.random.random(n, dtype=cp.float32) * (high - low) + low
    values = values.astype(cp.float32)
    if dtype == "bf16":
        view[...] = (values.view(cp.uint32) >> 16).astype(cp.uint16)
    else:
        view[...] = values.astype(view.dtype)


def measure_variant(cp, np, plan, budget_s, min_samples, warmup_us=WARMUP_US, align=0):
    """Median per-launch time in microseconds and how it was taken."""
    module = cp.RawModule(path=plan["cubin"])
    kernel = module.get_function(plan["lowered_name"])
    if plan["shared"] > DEFAULT_SHARED_LIMIT:
        kernel.max_dynamic_shared_size_bytes = plan["shared"]
    stream = cp.cuda.Stream(non_blocking=True)
    scalars = [getattr(np, type_name)(value) for type_name, value in plan["scalars"]]
    sets = plan["sets"]
    launches = plan["launches"]
    grid, block, shared = plan["grid"], plan["block"], plan["shared"]
    with stream:
        storage = []
        args = []
        for _ in range(sets):
            raw = cp.zeros(plan["set_bytes"] + align, dtype=cp.uint8)
            if align:
                # Each set starts on its own `align` boundary, as a
                # separate cuMemAlloc of its own would.
                skip = (-raw.data.ptr) % align
                raw = raw[skip:skip + plan["set_bytes"]]
            views = []
            for slot in plan["layout"]:
                view = raw[slot["offset"]:slot["offset"] + slot["bytes"]].view(
                    DTYPES[slot["dtype"]][0])
                if slot["role"] in ("IN", "INOUT"):
                    fill_buffer(cp, view, slot["dtype"], slot["fill"])
                views.append(view)
            storage.append(raw)
            args.append(tuple(views) + tuple(scalars))
        # One launch outside the graph: loads the function (lazy loading) and
        # shows a launch error here rather than inside the capture.
        kernel(grid, block, args[0], shared_mem=shared)
        stream.synchronize()
        stream.begin_capture()
        try:
            for i in range(launches):
                kernel(grid, block, args[i % sets], shared_mem=shared)
        finally:
            graph = stream.end_capture()
    begin = cp.cuda.Event()
    end = cp.cuda.Event()
    begin.record(stream)
    for _ in range(WARMUP_REPLAYS):
        graph.launch(stream)
    end.record(stream)
    end.synchronize()
    replay_us = cp.cuda.get_elapsed_time(begin, end) * 1000.0 / WARMUP_REPLAYS
    # Then warm-up replays worth WARMUP_US of GPU time: the script idles
    # between variants (allocation, fills), and an idle GPU drops its clocks.
    extra = int(min(MAX_WARMUP_REPLAYS, warmup_us / max(replay_us, 1e-3)))
    for _ in range(extra):
        graph.launch(stream)
    stream.synchronize()
    per_batch = replays_per_batch(replay_us)
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(per_batch)]
    per_launch_us = []
    timed_s = 0.0
    while len(per_launch_us) < MAX_SAMPLES and (len(per_launch_us) < min_samples
                                                 or timed_s < budget_s):
        batch = min(per_batch, MAX_SAMPLES - len(per_launch_us))
        for j in range(batch):
            events[j][0].record(stream)
            graph.launch(stream)
            events[j][1].record(stream)
        events[batch - 1][1].synchronize()
        for j in range(batch):
            ms = cp.cuda.get_elapsed_time(events[j][0], events[j][1])
            per_launch_us.append(ms * 1000.0 / launches)
            timed_s += ms / 1000.0
    del graph, args, storage, kernel, module
    gc.collect()  # unload the module and free the graph now, not some time later
    return {"median_us": median(per_launch_us), "min_us": min(per_launch_us),
            "samples": len(per_launch_us), "replay_us": replay_us}


def device_name(cp):
    try:
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        name = props.get("name", b"?")
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception as e:  # a description only
        return "unknown (%s)" % e


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", help="fidelity.json written by autotune-bench-profile --out")
    parser.add_argument("--results", help="write the results as JSON here "
                        "(default: fidelity_results.json beside the export)")
    parser.add_argument("--dry-run", action="store_true",
                        help="read and check the export, print the plan; measure nothing")
    parser.add_argument("--budget", type=float, default=None,
                        help="timing seconds per variant (default: the worker's)")
    parser.add_argument("--min-samples", type=int, default=None,
                        help="replays per variant at least (default: the worker's)")
    parser.add_argument("--limit", type=int, default=0, help="measure the first N only (0: all)")
    parser.add_argument("--allocator", choices=("pool", "plain", "aligned"), default="pool",
                        help="where the input sets live: CuPy's memory pool (default), a "
                        "cudaMalloc of their own (plain), or the pool with each set on a 2 MiB "
                        "boundary (aligned)")
    parser.add_argument("--fresh", action="store_true",
                        help="measure each variant in a process of its own (this script, "
                        "with --only), so no variant runs after another in one CUDA context")
    parser.add_argument("--only", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--warmup-ms", type=float, default=WARMUP_US / 1000.0,
                        help="GPU time of warm-up replays before timing (default 200)")
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="stop starting variants after this long (0: no limit)")
    args = parser.parse_args(argv)
    started = time.monotonic()

    try:
        with open(args.export) as f:
            export = json.load(f)
    except (OSError, ValueError) as e:
        print("profile_fidelity: cannot read %s: %s" % (args.export, e), file=sys.stderr)
        return 1
    if not isinstance(export, dict) or not isinstance(export.get("variants"), list):
        print("profile_fidelity: %s has no 'variants' list" % args.export, file=sys.stderr)
        return 1
    base_dir = os.path.dirname(os.path.abspath(args.export))
    budget = args.budget if args.budget is not None else float(export.get("timing_budget_s") or 0.25)
    min_samples = args.min_samples if args.min_samples is not None else int(
        export.get("min_samples") or 30)
    results_path = args.results or os.path.join(base_dir, "fidelity_results.json")
    entries = export["variants"]
    if args.limit > 0:
        entries = entries[: args.limit]

    rows = []
    plans = []
    bad = 0
    for entry in entries:
        row = {
            "problem": entry.get("problem", "?"),
            "label": entry.get("label", "?"),
            "variant_id": entry.get("variant_id"),
            "cache_state": entry.get("cache_state", "COLD"),
            "sets": entry.get("pool_sets"),
            "launches": entry.get("launches_per_sample"),
            "worker_us": worker_median(entry),
            "cupy_us": None,
            "ratio": None,
        }
        plan = None
        try:
            plan = plan_variant(entry, base_dir)
            why = check_cubin(plan["cubin"])
            if why:
                raise ExportError(why)
            if not plan["measured"]:
                row["note"] = "not measured by the worker"
            elif args.dry_run:
                row["note"] = "set %d B, %d scalars, grid %s block %s" % (
                    plan["set_bytes"], len(plan["scalars"]), "x".join(map(str, plan["grid"])),
                    "x".join(map(str, plan["block"])))
        except (ExportError, KeyError, TypeError, ValueError) as e:
            row["error"] = "bad export entry: %s" % e
            bad += 1
        rows.append(row)
        plans.append(plan)

    device = None
    if not args.dry_run:
        try:
            import cupy as cp
            import numpy as np
        except Exception as e:
            print("profile_fidelity: CuPy or NumPy cannot be imported: %s" % e, file=sys.stderr)
            _write_results(results_path, export, rows, summarize(rows), args, error=str(e))
            return 1
        if args.allocator == "plain":
            cp.cuda.set_allocator(None)
        try:
            device = device_name(cp)
            cp.cuda.Device(0).use()
        except Exception as e:
            print("profile_fidelity: no usable GPU: %s" % e, file=sys.stderr)
            _write_results(results_path, export, rows, summarize(rows), args, error=str(e))
            return 1
        for i, (row, plan) in enumerate(zip(rows, plans)):
            if plan is None or not plan["measured"] or row.get("error"):
                continue
            if args.max_seconds > 0 and time.monotonic() - started > args.max_seconds:
                row["error"] = "not measured: --max-seconds reached"
                continue
            if args.only >= 0 and i != args.only:
                continue
            if args.fresh:
                child_results = "%s.only%d.json" % (results_path, i)
                command = [sys.executable, "-u", os.path.abspath(__file__), args.export,
                           "--only", str(i), "--results", child_results,
                           "--allocator", args.allocator, "--warmup-ms", str(args.warmup_ms)]
                if args.budget is not None:
                    command += ["--budget", str(args.budget)]
                if args.min_samples is not None:
                    command += ["--min-samples", str(args.min_samples)]
                child = subprocess.run(command, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True)
                try:
                    with open(child_results) as f:
                        measured = json.load(f)["variants"][i]
                    for key in ("cupy_us", "cupy_min_us", "cupy_samples", "ratio", "error"):
                        if measured.get(key) is not None:
                            row[key] = measured[key]
                    os.remove(child_results)
                except (OSError, ValueError, KeyError, IndexError) as e:
                    row["error"] = "the child process gave no result (exit %d): %s %s" % (
                        child.returncode, e, child.stderr.strip().splitlines()[-1:] or "")
                print("[fidelity] %d/%d %s [%s]: worker %s us, cupy %s us (own process)"
                      % (i + 1, len(rows), row["problem"], row["label"], number(row["worker_us"]),
                         number(row["cupy_us"])), file=sys.stderr, flush=True)
                continue
            try:
                result = measure_variant(cp, np, plan, budget, min_samples,
                                         warmup_us=args.warmup_ms * 1000.0,
                                         align=(2 << 20) if args.allocator == "aligned" else 0)
                row["cupy_us"] = result["median_us"]
                row["cupy_min_us"] = result["min_us"]
                row["cupy_samples"] = result["samples"]
                if row["worker_us"]:
                    row["ratio"] = result["median_us"] / row["worker_us"]
            except Exception as e:  # one variant's failure is reported, the rest go on
                row["error"] = "%s: %s" % (type(e).__name__, e)
            finally:
                try:
                    cp.get_default_memory_pool().free_all_blocks()
                except Exception:
                    pass
            print("[fidelity] %d/%d %s [%s]: worker %s us, cupy %s us%s"
                  % (i + 1, len(rows), row["problem"], row["label"], number(row["worker_us"]),
                     number(row["cupy_us"]), (" (" + row["error"] + ")") if row.get("error") else ""),
                  file=sys.stderr, flush=True)

    summary = summarize(rows)
    print_table(rows)
    print("results: %s (%.1f s)" % (results_path, time.monotonic() - started))
    print_summary(rows, summary, args.dry_run, device)
    _write_results(results_path, export, rows, summary, args, device=device)
    if args.dry_run and bad:
        return 1
    if not args.dry_run and summary["compared"] == 0 and rows:
        return 1
    return 0


def _write_results(path, export, rows, summary, args, error=None, device=None):
    document = {
        "format": "autotune-profile-fidelity-results/1",
        "export": os.path.abspath(args.export),
        "dry_run": bool(args.dry_run),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": device,
        "worker_device": export.get("device"),
        "error": error,
        "summary": summary,
        "groups": group_rows(rows),
        "variants": rows,
    }
    try:
        with open(path, "w") as f:
            json.dump(document, f, indent=1)
            f.write("\n")
    except OSError as e:
        print("profile_fidelity: cannot write %s: %s" % (path, e), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
