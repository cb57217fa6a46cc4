#!/usr/bin/env python3
"""A foreign load on GPU 0 for the contention benchmark: bf16 matrix
products (8192 x 8192) and 1 GiB device copies, back to back, for
--seconds. Prints "gpu_load pid N" when the load runs and "gpu_load done"
at the end. Needs PyTorch with CUDA.
"""
import argparse
import os
import time

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    src = torch.empty(1 << 29, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    torch.cuda.synchronize()
    print(f"gpu_load pid {os.getpid()}", flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for _ in range(4):
            a @ b
            dst.copy_(src)
        torch.cuda.synchronize()
    print("gpu_load done", flush=True)


if __name__ == "__main__":
    main()
