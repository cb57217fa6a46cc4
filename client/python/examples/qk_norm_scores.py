"""A piece of a transformer block with QK-norm (as in Qwen3 and OLMo 2), its
ops swapped for tuned kernels at start-up:

    q = rmsnorm(q_raw) * w          rmsnorm      [tokens, head_dim]
    s = q k^T / sqrt(head_dim)      gemm_bf16    [tokens, context] (alpha = 1/sqrt(K))
    p = softmax(s)                  softmax      over the context
    o = p v                         PyTorch

One start-up lookup resolves the three kernels (the service, else the local
cache, else the default config compiled here); the block then calls them on
its tensors. It checks the tuned block against the eager one and times both
and torch.compile's, with CUDA events, median of the runs:

    python3 qk_norm_scores.py --server unix:///run/autotune.sock [--tokens 64 --context 4096]

Exit status 0 when the outputs agree.
"""

import argparse
import statistics
import sys

import torch

import autotune_client as at


class QkNormScores(torch.nn.Module):
    """The eager block."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(head_dim, dtype=torch.bfloat16) + 0.5)

    def forward(self, q_raw: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        x = q_raw.float()
        q = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight.float()).bfloat16()
        scores = (q @ k.T).float() / q.shape[-1] ** 0.5
        p = torch.softmax(scores, dim=-1).bfloat16()
        return p @ v


class TunedQkNormScores(torch.nn.Module):
    """The same block on tuned kernels, resolved once for its shapes."""

    def __init__(self, eager: QkNormScores, tokens: int, context: int, server: str, local_cache: str) -> None:
        super().__init__()
        head_dim = eager.weight.shape[0]
        self.weight = eager.weight
        lookups = [
            at.Lookup("rmsnorm", {"rows": tokens, "hidden": head_dim}, "bf16"),
            at.Lookup("gemm_bf16", {"M": tokens, "N": context, "K": head_dim}, "bf16"),
            at.Lookup("softmax", {"rows": tokens, "hidden": context}, "bf16"),
        ]
        answers = at.startup_lookup(
            lookups, address=server, local_cache=local_cache, device=torch.cuda.get_device_name(),
            deadline=5.0, recipes=True,
        )  # fmt: skip
        self.sources = []
        kernels = []
        for lookup, answer in zip(lookups, answers):
            if answer.error is not None:
                raise SystemExit(f"{lookup.family}: {answer.error}")
            kernel = at.TunedKernel.load(answer.result, label=lookup.family)
            kernels.append(kernel)
            self.sources.append(
                f"{lookup.family}: {answer.result.match.name} from {answer.source}"
                f"{', default config compiled here' if kernel.compiled_here else ''}"
            )
        self.rmsnorm, self.gemm, self.softmax = kernels
        # Buffers the kernels write, allocated once (gemm_bf16's workspace is
        # zeroed once and kept).
        workspace = self.gemm.buffers[3]
        self.q = torch.empty(tokens, head_dim, device="cuda", dtype=torch.bfloat16)
        self.scores = torch.empty(tokens, context, device="cuda", dtype=torch.bfloat16)
        self.p = torch.empty(tokens, context, device="cuda", dtype=torch.bfloat16)
        elements = 1
        for extent in workspace.shape:
            elements *= extent
        self.workspace = torch.zeros(elements, device="cuda", dtype=torch.float32)

    def forward(self, q_raw: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.rmsnorm(q_raw, self.weight, self.q)
        self.gemm(self.q, k, self.scores, self.workspace)
        self.softmax(self.scores, self.p)
        return self.p @ v


def median_us(step, runs: int = 200) -> float:
    for _ in range(10):
        step()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=None)
    parser.add_argument("--local-cache", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=128)
    args = parser.parse_args()
    torch.cuda.init()
    torch.manual_seed(0)
    eager = QkNormScores(args.head_dim).cuda()
    tuned = TunedQkNormScores(eager, args.tokens, args.context, args.server, args.local_cache)
    q_raw = torch.randn(args.tokens, args.head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(args.context, args.head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(args.context, args.head_dim, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        expected = eager(q_raw, k, v)
        got = tuned(q_raw, k, v)
        torch.cuda.synchronize()
        error = (got.float() - expected.float()).abs().max().item()
        scale = expected.float().abs().max().item()
        compiled = torch.compile(eager)
        compiled(q_raw, k, v)
        eager_us = median_us(lambda: eager(q_raw, k, v))
        compile_us = median_us(lambda: compiled(q_raw, k, v))
        tuned_us = median_us(lambda: tuned(q_raw, k, v))
    for line in tuned.sources:
        print(line)
    ok = error <= 0.02 * max(1.0, scale)
    print(
        f"{'OK' if ok else 'WRONG'} qk-norm scores, {args.tokens} tokens x {args.context} context, "
        f"head_dim {args.head_dim}, on {torch.cuda.get_device_name()}: max error {error:.4f} "
        f"(of {scale:.3f}); median us: eager {eager_us:.1f}, torch.compile {compile_us:.1f}, "
        f"tuned {tuned_us:.1f}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
