#!/usr/bin/env python3
"""What a Python inference server's start-up lookups cost: autotune_client's
startup_lookup for N (family, problem) pairs with cubins, against the real
daemon, as bench/startup_bench.cc measures the C++ client's.

The daemon (autotuned, --kernels none --gpus none, a process of its own on a
Unix socket) is given N synthetic entries, each with a cubin of its own
(autotune-make-sample --synthetic-entries N: the vector_scale family,
distinct problems, filler cubins that are stored and moved but never
loaded). Then, round after round, three paths take turns:

  service          startup_lookup with an empty local cache: the first start
                   on a host (answers and cubins fetched, then written to the
                   local cache)
  service + local  the same daemon and the local cache the first path left:
                   a restart (answers from the service, cubins from the cache)
  local, down      that local cache alone, the daemon's address a socket
                   nobody listens on

A start is timed from making the StartupLookup (a server's start makes its
own) to the answers in hand; the local cache's writes that follow, behind
the answers, are waited for (close()) outside that time and reported on
their own, as autotune-bench-startup does. Every
answer is checked: EXACT, from the expected source, with a cubin whose
sha256 is the entry's. Medians and maxima over the rounds are printed; the
goals (issue "PyTorch inference servers"): a service start under 100 ms, a
local-cache start under 30 ms.

  python3 bench/python_startup.py [--entries 1000] [--rounds 20] [--json FILE]

Needs the build tree's autotuned, autotune and autotune-make-sample (the
environment variables of client/python/tests/support.py name others) and a
python3 that imports grpcio and protobuf (Debian's /usr/bin/python3).
Exit status: 0 when every answer was right, 1 otherwise.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(REPO / "client" / "python" / "tests"))

import support  # noqa: E402  (the daemon and binaries of the Python client's tests)

import autotune_client as at  # noqa: E402
from autotune_client.lookups import sha256_hex  # noqa: E402
from autotune_client.messages import pb  # noqa: E402
from google.protobuf import json_format  # noqa: E402

PATHS = ("service", "service + local", "local, down")
GOALS_MS = {"service": 100.0, "service + local": 100.0, "local, down": 30.0}


def requests_of(bundle_path):
    """One LookupRequest per entry of the bundle: its family, problem and device."""
    bundle = json_format.Parse(Path(bundle_path).read_text(), pb.CacheBundle())
    requests = []
    for entry in bundle.entries:
        request = pb.LookupRequest(family=entry.family)
        request.problem.CopyFrom(entry.problem)
        request.device.CopyFrom(entry.device)
        requests.append(request)
    return requests


def start(requests, address, local):
    """One start: (milliseconds to the answers, milliseconds of the writes behind, answers)."""
    began = time.perf_counter()
    lookup = at.StartupLookup(address=address, deadline=10.0, local_cache=local)
    answers = lookup.lookup_all(requests)
    answered = time.perf_counter()
    lookup.close()
    return 1000.0 * (answered - began), 1000.0 * (time.perf_counter() - answered), answers


def check(answers, source):
    """None when every answer is EXACT from `source` with its entry's cubin, else why not."""
    for i, answer in enumerate(answers):
        if answer.error is not None:
            return f"answer {i}: {answer.error}"
        result = answer.result
        if result.match != at.Match.EXACT or answer.source != source:
            return f"answer {i} is not EXACT from {source}: {answer.note}"
        if result.cubin is None or sha256_hex(result.cubin) != result.response.entry.binary_sha256:
            return f"answer {i} has no valid cubin: {answer.note}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--cubin-bytes", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", help="write the medians and maxima here")
    args = parser.parse_args()
    missing = support.missing_binaries()
    if missing:
        sys.exit(f"python_startup: build these first: {', '.join(map(str, missing))}")

    with tempfile.TemporaryDirectory(prefix="autotune-pystart-") as scratch:
        scratch = Path(scratch)
        bundle = scratch / "bundle.json"
        made = support.run([str(support.MAKE_SAMPLE), "--synthetic-entries", str(args.entries),
                            "--cubin-bytes", str(args.cubin_bytes), "--out", str(bundle)])
        if made.returncode != 0:
            sys.exit(f"python_startup: autotune-make-sample failed: {made.stderr}")
        daemon = support.Daemon(scratch)
        daemon.start()
        try:
            imported = support.run([str(support.AUTOTUNE_CLI), "--server", daemon.address,
                                    "import", str(bundle)], timeout=300)
            if imported.returncode != 0:
                sys.exit(f"python_startup: autotune import failed: {imported.stderr}")
            requests = requests_of(bundle)
            down = f"unix://{scratch / 'nobody.sock'}"
            ms = {path: [] for path in PATHS}
            writes_ms = {path: [] for path in PATHS}
            for round_number in range(args.rounds):
                local = scratch / f"local-{round_number}"
                for path, address, source in (
                        ("service", daemon.address, "service"),
                        ("service + local", daemon.address, "service"),
                        ("local, down", down, "local cache")):
                    took, writes, answers = start(requests, address, str(local))
                    wrong = check(answers, source)
                    if wrong:
                        print(f"python_startup: {path}, round {round_number}: {wrong}",
                              file=sys.stderr)
                        return 1
                    ms[path].append(took)
                    writes_ms[path].append(writes)
        finally:
            daemon.stop()

    print(f"{'path':<16} {'median ms':>10} {'max ms':>8} {'writes behind':>14}  goal")
    rows = {}
    for path in PATHS:
        median, worst = statistics.median(ms[path]), max(ms[path])
        writes = statistics.median(writes_ms[path])
        goal = GOALS_MS[path]
        rows[path] = {"median_ms": median, "max_ms": worst, "writes_behind_median_ms": writes,
                      "goal_ms": goal}
        print(f"{path:<16} {median:>10.1f} {worst:>8.1f} {writes:>11.1f} ms  every start < "
              f"{goal:.0f} ms: {'met' if worst < goal else 'MISSED'}")
    print(f"{args.entries} problems with {args.cubin_bytes}-byte cubins, {args.rounds} rounds; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"entries": args.entries, "rounds": args.rounds, "paths": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
