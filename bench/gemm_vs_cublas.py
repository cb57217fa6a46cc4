#!/usr/bin/env python3
"""Times tuned gemm_bf16 cubins, torch.matmul (cuBLAS) and the best cuBLASLt algorithm alike.

For each lookup answer in --lookups (NAME.json, `autotune lookup --json`,
and NAME.cubin beside it), three sides multiply the same bf16 inputs in one
process, A [M, K] and B [N, K] into C [M, N]:

- tuned: the cubin, C = alpha * A B^T with alpha = 1/sqrt(K);
- cuBLAS: `torch.matmul(a, b.t())`, without alpha (folding alpha in would
  cost it an extra kernel, so it runs without: this favours cuBLAS);
- best cuBLASLt: cublasLtMatmul through ctypes (bench/cublaslt_peer.py),
  C = alpha * A B^T with the tuned kernel's alpha, which cuBLASLt applies
  in its epilogue at no cost; fp32 compute and scale type, bf16 C. Of the
  algorithms cublasLtMatmulAlgoGetHeuristic proposes (at most 16, with a
  32 MiB workspace), the one kept is the fastest (median of 5 graph
  replays, as below) of those whose output is within 2% of torch's. When
  libcublasLt cannot be loaded or a shape cannot be set up, the bench says
  why and shows n/a in its columns.

Each side is captured in a CUDA graph of launches that rotate over enough
input sets to exceed 2x the L2 cache (cold inputs, as the daemon times); a
replay's time / its launches is one sample of that side's time per launch.
The sides are timed interleaved: a run replays every graph WARMUP_REPLAYS
times, then takes SAMPLES samples of each side, one replay of each side in
turn, the side that goes first rotating from one turn to the next. --runs
runs (default 3) follow one another.

The numbers, per shape:
- tuned µs, cuBLAS µs, best Lt µs: the median of a side's samples over all
  runs (runs x SAMPLES);
- TFLOP/s: 2 M N K / tuned µs (and / cuBLAS µs in the next column);
- of cuBLAS: cuBLAS µs / tuned µs, and of best: best Lt µs / tuned µs
  (above 100% the tuned kernel is faster); "per run": the smallest and the
  largest of the same ratio taken over each run's medians;
- spread t/c/l: for tuned, cuBLAS and best Lt, (largest - smallest of the
  per-run medians) / the median, in %;
- vs default: the daemon's speedup over the family's default config
  (--job); rel err: max |tuned - torch * alpha| / max |torch * alpha|.

Before and after each shape's timing, and at the start and end of the
bench, the GPU's SM and memory clocks, power draw, temperature and active
clock throttle reasons are read (pynvml if it imports, else nvidia-smi)
and printed. Once per bench, the device-to-device copy bandwidth is
measured: bytes read plus bytes written by a copy of a 1 GiB tensor (a
torch copy in a CUDA graph), over the median of 20 replays. For M <= 16
the tuned kernel's weight bandwidth (N K 2 bytes / tuned µs) is printed
as a share of it. Summaries over all shapes and per M group (1-64,
128-512, >= 1024): the geometric mean of of cuBLAS and of best, the
smallest and its shape, and how many shapes are below 90%.

The tuned output is checked against torch's before timing; a relative
error of 2% or more makes the exit status 1. Prints the rows and
summaries and writes them, with the GPU readings, to --json.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys

SAMPLES = 30  # per side and run
WARMUP_REPLAYS = 5  # of each graph, at the start of each run
MAX_REL_ERROR = 0.02
LT_ALGORITHMS = 16
LT_WORKSPACE_BYTES = 32 << 20
LT_WARMUP_REPLAYS = 2  # choosing the cuBLASLt algorithm
LT_SAMPLES = 5
COPY_BYTES = 1 << 30
COPY_SAMPLES = 20
DECODE_MAX_M = 16
GROUPS = (("all shapes", lambda m: True), ("M 1-64", lambda m: m <= 64),
          ("M 128-512", lambda m: 128 <= m <= 512), ("M >= 1024", lambda m: m >= 1024))
SIDES = ("tuned", "cublas", "best_cublaslt")


def workspace_floats(m, n, config):
    """The SCRATCH buffer's elements, as gemm_bf16.textproto writes them."""
    bm = config["BM"]
    split = config["SPLIT_K"]
    counters = -(-m // 16) * -(-n // 32)
    counters = -(-counters // 4) * 4
    return counters + (split * -(-m // bm) * bm * n if split > 1 else 0)


def gemm_args(driver, config, a, b, c, work, alpha):
    """The kernel's arguments over these tensors: buffers, tensor maps, scalars."""
    m, k = a.shape
    n = b.shape[0]
    return [ctypes.c_uint64(a.data_ptr()), ctypes.c_uint64(b.data_ptr()),
            ctypes.c_uint64(c.data_ptr()), ctypes.c_uint64(work.data_ptr()),
            driver.tensor_map_2d(a.data_ptr(), m, k, config["BM"], config["BK"]),
            # CLUSTER = 2: each block of a pair loads half of the B tile.
            driver.tensor_map_2d(b.data_ptr(), n, k, config["BN"] // config.get("CLUSTER", 1),
                                 config["BK"]),
            driver.tensor_map_2d(c.data_ptr(), m, n, config["BM"], 64),
            ctypes.c_float(alpha), ctypes.c_int32(m), ctypes.c_int32(n), ctypes.c_int32(k)]


def max_rel_error(out, expected):
    """max |out - expected| / max |expected| (expected in fp32)."""
    return ((out.float() - expected).abs().max() / expected.abs().max().clamp_min(1e-6)).item()


# ---- graphs and timing ----

def launches_per_replay(sets, l2_bytes, per_set_bytes):
    """Launches in one graph: whole rounds over the sets, touching over 2x L2, at least 8."""
    launches = max(sets, 1)
    while launches * per_set_bytes < 2 * l2_bytes or launches < 8:
        launches += sets
    return launches


def capture(torch, launch, sets, launches):
    """A CUDA graph of `launches` calls of launch(i), i cycling over the sets."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch(0)  # loads the function and shows an error outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(launches):
            launch(i % sets)
    return graph


class Timer:
    """Microseconds per launch of one replay of a graph of `launches` launches (CUDA events)."""

    def __init__(self, torch, launches):
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.launches = launches

    def __call__(self, graph):
        self.start.record()
        graph.replay()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1000.0 / self.launches


def time_graph(torch, launch, sets, l2_bytes, per_set_bytes):
    """Median microseconds per launch of `launch(i)` over rotating sets, timed alone: one
    graph, WARMUP_REPLAYS, then SAMPLES replays (bench/gemm_config_sweep.py times this way;
    this script times its sides interleaved, with measure())."""
    launches = launches_per_replay(sets, l2_bytes, per_set_bytes)
    graph = capture(torch, launch, sets, launches)
    for _ in range(WARMUP_REPLAYS):
        graph.replay()
    torch.cuda.synchronize()
    timer = Timer(torch, launches)
    samples = [timer(graph) for _ in range(SAMPLES)]
    del graph
    return statistics.median(samples)


def measure(torch, graphs, launches, runs):
    """{side: [[µs per launch of each sample] of each run]}, the sides interleaved."""
    timer = Timer(torch, launches)
    sides = list(graphs)
    samples = {side: [] for side in sides}
    turn = 0
    for _ in range(runs):
        for _ in range(WARMUP_REPLAYS):
            for side in sides:
                graphs[side].replay()
        torch.cuda.synchronize()
        run = {side: [] for side in sides}
        for _ in range(SAMPLES):
            first = turn % len(sides)
            turn += 1
            for side in sides[first:] + sides[:first]:
                run[side].append(timer(graphs[side]))
        for side in sides:
            samples[side].append(run[side])
    return samples


def side_stats(per_run):
    """The median of all samples, each run's median, and how those spread around the median (%)."""
    median = statistics.median([x for run in per_run for x in run])
    medians = [statistics.median(run) for run in per_run]
    return {"us": median, "run_medians_us": medians,
            "run_min_pct": 100.0 * (min(medians) / median - 1),
            "run_max_pct": 100.0 * (max(medians) / median - 1),
            "run_spread_pct": 100.0 * (max(medians) - min(medians)) / median}


def ratio_stats(peer, tuned):
    """peer µs / tuned µs of the medians, and the smallest and largest of it over the runs."""
    per_run = [p / t for p, t in zip(peer["run_medians_us"], tuned["run_medians_us"])]
    return peer["us"] / tuned["us"], min(per_run), max(per_run)


def copy_bandwidth_gbs(torch):
    """Bytes read + bytes written by a copy of a 1 GiB tensor / its median time, in GB/s."""
    src = torch.ones(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    graph = capture(torch, lambda i: dst.copy_(src), 1, 1)
    timer = Timer(torch, 1)
    for _ in range(WARMUP_REPLAYS):
        graph.replay()
    median_us = statistics.median([timer(graph) for _ in range(COPY_SAMPLES)])
    del graph, src, dst
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / median_us / 1e3


# ---- GPU clocks, power and temperature ----

def pci_bus_id(driver):
    """The PCI bus id of CUDA device 0 (torch's cuda:0), or None when the driver does not say."""
    device = ctypes.c_int()
    bus_id = ctypes.create_string_buffer(64)
    if driver.lib.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return None
    if driver.lib.cuDeviceGetPCIBusId(bus_id, len(bus_id), device) != 0:
        return None
    return bus_id.value.decode()


def _number(text):
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]"


class GpuState:
    """Reads the GPU's SM and memory clocks (MHz), power draw (W), temperature (°C) and
    active clock throttle reasons (bit mask): with pynvml if it imports and finds the GPU,
    else with nvidia-smi."""

    def __init__(self, bus_id):
        self.bus_id = bus_id
        self.nvml = None
        self.source = "nvidia-smi"
        try:
            import pynvml
            pynvml.nvmlInit()
            self.handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode()) if bus_id
                           else pynvml.nvmlDeviceGetHandleByIndex(0))
            self.nvml = pynvml
            self.source = "pynvml"
        except Exception as error:  # ImportError or an NVMLError
            self.source = f"nvidia-smi (pynvml: {type(error).__name__}: {error})"

    def read(self):
        try:
            return self._read_nvml() if self.nvml else self._read_smi()
        except Exception as error:  # an NVMLError, or nvidia-smi missing or failing
            return {"error": f"{type(error).__name__}: {error}"}

    def _read_nvml(self):
        nv, handle = self.nvml, self.handle
        reasons = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or nv.nvmlDeviceGetCurrentClocksThrottleReasons)
        return {"sm_mhz": nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
                "mem_mhz": nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM),
                "power_w": nv.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                "temperature_c": nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
                "throttle_reasons": f"0x{reasons(handle):x}"}

    def _read_smi(self):
        failure = ""
        for reasons_field in ("clocks_throttle_reasons.active", "clocks_event_reasons.active"):
            command = ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,"
                       + reasons_field, "--format=csv,noheader,nounits"]
            if self.bus_id:
                command.insert(1, f"--id={self.bus_id}")
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
            if done.returncode == 0:
                values = [v.strip() for v in done.stdout.splitlines()[0].split(",")]
                sm, mem, power, temperature, reasons = values
                return {"sm_mhz": _number(sm), "mem_mhz": _number(mem), "power_w": _number(power),
                        "temperature_c": _number(temperature), "throttle_reasons": reasons}
            failure = (done.stderr or done.stdout).strip()
        raise RuntimeError(f"nvidia-smi: {failure}")


def describe(state):
    if "error" in state:
        return f"n/a ({state['error']})"

    def show(value, unit, digits=0):
        return "n/a" if value is None else f"{value:.{digits}f} {unit}"
    return (f"SM {show(state['sm_mhz'], 'MHz')}, memory {show(state['mem_mhz'], 'MHz')}, "
            f"{show(state['power_w'], 'W')}, {show(state['temperature_c'], '°C')}, "
            f"throttle reasons {state['throttle_reasons']}")


# ---- the best cuBLASLt algorithm ----

class LtPeer:
    """cuBLASLt's fastest algorithm that agrees with torch for one shape, captured in a graph.

    graph is None and error says why when there is none. tried lists each
    proposed algorithm: its heuristic rank, workspace bytes, waves count,
    and its error, or its max_rel_error and (when within MAX_REL_ERROR) us.
    """

    def __init__(self, torch, lt, workspace, a, b, sets, launches, alpha, expected):
        from cublaslt_peer import LtError, Matmul
        m, k = a[0].shape
        n = b[0].shape[0]
        self.graph, self.error, self.chosen, self.tried = None, None, None, []
        self.d = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        self.matmul = Matmul(lt, m, n, k, alpha, workspace.data_ptr(), workspace.numel())
        try:
            self._choose(torch, LtError, a, b, sets, launches, expected)
        except Exception:
            self.close()
            raise
        if not self.tried:
            self.error = "cublasLtMatmulAlgoGetHeuristic proposed no algorithm"
        elif self.graph is None:
            self.error = f"none of the {len(self.tried)} proposed algorithms ran and matched torch"

    def _choose(self, torch, lt_error, a, b, sets, launches, expected):
        timer = Timer(torch, launches)
        for rank, result in enumerate(self.matmul.heuristics(LT_ALGORITHMS)):
            def launch(i, algo=result.algo):
                self.matmul.run(algo, a[i].data_ptr(), b[i].data_ptr(), self.d[i].data_ptr(),
                                torch.cuda.current_stream().cuda_stream)
            entry = {"rank": rank, "workspace_bytes": int(result.workspace_size),
                     "waves": float(result.waves_count)}
            self.tried.append(entry)
            try:
                launch(0)
                torch.cuda.synchronize()
                entry["max_rel_error"] = max_rel_error(self.d[0], expected)
                if not entry["max_rel_error"] < MAX_REL_ERROR:
                    continue
                graph = capture(torch, launch, sets, launches)
            except lt_error as error:
                entry["error"] = str(error)
                continue
            for _ in range(LT_WARMUP_REPLAYS):
                graph.replay()
            entry["us"] = statistics.median([timer(graph) for _ in range(LT_SAMPLES)])
            if self.chosen is None or entry["us"] < self.chosen["us"]:
                self.graph, self.chosen = graph, entry

    def close(self):
        self.graph = None
        self.matmul.close()


def open_cublaslt(torch):
    """(CublasLt, workspace tensor, None), or (None, None, why not)."""
    try:
        from cublaslt_peer import CublasLt
        x = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
        torch.matmul(x, x)  # torch loads its cuBLAS libraries, if it has not yet
        torch.cuda.synchronize()
        lt = CublasLt.open()
        workspace = torch.empty(LT_WORKSPACE_BYTES, device="cuda", dtype=torch.uint8)
        return lt, workspace, None
    except Exception as error:  # LtError, OSError, ...: the bench goes on without the peer
        return None, None, f"{type(error).__name__}: {error}"


# ---- one shape ----

def load_answer(lookups, name, driver):
    """(m, n, k, config, kernel, grid, block, shared bytes) of the lookup answer NAME."""
    with open(os.path.join(lookups, name + ".json")) as f:
        entry = json.load(f)["entry"]
    dims = entry["problem"]["dims"]
    m, n, k = (int(dims[key]) for key in ("M", "N", "K"))
    config = {key: int(value) for key, value in entry["config"]["params"].items()}
    launch_dims = entry["launch"]
    grid = tuple(int(x) for x in launch_dims["grid"]) + (1,) * (3 - len(launch_dims["grid"]))
    block = tuple(int(x) for x in launch_dims["block"]) + (1,) * (3 - len(launch_dims["block"]))
    shared = int(launch_dims.get("dynamic_shared_bytes", 0))
    with open(os.path.join(lookups, name + ".cubin"), "rb") as f:
        kernel = driver.load(f.read(), entry["function_name"], shared)
    return m, n, k, config, kernel, grid, block, shared


def bench_shape(torch, driver, gpu, lt, lt_workspace, l2_bytes, runs, answer):
    """The row of one shape (see the module's docstring); prints the GPU readings around
    its timing."""
    m, n, k, config, kernel, grid, block, shared = answer
    per_set = (m * k + n * k + m * n) * 2
    sets = max(1, min(64, math.ceil(2 * l2_bytes / per_set)))
    launches = launches_per_replay(sets, l2_bytes, per_set)
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = [torch.rand(m, k, device="cuda", generator=gen, dtype=torch.float32).mul_(2).sub_(1)
         .to(torch.bfloat16) for _ in range(sets)]
    b = [torch.rand(n, k, device="cuda", generator=gen, dtype=torch.float32).mul_(2).sub_(1)
         .to(torch.bfloat16) for _ in range(sets)]
    c = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    c_ref = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    work = [torch.zeros(workspace_floats(m, n, config), device="cuda", dtype=torch.float32)
            for _ in range(sets)]
    alpha = 1.0 / math.sqrt(k)
    set_args = [gemm_args(driver, config, a[i], b[i], c[i], work[i], alpha) for i in range(sets)]

    def tuned(i):
        driver.launch(kernel, grid, block, shared, torch.cuda.current_stream().cuda_stream,
                      set_args[i])

    def cublas(i):
        torch.matmul(a[i], b[i].t(), out=c_ref[i])

    tuned(0)
    cublas(0)
    torch.cuda.synchronize()
    expected = c_ref[0].float() * float(alpha)
    error = max_rel_error(c[0], expected)
    graphs = {"tuned": capture(torch, tuned, sets, launches),
              "cublas": capture(torch, cublas, sets, launches)}
    peer, lt_error = None, None
    if lt is not None:
        try:
            peer = LtPeer(torch, lt, lt_workspace, a, b, sets, launches, alpha, expected)
            lt_error = peer.error
            if peer.graph is not None:
                graphs["best_cublaslt"] = peer.graph
        except Exception as exc:  # an LtError setting up the shape, or a failed capture
            lt_error = f"{type(exc).__name__}: {exc}"
    shape = f"M={m} N={n} K={k}"
    if lt_error:
        print(f"{shape}: no best-cuBLASLt time: {lt_error}")
    before = gpu.read()
    samples = measure(torch, graphs, launches, runs)
    after = gpu.read()
    print(f"{shape}: before {describe(before)}; after {describe(after)}")
    row = make_row(m, n, k, config, samples, error, sets, launches)
    row.update({"gpu_before": before, "gpu_after": after, "cublaslt_error": lt_error})
    if peer is not None:
        row["best_cublaslt_algo"] = peer.chosen
        row["cublaslt_tried"] = peer.tried
        peer.close()
    del graphs, a, b, c, c_ref, work, set_args, kernel, peer
    torch.cuda.empty_cache()
    return row


def make_row(m, n, k, config, samples, error, sets, launches):
    """A row's timing fields from the samples of each side (see the module's docstring)."""
    flops = 2.0 * m * n * k
    stats = {side: side_stats(per_run) for side, per_run in samples.items()}
    tuned, cublas = stats["tuned"], stats["cublas"]
    of_cublas, of_cublas_min, of_cublas_max = ratio_stats(cublas, tuned)
    row = {"M": m, "N": n, "K": k, "config": config, "tuned_us": tuned["us"],
           "cublas_us": cublas["us"], "tuned_tflops": flops / tuned["us"] / 1e6,
           "cublas_tflops": flops / cublas["us"] / 1e6, "of_cublas": of_cublas,
           "of_cublas_run_min": of_cublas_min, "of_cublas_run_max": of_cublas_max,
           "max_rel_error": error, "input_sets": sets, "launches_per_replay": launches,
           "best_cublaslt_us": None, "best_cublaslt_tflops": None, "of_best_cublaslt": None,
           "of_best_cublaslt_run_min": None, "of_best_cublaslt_run_max": None}
    for side, values in stats.items():
        for key in ("run_medians_us", "run_min_pct", "run_max_pct", "run_spread_pct"):
            row[f"{side}_{key}"] = values[key]
    if "best_cublaslt" in stats:
        lt = stats["best_cublaslt"]
        ratio, low, high = ratio_stats(lt, tuned)
        row.update({"best_cublaslt_us": lt["us"], "best_cublaslt_tflops": flops / lt["us"] / 1e6,
                    "of_best_cublaslt": ratio, "of_best_cublaslt_run_min": low,
                    "of_best_cublaslt_run_max": high})
    if m <= DECODE_MAX_M:
        row["tuned_weight_gbs"] = n * k * 2 / tuned["us"] / 1e3
    return row


# ---- printing ----

def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def pct_range(low, high):
    return "n/a" if low is None else f"{100 * low:.1f}-{100 * high:.1f}%"


def print_rows(rows):
    print(f"{'M':>6} {'N':>6} {'K':>6} {'tuned µs':>9} {'cuBLAS µs':>9} {'best Lt µs':>10} "
          f"{'TFLOP/s':>8} {'cuBLAS':>8} {'of cuBLAS':>9} {'per run':>12} {'of best':>8} "
          f"{'per run':>12} {'spread t/c/l %':>15} {'vs default':>10} {'rel err':>8}  config")
    for r in rows:
        cfg = " ".join(f"{key}={value}" for key, value in sorted(r["config"].items()))
        lt_us = "n/a" if r["best_cublaslt_us"] is None else f"{r['best_cublaslt_us']:.2f}"
        spread = "/".join("-" if r.get(f"{side}_run_spread_pct") is None
                          else f"{r[f'{side}_run_spread_pct']:.1f}" for side in SIDES)
        print(f"{r['M']:>6} {r['N']:>6} {r['K']:>6} {r['tuned_us']:>9.2f} {r['cublas_us']:>9.2f} "
              f"{lt_us:>10} {r['tuned_tflops']:>8.1f} {r['cublas_tflops']:>8.1f} "
              f"{pct(r['of_cublas']):>9} "
              f"{pct_range(r['of_cublas_run_min'], r['of_cublas_run_max']):>12} "
              f"{pct(r['of_best_cublaslt']):>8} "
              f"{pct_range(r['of_best_cublaslt_run_min'], r['of_best_cublaslt_run_max']):>12} "
              f"{spread:>15} {r['daemon_speedup_over_default']:>9.2f}x "
              f"{r['max_rel_error']:>8.1e}  {cfg}")


def shape_name(row):
    return f"M={row['M']} N={row['N']} K={row['K']}"


def ratio_summary(rows, key):
    """Geometric mean, smallest (and its shape) and count below 90% of `key` over the rows that
    have it; None when none has."""
    pairs = [(r[key], r) for r in rows if r.get(key) is not None]
    if not pairs:
        return None
    ratios = [ratio for ratio, _ in pairs]
    low, low_row = min(pairs, key=lambda pair: pair[0])
    geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return {"shapes": len(ratios), "geomean": geomean, "min": low,
            "min_shape": shape_name(low_row), "below_90pct": sum(x < 0.9 for x in ratios)}


def summarize(rows):
    summary = {}
    for group, test in GROUPS:
        members = [r for r in rows if test(r["M"])]
        if members:
            summary[group] = {"shapes": len(members),
                              "of_cublas": ratio_summary(members, "of_cublas"),
                              "of_best_cublaslt": ratio_summary(members, "of_best_cublaslt")}
    return summary


def print_summary(summary):
    print("summary (of cuBLAS = cuBLAS µs / tuned µs; of best = best cuBLASLt µs / tuned µs):")
    for group, values in summary.items():
        parts = []
        for key, label in (("of_cublas", "of cuBLAS"), ("of_best_cublaslt", "of best")):
            s = values[key]
            if s is None:
                parts.append(f"{label} n/a")
            else:
                parts.append(f"{label} geomean {pct(s['geomean'])} over {s['shapes']}, min "
                             f"{pct(s['min'])} at {s['min_shape']}, {s['below_90pct']} below 90%")
        print(f"  {group} ({values['shapes']} shapes): " + "; ".join(parts))


def print_decode(rows, copy_gbs):
    decode = [r for r in rows if "tuned_weight_gbs" in r]
    if not decode:
        return
    print(f"decode (M <= {DECODE_MAX_M}): tuned weight bandwidth (N K 2 bytes / tuned µs) "
          f"as a share of the copy bandwidth, {copy_gbs:.0f} GB/s")
    for r in decode:
        print(f"  {shape_name(r)}: {r['tuned_weight_gbs']:.0f} GB/s, {pct(r['of_copy_bandwidth'])}")


# ---- main ----

def read_speedups(path):
    """{(M, N, K): (daemon speedup over the default config, default config's median µs)}."""
    speedups = {}
    if path:
        with open(path) as f:
            job = json.load(f)
        for report in job.get("reports", []):
            dims = report["problem"]["dims"]
            key = tuple(int(dims[k]) for k in ("M", "N", "K"))
            speedups[key] = (report.get("speedup", 0.0), report.get("default_median_us", 0.0))
    return speedups


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lookups", required=True)
    parser.add_argument("--job", help="the warmup's job JSON (default configs' speedups)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs of SAMPLES interleaved samples per shape (default 3)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cuda_launch import Driver

    device = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(device, "L2_cache_size", 50 << 20)
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    driver = Driver()
    gpu = GpuState(pci_bus_id(driver))
    gpu_start = gpu.read()
    print(f"GPU at start ({gpu.source}): {describe(gpu_start)}")
    speedups = read_speedups(args.job)
    copy_gbs = copy_bandwidth_gbs(torch)
    print(f"device-to-device copy bandwidth: {copy_gbs:.0f} GB/s (read + written bytes of a "
          f"1 GiB copy / median of {COPY_SAMPLES} graph replays)")
    lt, lt_workspace, lt_error = open_cublaslt(torch)
    if lt is None:
        print(f"best cuBLASLt: n/a ({lt_error}); timing the tuned kernels and torch.matmul only")
    else:
        print(f"best cuBLASLt: {lt.path}, version {lt.version}; alpha = 1/sqrt(K) in its epilogue")

    rows = []
    names = sorted(n[:-5] for n in os.listdir(args.lookups) if n.endswith(".json"))
    for name in names:
        answer = load_answer(args.lookups, name, driver)
        row = bench_shape(torch, driver, gpu, lt, lt_workspace, l2_bytes, args.runs, answer)
        speedup, default_us = speedups.get((row["M"], row["N"], row["K"]), (0.0, 0.0))
        row.update({"daemon_speedup_over_default": speedup, "daemon_default_us": default_us})
        if "tuned_weight_gbs" in row:
            row["of_copy_bandwidth"] = row["tuned_weight_gbs"] / copy_gbs
        rows.append(row)
    gpu_end = gpu.read()
    print(f"GPU at end: {describe(gpu_end)}")

    print_rows(rows)
    summary = summarize(rows)
    print_summary(summary)
    print_decode(rows, copy_gbs)
    print(f"device: {device.name}; torch {torch.__version__}; medians of {args.runs} runs x "
          f"{SAMPLES} interleaved graph replays per side")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device.name, "torch": torch.__version__, "runs": args.runs,
                       "samples_per_run": SAMPLES, "warmup_replays_per_run": WARMUP_REPLAYS,
                       "gpu_state_source": gpu.source, "gpu_start": gpu_start, "gpu_end": gpu_end,
                       "copy_bandwidth_gbs": copy_gbs,
                       "cublaslt": ({"library": lt.path, "version": lt.version,
                                     "workspace_bytes": LT_WORKSPACE_BYTES,
                                     "alpha": "1/sqrt(K), in the epilogue"} if lt is not None
                                    else {"error": lt_error}),
                       "summary": summary, "rows": rows}, f, indent=1)
    bad = [r for r in rows if not r["max_rel_error"] < MAX_REL_ERROR]
    if bad:
        print(f"error: {len(bad)} tuned kernels disagree with torch by 2% or more", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
