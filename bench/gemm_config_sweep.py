#!/usr/bin/env python3
"""Times chosen gemm_bf16 configs and torch.matmul (cuBLAS) side by side.

A look at the family's ceiling without the daemon: each config of --configs
is compiled from kernels/builtin/gemm_bf16.cu with NVRTC (as the daemon's
workers do: -arch, the param macros and the dtype macros), checked against
torch, and timed exactly as bench/gemm_vs_cublas.py times tuned cubins (CUDA
graphs over input sets larger than 2x L2, medians of graph replays), at each
shape of --shapes. It does not tune: it shows what given configs reach, for
instance the best tiles of each instruction path at large M.

  python3 bench/gemm_config_sweep.py --shapes 4096x4096x4096,8192x8192x8192 \
      --configs "WGMMA=1 BM=128 BN=256 BK=64 WM=2 WN=1 STAGES=4 GROUP_M=8 SPLIT_K=1"

--configs takes configs separated by ';' (every param of the family given;
PERSISTENT and CLUSTER, added last, are 0 and 1 when left out).
Prints one row per shape and config; writes them to --json.
"""
import argparse
import ctypes
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_launch import Driver  # noqa: E402
from gemm_vs_cublas import gemm_args, time_graph, workspace_floats  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO, "kernels", "builtin", "gemm_bf16.cu")
PARAMS = ("WGMMA", "BM", "BN", "BK", "WM", "WN", "STAGES", "GROUP_M", "SPLIT_K", "PERSISTENT",
          "CLUSTER")


def nvrtc_compile(source, options, arch):
    """The cubin of `source` compiled by the toolkit's NVRTC."""
    lib = ctypes.CDLL(os.environ.get("NVRTC_LIB", "/usr/local/cuda/lib64/libnvrtc.so.13"))
    program = ctypes.c_void_p()

    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"nvrtc {what} failed ({rc})")

    check(lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"gemm_bf16.cu", 0,
                                 None, None), "create")
    args = [f"-arch={arch}", "-std=c++17", "--include-path=/usr/local/cuda/include"] + options
    argv = (ctypes.c_char_p * len(args))(*[a.encode() for a in args])
    rc = lib.nvrtcCompileProgram(program, len(args), argv)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, log)
    if rc != 0:
        raise RuntimeError(f"compile failed for {' '.join(options)}:\n{log.value.decode()}")
    lib.nvrtcGetCUBINSize(program, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    check(lib.nvrtcGetCUBIN(program, cubin), "cubin")
    lib.nvrtcDestroyProgram(ctypes.byref(program))
    return cubin.raw


def ceil_div(a, b):
    return -(-a // b)


def launch_of(config, m, n, sm_count):
    """grid, block and dynamic shared bytes, as gemm_bf16.textproto's launch writes them."""
    c = config
    cluster = c["CLUSTER"]
    tiles = ceil_div(ceil_div(m, c["BM"]), cluster) * ceil_div(n, c["BN"])  # clusters' tiles
    grid = (cluster * (min(tiles, sm_count // cluster) if c["PERSISTENT"] else tiles),
            c["SPLIT_K"], 1)
    threads = {0: 32 * c["WM"] * c["WN"], 1: 128 * c["WM"], 2: 128 * (c["WM"] + 1),
               3: 128 * (c["WM"] + 1)}
    block = (threads[c["WGMMA"]], 1, 1)
    shared = (c["STAGES"] * (c["BM"] + c["BN"]) * c["BK"] * 2 + (1024 if c["WGMMA"] else 0)
              + (c["BM"] * c["BN"] * 2 if c["PERSISTENT"] else 0))
    return grid, block, shared


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", required=True, help="MxNxK[,MxNxK...]")
    parser.add_argument("--configs", required=True, help="'P=v ...;P=v ...'")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--source", default=SOURCE,
                        help="the kernel source (default: the family's); the launch and the "
                             "arguments stay the family's")
    parser.add_argument("--json")
    args = parser.parse_args()

    import torch

    device = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(device, "L2_cache_size", 50 << 20)
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    driver = Driver()
    with open(args.source) as f:
        source = f.read()
    configs = []
    for text in filter(None, (t.strip() for t in args.configs.split(";"))):
        config = {k: int(v) for k, v in (p.split("=") for p in text.split())}
        config.setdefault("PERSISTENT", 0)
        config.setdefault("CLUSTER", 1)
        missing = [p for p in PARAMS if p not in config]
        if missing:
            sys.exit(f"config '{text}' lacks {', '.join(missing)}")
        options = [f"-D{p}={config[p]}" for p in PARAMS] + [
            "-DAUTOTUNE_DTYPE=__nv_bfloat16", "-DAUTOTUNE_DTYPE_BF16=1",
            "-DAUTOTUNE_DTYPE_BYTES=2"]
        try:
            cubin = nvrtc_compile(source, options, args.arch)
        except RuntimeError as error:
            print(error, file=sys.stderr)
            continue
        shared = launch_of(config, 1, config["BN"], device.multi_processor_count)[2]
        configs.append((config, driver.load(cubin, "gemm_bf16", shared)))

    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        per_set = (m * k + n * k + m * n) * 2
        sets = max(1, min(64, math.ceil(2 * l2_bytes / per_set)))
        gen = torch.Generator(device="cuda").manual_seed(1)
        a = [torch.rand(m, k, device="cuda", generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
             for _ in range(sets)]
        b = [torch.rand(n, k, device="cuda", generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
             for _ in range(sets)]
        c = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        alpha = 1.0 / math.sqrt(k)

        def cublas(i):
            torch.matmul(a[i], b[i].t(), out=c[i])

        cublas_us = time_graph(torch, cublas, sets, l2_bytes, per_set)
        cublas(0)
        expected = c[0].float() * float(alpha)
        flops = 2.0 * m * n * k
        for config, kernel in configs:
            ragged_n = config["WGMMA"] == 3 and config["SPLIT_K"] == 1  # the TMA takes it
            if (n % config["BN"] and not ragged_n) or k % (config["BK"] * config["SPLIT_K"]):
                continue
            grid, block, shared = launch_of(config, m, n, device.multi_processor_count)
            work = [torch.zeros(workspace_floats(m, n, config), device="cuda",
                                dtype=torch.float32) for _ in range(sets)]
            set_args = [gemm_args(driver, config, a[i], b[i], c[i], work[i], alpha)
                        for i in range(sets)]

            def tuned(i, kernel=kernel, grid=grid, block=block, shared=shared, args=set_args):
                driver.launch(kernel, grid, block, shared, torch.cuda.current_stream().cuda_stream,
                              args[i])

            c[0].zero_()
            tuned(0)
            torch.cuda.synchronize()
            error = ((c[0].float() - expected).abs().max()
                     / expected.abs().max().clamp_min(1e-6)).item()
            us = time_graph(torch, tuned, sets, l2_bytes, per_set)
            rows.append({"M": m, "N": n, "K": k, "config": config, "us": us,
                         "cublas_us": cublas_us, "tflops": flops / us / 1e6,
                         "cublas_tflops": flops / cublas_us / 1e6, "of_cublas": cublas_us / us,
                         "max_rel_error": error})
            del work, set_args
        del a, b, c
        torch.cuda.empty_cache()

    print(f"{'M':>6} {'N':>6} {'K':>6} {'µs':>9} {'cuBLAS µs':>9} {'TFLOP/s':>8} {'cuBLAS':>7} "
          f"{'of cuBLAS':>9} {'rel err':>8}  config")
    for r in rows:
        cfg = " ".join(f"{p}={r['config'][p]}" for p in PARAMS)
        print(f"{r['M']:>6} {r['N']:>6} {r['K']:>6} {r['us']:>9.2f} {r['cublas_us']:>9.2f} "
              f"{r['tflops']:>8.1f} {r['cublas_tflops']:>7.1f} {100 * r['of_cublas']:>8.1f}% "
              f"{r['max_rel_error']:>8.1e}  {cfg}")
    print(f"device: {device.name}; torch {torch.__version__}; arch {args.arch}; "
          f"source {os.path.relpath(args.source, REPO)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device.name, "rows": rows}, f, indent=1)
    return 1 if any(not r["max_rel_error"] < 0.02 for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
