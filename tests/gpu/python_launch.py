"""Launches tuned rmsnorm and softmax kernels (and one untuned shape, its
default config compiled here) on PyTorch tensors through
autotune_client.TunedKernel and checks them against PyTorch (run by
tests/gpu/python_launch.sh with the daemon's address and a local cache
folder). Prints one line per kernel and the call's cost; exits 1 on any
wrong result."""

import sys
import time

import torch

import autotune_client as at

ADDRESS, LOCAL = sys.argv[1], sys.argv[2]
# No CUDA work before the first load: the launcher makes torch's context
# current itself (torch creates it at the first tensor on the GPU).
device = torch.cuda.get_device_name()
# Tuned (EXACT), and one shape no job tuned (hidden 2048: a MISS whose
# default config is compiled here from its recipe).
shapes = [("rmsnorm", 64, 4096), ("rmsnorm", 4096, 4096), ("softmax", 4096, 8192), ("rmsnorm", 64, 2048)]
answers = at.startup_lookup(
    [at.Lookup(family, {"rows": rows, "hidden": hidden}, "bf16") for family, rows, hidden in shapes],
    address=ADDRESS,
    local_cache=LOCAL,
    device=device,
    deadline=10.0,
    recipes=True,
)


def reference(family, x, w):
    if family == "rmsnorm":
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).bfloat16()
    return torch.softmax(x.float(), dim=-1).bfloat16()


failed = 0
for (family, rows, hidden), answer in zip(shapes, answers):
    label = f"{family} rows={rows} hidden={hidden} bf16"
    if answer.error is not None:
        print(f"FAILED {label}: {answer.error}")
        failed += 1
        continue
    result = answer.result
    kernel = at.TunedKernel.load(result, label=label)
    torch.manual_seed(0)
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(hidden, device="cuda", dtype=torch.bfloat16) + 0.5
    y = torch.empty_like(x)
    tensors = (x, w, y) if family == "rmsnorm" else (x, y)
    kernel(*tensors)
    expected = reference(family, x, w)
    eager_error = (y.float() - expected.float()).abs().max().item()
    # The same call captured in a CUDA graph, replayed into a cleared output.
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kernel(*tensors)  # warm-up on the capture stream
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            kernel(*tensors)
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    graph_error = (y.float() - expected.float()).abs().max().item()
    # The Python cost of a call: launches of the loaded kernel, host time.
    calls = 2000
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        kernel(*tensors)
    host_us = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    # As a custom op inside a torch.compile'd function (the first kernel
    # only: each compile costs seconds).
    compile_error = 0.0
    if family == "rmsnorm" and rows == 64 and hidden == 4096:
        op = kernel.custom_op(f"autotune::{family}_{rows}x{hidden}", outputs=[len(tensors) - 1])

        def compiled_step(*args):
            op(list(args))
            return args[-1] * 1  # a PyTorch op after it, in the same graph

        y.zero_()
        compiled = torch.compile(compiled_step)(*tensors)
        torch.cuda.synchronize()
        compile_error = (compiled.float() - expected.float()).abs().max().item()
    tolerance = 0.02 if family == "rmsnorm" else 0.01
    ok = eager_error <= tolerance and graph_error <= tolerance and compile_error <= tolerance
    failed += 0 if ok else 1
    print(
        f"{'OK' if ok else 'WRONG'} {label}: {result.match.name}"
        f"{' (default config compiled here)' if kernel.compiled_here else ''} "
        f"{' '.join(f'{k}={v}' for k, v in sorted((result.config or result.default_config).items()))}; max error eager "
        f"{eager_error:.4f}, graph {graph_error:.4f}, torch.compile {compile_error:.4f}; "
        f"{host_us:.1f} us of host time a call"
    )
print(f"python_launch: {len(shapes) - failed} of {len(shapes)} kernels right on {device}")
sys.exit(1 if failed else 0)
