#!/usr/bin/env python3
"""Compares the outcomes of warmup jobs (autotune warmup --json files).

  tuning_compare.py stability JOB.json JOB.json ... [--band 0.005] [--floor 0.97]
      Per problem, the configs the runs chose: the same in every run, or
      the runs with a clear winner agree and every run that declared a tie
      states a bound within the band (the chosen config at most that much
      slower than any candidate it timed: Entry.bound); anything else
      DIFFERS. Also each run's bound and the spread of the chosen medians
      across runs. Exit 1 when fewer than --floor of the problems are the
      same or a declared tie within the band.

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

  tuning_compare.py screens DIR DIR ...
      The screens of one manifest tuned cold in several runs (each DIR the
      `autotune show --json` files of one run, as run_tuning_bench.sh
      SCREENS=1 keeps them): how far one variant's screen median moves from
      run to run (the spread of log(median in run a / median in run b) over
      the variants both screened, all of them and the 16 fastest), and for
      each run's choice whether the other runs screened it and took it into
      their serial phase. Information only: exit 0 unless a file is unreadable.

Medians and gaps are printed as a table; numbers are from the files and the
oracle's stored measurements, nothing else.
"""
import argparse
import glob
import gzip
import json
import math
import os
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


def stability(paths, band=0.005, floor=0.97):
    runs = [entries(p)[1] for p in paths]
    keys = sorted(set().union(*[r.keys() for r in runs]))
    differs = 0
    spreads = []
    print(f"{'problem':58} {'verdict':16} config (median us, tie, bound) per run")
    for key in keys:
        chosen = [r.get(key) for r in runs]
        if any(c is None for c in chosen):
            verdict = "MISSING"
        else:
            configs = {config_text(c["config"]) for c in chosen}
            medians = [c["timing"]["median_us"] for c in chosen]
            spreads.append(max(medians) / min(medians) - 1)
            # Runs with a clear winner must agree; a run that declared a tie
            # must state a bound within the band (entries of older daemons
            # without a bound: their margin, within 1 %).
            clear = {config_text(c["config"]) for c in chosen if not c.get("tie")}

            def tie_within(c):
                if "choice" in c:
                    return 0 <= c.get("bound", 0) <= band + 1e-12
                return c.get("margin", 0) >= -0.01
            ties_close = all(tie_within(c) for c in chosen if c.get("tie"))
            if len(configs) == 1:
                verdict = "same"
            elif len(clear) <= 1 and ties_close:
                verdict = f"tie within {band * 100:.1f}%"
            else:
                verdict = "DIFFERS"
        if verdict in ("DIFFERS", "MISSING"):
            differs += 1

        def cell(c):
            if c is None:
                return "-"
            notes = [f"{c['timing']['median_us']:.2f}"]
            if c.get("tie"):
                notes.append(f"tie({c.get('tied', 0)})")
            if "choice" in c:
                notes.append("bound ?" if c.get("bound", 0) < 0 else
                             f"bound {c.get('bound', 0) * 100:.2f}%")
            return f"{config_text(c['config'])} ({', '.join(notes)})"
        print(f"{' '.join(key):58} {verdict:16} " + " | ".join(cell(c) for c in chosen))
    agree = len(keys) - differs
    share = agree / len(keys) if keys else 0
    print(f"stability: {agree} of {len(keys)} problems ({share * 100:.1f}%) the same or a declared "
          f"tie within {band * 100:.1f}% over {len(runs)} runs (floor {floor * 100:.0f}%); chosen "
          f"medians spread across runs: median {statistics.median(spreads or [0]) * 100:.2f}%, "
          f"max {max(spreads or [0]) * 100:.2f}%")
    return 0 if keys and share >= floor else 1


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


def load_screens(directory):
    """{file name: (screen medians by config, serial candidates, entry config)}."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json.gz"))):
        with gzip.open(path, "rt") as f:
            shown = json.load(f)
        screen, serial = {}, set()
        for m in shown.get("measurements", []):
            if m.get("status") != "OK":
                continue
            config = config_text(m.get("config", {}))
            median = m.get("timing", {}).get("median_us", 0)
            if m.get("phase") == "SCREEN" and median > 0:
                screen[config] = median
            elif m.get("phase") == "SERIAL_VALIDATION":
                serial.add(config)
        entry = shown.get("entry") or {}
        runs[os.path.basename(path)] = (screen, serial,
                                        config_text(entry.get("config", {})) if entry else None)
    return runs


def spread(values):
    if len(values) < 2:
        return float("nan")
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def screens(directories):
    runs = [load_screens(d) for d in directories]
    problems = sorted(set().union(*[set(r) for r in runs]))
    print(f"{'problem':50} {'common':>7} {'sigma all':>10} {'sigma top16':>12}  "
          "each run's choice in the others: screened (rank) / serial candidate")
    pooled_all, pooled_top, missed, pairs = [], [], 0, 0
    for problem in problems:
        have = [r[problem] for r in runs if problem in r]
        logs_all, logs_top = [], []
        for a in range(len(have)):
            for b in range(a + 1, len(have)):
                sa, sb = have[a][0], have[b][0]
                top = set(sorted(sa, key=sa.get)[:16]) | set(sorted(sb, key=sb.get)[:16])
                for config in set(sa) & set(sb):
                    d = math.log(sa[config] / sb[config])
                    logs_all.append(d)
                    if config in top:
                        logs_top.append(d)
        # A difference of two runs' noise: sigma of one run is that / sqrt(2).
        sigma_all = spread(logs_all) / math.sqrt(2)
        sigma_top = spread(logs_top) / math.sqrt(2)
        pooled_all += logs_all
        pooled_top += logs_top
        cells = []
        for a, (_, _, chosen) in enumerate(have):
            if chosen is None:
                continue
            for b, (screen_b, serial_b, _) in enumerate(have):
                if a == b:
                    continue
                pairs += 1
                if chosen in screen_b:
                    rank = 1 + sorted(screen_b, key=screen_b.get).index(chosen)
                    in_serial = chosen in serial_b
                    missed += 0 if in_serial else 1
                    cells.append(f"{a + 1}->{b + 1}: #{rank}{'' if in_serial else ' not serial'}")
                else:
                    missed += 1
                    cells.append(f"{a + 1}->{b + 1}: unscreened")
        shown_cells = [c for c in cells if not c.endswith(": #1")]
        print(f"{problem[:50]:50} {len(logs_all):7d} {sigma_all * 100:9.2f}% {sigma_top * 100:11.2f}%  "
              f"{', '.join(shown_cells) if shown_cells else 'every choice first in every run'}")
    print(f"pooled: screen noise of one run (sigma of log median) {spread(pooled_all) / math.sqrt(2) * 100:.2f}% "
          f"over all common variants, {spread(pooled_top) / math.sqrt(2) * 100:.2f}% over the 16 fastest; "
          f"a run's choice missing from another run's serial candidates: {missed} of {pairs}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stability")
    s.add_argument("jobs", nargs="+")
    s.add_argument("--band", type=float, default=0.005)
    s.add_argument("--floor", type=float, default=0.97)
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
    sc = sub.add_parser("screens")
    sc.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    if args.command == "screens":
        return screens(args.dirs)
    if args.command == "stability":
        return stability(args.jobs, args.band, args.floor)
    if args.command == "contention":
        return contention(args.job, args.expect_contended, args.expect_waited)
    if not args.cli and not args.medians:
        parser.error("oracle needs --cli or --medians")
    return oracle(args.job, args.cli, args.medians, args.save, args.limit)


if __name__ == "__main__":
    sys.exit(main())
