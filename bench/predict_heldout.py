#!/usr/bin/env python3
"""The held-out test of PREDICTED answers (bench/run_prediction_bench.sh).

  predict_heldout.py problems MANIFEST
      one line per problem of the manifest: "FAMILY DIMS DTYPE", DIMS as
      name=value,... (what `autotune lookup --dims` takes)
  predict_heldout.py score ANSWERS_DIR SHOW_DIR JOB_JSON
      one row per held-out problem: the answer its lookup gave before the
      problem was tuned (ANSWERS_DIR/<name>.json, `autotune lookup --json`),
      scored by the problem's own screen once tuned (SHOW_DIR/<name>.json,
      `autotune show --json`): the best screened median over the median of
      the answer's config (1 = the best); the family's default config beside
      it (the job's report, JOB_JSON). A config the screen did not time is
      "not screened". Then per family: the median score and how many are
      within 10% of their best, against the issue's floor (median >= 97%,
      18 of 20 within 10%).

Needs the generated autotune_pb2 (client/python) for the manifest.
"""
import itertools
import json
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "client", "python"))


def name_of(family, dims):
    return family + "_" + "_".join(f"{k}_{dims[k]}" for k in sorted(dims))


def problems(manifest_path):
    from google.protobuf import text_format

    from autotune_client import autotune_pb2 as pb

    manifest = text_format.Parse(open(manifest_path).read(), pb.Manifest())
    for item in manifest.items:
        names = [d.name for d in item.dims]
        for values in itertools.product(*[list(d.values) for d in item.dims]):
            for dtype in item.dtypes:
                dims = ",".join(f"{n}={v}" for n, v in zip(names, values))
                print(item.family, dims, pb.DType.Name(dtype).lower().replace("bfloat16", "bf16"))


def config_key(params):
    return tuple(sorted((k, int(v)) for k, v in params.items()))


def score(answers_dir, show_dir, job_json):
    job = json.load(open(job_json))
    defaults = {}
    for report in job.get("reports", []):
        dims = {k: int(v) for k, v in report["problem"]["dims"].items()}
        defaults[name_of(report["family"], dims)] = report.get("default_config", {}).get("params")
    rows = []
    for file in sorted(os.listdir(answers_dir)):
        name = file[:-len(".json")]
        answer = json.load(open(os.path.join(answers_dir, file)))
        show_path = os.path.join(show_dir, file)
        if not os.path.exists(show_path):
            rows.append((name, answer.get("match", "?"), None, None, "not tuned"))
            continue
        show = json.load(open(show_path))
        medians = {}
        for m in show.get("measurements", []):
            if m.get("phase") == "SCREEN" and m.get("status") == "OK":
                medians[config_key(m["config"]["params"])] = m["timing"]["median_us"]
        best = min(medians.values()) if medians else None
        config = answer.get("entry", {}).get("config", {}).get("params")
        if answer.get("match") not in ("PREDICTED", "EXACT", "NEAREST"):
            config = answer.get("default_config", {}).get("params")
        got = medians.get(config_key(config)) if config else None
        entry = show.get("entry", {})
        tuned = {k: int(v) for k, v in entry.get("problem", {}).get("dims", {}).items()}
        default = defaults.get(name_of(entry.get("family", ""), tuned))
        default_us = medians.get(config_key(default)) if default else None
        rows.append((name, answer.get("match", "?"),
                     best / got if best and got else None,
                     best / default_us if best and default_us else None,
                     " ".join(f"{k}={v}" for k, v in sorted((config or {}).items()))))
    print(f"{'problem':<42} {'answer':<10} {'score':>7} {'default':>8}  config")
    for name, match, s, d, config in rows:
        fmt = lambda x: f"{100 * x:6.1f}%" if x is not None else "    n/a"  # noqa: E731
        print(f"{name:<42} {match:<10} {fmt(s):>7} {fmt(d):>8}  {config}")
    ok = True
    for family in sorted({r[0].split("_")[0] for r in rows}):
        mine = [r for r in rows if r[0].split("_")[0] == family]
        scores = [r[2] for r in mine if r[2] is not None]
        predicted = sum(1 for r in mine if r[1] == "PREDICTED")
        within = sum(1 for s in scores if s >= 1 / 1.1)
        defaults_scored = [r[3] for r in mine if r[3] is not None]
        median = statistics.median(scores) if scores else 0
        print(f"{family}: {len(mine)} problems, {predicted} PREDICTED, {len(scores)} scored: median "
              f"{100 * median:.1f}%, {within} within 10%; default median "
              f"{100 * statistics.median(defaults_scored) if defaults_scored else 0:.1f}%")
        if median < 0.97 or within < 0.9 * len(mine):
            ok = False
    print("floor (median >= 97%, 90% of problems within 10%):", "met" if ok else "NOT met")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "problems":
        problems(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "score":
        score(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
