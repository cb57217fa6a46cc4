#!/usr/bin/env python3
"""Reads a tuned-config file the way vLLM reads its fused-MoE configs.

    vllm_config_reader.py FILE M

The keys are batch sizes as strings; the config used for a batch of M is
the one whose key is nearest to M. Prints that config as JSON with sorted
keys, e.g. {"BLOCK": 128, "ELEMS_PER_THREAD": 4}.
"""
import json
import sys


def main() -> int:
    path, m = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        configs = {int(key): value for key, value in json.load(f).items()}
    nearest = min(configs.keys(), key=lambda key: abs(key - m))
    print(json.dumps(configs[nearest], sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
