#!/usr/bin/env python3
"""Compares the outcomes of warmup jobs (autotune warmup --json files).

  tuning_compare.py stability JOB.json JOB.json ...
      Per problem, the configs the runs chose: the same in every run, or
      the runs with a clear winner agree and every run that declared a tie
      chose within 1 % of its own fastest candidate (its margin); anything
      else DIFFERS. Also the spread of the chosen medians
      across runs. Exit 1 when a problem differs.

  tuning_compare.py oracle JOB.json (--cli 'autotune --server unix:///...' | --medians FILE)
      Per problem of JOB, the chosen config's median as measured by an oracle
      job (every valid variant timed at length in one serial phase, on the
      daemon the --cli command talks to, read with `autotune show --json`;
      or from a FILE an earlier --save wrote) against the oracle's best.
      --save FILE keeps the oracle's medians. Exit 1 when a choice is more
      than --limit (default 2 %) slower than the oracle's best.

  tuning_compare.py contention JOB.json [--expect-contended] [--expect-waited]
      What a job saw of other processes: the time it waited for a quiet GPU,
      the screens that began beside another process, the entries marked
      CONTENDED and what they say. Exit 1 when an expectation does not hold
      (every entry CONTENDED; a wait for a quiet GPU).

Medians and gaps are printed as a table; numbers are from the files and the
oracle's stored measurements, nothing else.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys


def dims_text(problem):
    return ",".join(f"{k}={int(v)}" for k, v in sorted(problem.get("dims", {}).items()))


def problem_key(report):
    return (report["family"], dims_text(report["problem"]), report["problem"]["dtype"])


def config_text(config):
    return " ".join(f"{k}={int(v)}" for k, v in sorted(config.get("params", {}).items()))


def entries(job_path):
    with open(job_path) as f:
        job = json.load(f)
    out = {}
    for report in job.get("reports", []):
        entry = report.get("entry")
        if entry and entry.get("config"):
            out[problem_key(report)] = entry
    return job, out


def stability(paths):
    runs = [entries(p)[1] for p in paths]
    keys = sorted(set().union(*[r.keys() for r in runs]))
    differs = 0
    spreads = []
    print(f"{'problem':58} {'verdict':16} configs (median us, tie) per run")
    for key in keys:
        chosen = [r.get(key) for r in runs]
        if any(c is None for c in chosen):
            verdict = "MISSING"
        else:
            configs = {config_text(c["config"]) for c in chosen}
            medians = [c["timing"]["median_us"] for c in chosen]
            spreads.append(max(medians) / min(medians) - 1)
            # Runs with a clear winner must agree; a run that declared a tie
            # must have chosen within 1 % of its own fastest candidate (its
            # margin).
            clear = {config_text(c["config"]) for c in chosen if not c.get("tie")}
            ties_close = all(c.get("margin", 0) >= -0.01 for c in chosen if c.get("tie"))
            if len(configs) == 1:
                verdict = "same"
            elif len(clear) <= 1 and ties_close:
                verdict = "tie within 1%"
            else:
                verdict = "DIFFERS"
        if verdict in ("DIFFERS", "MISSING"):
            differs += 1
        cells = [
            "-" if c is None else
            f"{config_text(c['config'])} ({c['timing']['median_us']:.2f}{', tie %+.2f%%' % (c.get('margin', 0) * 100) if c.get('tie') else ''})"
            for c in chosen]
        print(f"{' '.join(key):58} {verdict:16} " + " | ".join(cells))
    print(f"stability: {len(keys) - differs} of {len(keys)} problems the same or a declared tie "
          f"within 1% over {len(runs)} runs; chosen medians spread across runs: median "
          f"{statistics.median(spreads) * 100:.2f}%, max {max(spreads) * 100:.2f}%")
    return 1 if differs else 0


def oracle_medians(cli, key):
    family, dims, dtype = key
    shown = subprocess.run(shlex.split(cli) + ["show", family, "--dims", dims, "--dtype", dtype,
                                               "--json"], capture_output=True, text=True)
    if shown.returncode != 0:
        return None
    medians = {}
    for m in json.loads(shown.stdout).get("measurements", []):
        if m.get("phase") == "SERIAL_VALIDATION" and m.get("status") == "OK":
            medians[config_text(m["config"])] = m["timing"]["median_us"]
    return medians


def oracle(path, cli, medians_file, save, limit):
    _, chosen = entries(path)
    saved = {}
    if medians_file:
        with open(medians_file) as f:
            saved = json.load(f)
    gaps = []
    failed = 0
    kept = {}
    print(f"{'problem':58} {'chosen':40} {'oracle best':40} {'variants':>8} {'gap':>7}")
    for key, entry in sorted(chosen.items()):
        medians = saved.get(" ".join(key)) if medians_file else oracle_medians(cli, key)
        if not medians:
            print(f"{' '.join(key):58} the oracle has no serial timings for it")
            failed += 1
            continue
        kept[" ".join(key)] = medians
        mine = config_text(entry["config"])
        best = min(medians, key=medians.get)
        if mine not in medians:
            print(f"{' '.join(key):58} {mine:40} not among the oracle's {len(medians)} variants")
            failed += 1
            continue
        gap = medians[mine] / medians[best] - 1
        gaps.append(gap)
        flag = "" if gap <= limit else "  OVER"
        failed += gap > limit
        print(f"{' '.join(key):58} {mine + f' {medians[mine]:.2f}':40} "
              f"{best + f' {medians[best]:.2f}':40} {len(medians):>8} {gap * 100:6.2f}%{flag}")
    if gaps:
        print(f"oracle: {sum(g <= limit for g in gaps)} of {len(chosen)} choices within "
              f"{limit * 100:.0f}% of the oracle's best; within 1%: {sum(g <= 0.01 for g in gaps)}; "
              f"median gap {statistics.median(gaps) * 100:.2f}%, max {max(gaps) * 100:.2f}%")
    if save:
        with open(save, "w") as f:
            json.dump(kept, f, indent=1, sort_keys=True)
    return 1 if failed else 0


def contention(path, expect_contended, expect_waited):
    with open(path) as f:
        job = json.load(f)
    reports = job.get("reports", [])
    waited = job.get("timing", {}).get("waited_s", 0)
    screens = [r for r in reports if r.get("screen_contention")]
    with_entry = [r["entry"] for r in reports if r.get("entry")]
    contended = [e for e in with_entry if e.get("contended")]
    print(f"contention {path.split('/')[-1]}: waited {waited:.1f} s for a quiet GPU; "
          f"{len(screens)} of {len(reports)} screens began beside another process"
          f"{' (' + screens[0]['screen_contention'] + ')' if screens else ''}; "
          f"{len(contended)} of {len(with_entry)} entries CONTENDED"
          f"{' (' + contended[0].get('contention', '') + ')' if contended else ''}")
    failed = 0
    if expect_contended and (not with_entry or len(contended) != len(with_entry)):
        print("  expected every entry CONTENDED")
        failed = 1
    if expect_waited and not waited > 0:
        print("  expected a wait for a quiet GPU")
        failed = 1
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stability")
    s.add_argument("jobs", nargs="+")
    o = sub.add_parser("oracle")
    o.add_argument("job")
    o.add_argument("--cli")
    o.add_argument("--medians")
    o.add_argument("--save")
    o.add_argument("--limit", type=float, default=0.02)
    c = sub.add_parser("contention")
    c.add_argument("job")
    c.add_argument("--expect-contended", action="store_true")
    c.add_argument("--expect-waited", action="store_true")
    args = parser.parse_args()
    if args.command == "stability":
        return stability(args.jobs)
    if args.command == "contention":
        return contention(args.job, args.expect_contended, args.expect_waited)
    if not args.cli and not args.medians:
        parser.error("oracle needs --cli or --medians")
    return oracle(args.job, args.cli, args.medians, args.save, args.limit)


if __name__ == "__main__":
    sys.exit(main())
