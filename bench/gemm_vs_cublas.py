#!/usr/bin/env python3
"""Times tuned gemm_bf16 cubins and torch.matmul (cuBLAS) the same way.

For each lookup answer in --lookups (NAME.json, `autotune lookup --json`,
and NAME.cubin beside it), both sides compute C = alpha * A B^T on bf16
inputs in one process: A [M, K], B [N, K], C [M, N]; torch as
`torch.matmul(a, b.t())` (cuBLAS, alpha folded in would cost it an extra
kernel, so it runs without: the comparison favours cuBLAS). Each side is
captured in a CUDA graph of launches that rotate over enough input sets to
exceed 2x the L2 cache (cold inputs, as the daemon times), replayed after a
warm-up; the per-launch time of each replay is a sample, and the median of
the samples is quoted. The tuned output is checked against torch's before
timing (relative error of the bf16 results).

Prints one row per shape and writes the rows to --json.
"""
import argparse
import json
import math
import os
import statistics
import sys

SAMPLES = 30
WARMUP_REPLAYS = 5


def workspace_floats(m, n, config):
    """The SCRATCH buffer's elements, as gemm_bf16.textproto writes them."""
    bm = config["BM"]
    split = config["SPLIT_K"]
    counters = -(-m // 16) * -(-n // 32)
    counters = -(-counters // 4) * 4
    return counters + (split * -(-m // bm) * bm * n if split > 1 else 0)


def gemm_args(driver, config, a, b, c, work, alpha):
    """The kernel's arguments over these tensors: buffers, tensor maps, scalars."""
    import ctypes
    m, k = a.shape
    n = b.shape[0]
    return [ctypes.c_uint64(a.data_ptr()), ctypes.c_uint64(b.data_ptr()),
            ctypes.c_uint64(c.data_ptr()), ctypes.c_uint64(work.data_ptr()),
            driver.tensor_map_2d(a.data_ptr(), m, k, config["BM"], config["BK"]),
            driver.tensor_map_2d(b.data_ptr(), n, k, config["BN"], config["BK"]),
            driver.tensor_map_2d(c.data_ptr(), m, n, config["BM"], 64),
            ctypes.c_float(alpha), ctypes.c_int32(m), ctypes.c_int32(n), ctypes.c_int32(k)]


def time_graph(torch, launch, sets, l2_bytes, per_set_bytes):
    """Median microseconds per launch of `launch(i)` over rotating sets."""
    launches = max(sets, 1)
    while launches * per_set_bytes < 2 * l2_bytes or launches < 8:
        launches += sets
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch(0)  # loads the function and shows an error outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(launches):
            launch(i % sets)
    for _ in range(WARMUP_REPLAYS):
        graph.replay()
    torch.cuda.synchronize()
    samples = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(SAMPLES):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / launches)
    del graph
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lookups", required=True)
    parser.add_argument("--job", help="the warmup's job JSON (default configs' speedups)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()

    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cuda_launch import Driver

    device = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(device, "L2_cache_size", 50 << 20)
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    driver = Driver()
    speedups = {}
    if args.job:
        with open(args.job) as f:
            job = json.load(f)
        for report in job.get("reports", []):
            dims = report["problem"]["dims"]
            key = tuple(int(dims[k]) for k in ("M", "N", "K"))
            speedups[key] = (report.get("speedup", 0.0), report.get("default_median_us", 0.0))

    rows = []
    names = sorted(n[:-5] for n in os.listdir(args.lookups) if n.endswith(".json"))
    for name in names:
        with open(os.path.join(args.lookups, name + ".json")) as f:
            answer = json.load(f)
        entry = answer["entry"]
        dims = entry["problem"]["dims"]
        m, n, k = (int(dims[key]) for key in ("M", "N", "K"))
        config = {key: int(value) for key, value in entry["config"]["params"].items()}
        launch_dims = entry["launch"]
        grid = tuple(int(x) for x in launch_dims["grid"]) + (1,) * (3 - len(launch_dims["grid"]))
        block = tuple(int(x) for x in launch_dims["block"]) + (1,) * (3 - len(launch_dims["block"]))
        shared = int(launch_dims.get("dynamic_shared_bytes", 0))
        with open(os.path.join(args.lookups, name + ".cubin"), "rb") as f:
            kernel = driver.load(f.read(), entry["function_name"], shared)

        per_set = (m * k + n * k + m * n) * 2
        sets = max(1, min(64, math.ceil(2 * l2_bytes / per_set)))
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
        set_args = [gemm_args(driver, config, a[i], b[i], c[i], work[i], alpha)
                    for i in range(sets)]

        def tuned(i):
            driver.launch(kernel, grid, block, shared, torch.cuda.current_stream().cuda_stream,
                          set_args[i])

        def cublas(i):
            torch.matmul(a[i], b[i].t(), out=c_ref[i])

        tuned(0)
        cublas(0)
        torch.cuda.synchronize()
        expected = c_ref[0].float() * float(alpha)
        error = ((c[0].float() - expected).abs().max() / expected.abs().max().clamp_min(1e-6)).item()
        tuned_us = time_graph(torch, tuned, sets, l2_bytes, per_set)
        cublas_us = time_graph(torch, cublas, sets, l2_bytes, per_set)
        flops = 2.0 * m * n * k
        speedup, default_us = speedups.get((m, n, k), (0.0, 0.0))
        rows.append({
            "M": m, "N": n, "K": k, "config": config, "tuned_us": tuned_us,
            "cublas_us": cublas_us, "tuned_tflops": flops / tuned_us / 1e6,
            "cublas_tflops": flops / cublas_us / 1e6, "of_cublas": cublas_us / tuned_us,
            "max_rel_error": error, "input_sets": sets,
            "daemon_speedup_over_default": speedup, "daemon_default_us": default_us,
        })
        del a, b, c, c_ref, work, set_args, kernel
        torch.cuda.empty_cache()

    print(f"{'M':>6} {'N':>6} {'K':>6} {'tuned µs':>9} {'cuBLAS µs':>9} {'TFLOP/s':>8} "
          f"{'cuBLAS':>8} {'of cuBLAS':>9} {'vs default':>10} {'rel err':>8}  config")
    for r in rows:
        cfg = " ".join(f"{key}={value}" for key, value in sorted(r["config"].items()))
        print(f"{r['M']:>6} {r['N']:>6} {r['K']:>6} {r['tuned_us']:>9.2f} {r['cublas_us']:>9.2f} "
              f"{r['tuned_tflops']:>8.1f} {r['cublas_tflops']:>8.1f} {100 * r['of_cublas']:>8.1f}% "
              f"{r['daemon_speedup_over_default']:>9.2f}x {r['max_rel_error']:>8.1e}  {cfg}")
    for group, test in (("M <= 64", lambda r: r["M"] <= 64), ("M >= 1024", lambda r: r["M"] >= 1024)):
        ratios = [r["of_cublas"] for r in rows if test(r)]
        if ratios:
            geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"geomean of cuBLAS, {group}: {100 * geomean:.1f}% over {len(ratios)} shapes")
    print(f"device: {device.name}; torch {torch.__version__}; medians of {SAMPLES} graph replays")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device.name, "rows": rows}, f, indent=1)
    bad = [r for r in rows if not r["max_rel_error"] < 0.02]
    if bad:
        print(f"error: {len(bad)} tuned kernels disagree with torch by 2% or more", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
