"""The plain-text report of a finished tuning job, with the columns and
lines `autotune warmup` prints (client/cli/warmup_report.h), headed by the
job's state, counts and error:

    job 3f2a... SUCCEEDED: 2 problems, 40 variants: 40 compiled, 40 measured: 40 ok

    FAMILY   DIMS                 DTYPE  CONFIG         MEDIAN_US   GB/S  %LIMIT  TFLOP/S  ...
    rmsnorm  hidden=4096,rows=64  bf16   ITEMS=8 VEC=4       3.10  338.2     10%     0.42  ...
    ...
    variants: OK 40 (40 screened)
    time: compile 12 s · screen 41 s · serial 30 s · total 1 min 29 s

Per problem: the chosen config, its median time, throughput (and the share
of the device's measured copy rate), the speedup over the family's default
config, and flags: "tie(N)", "bound(0.31%)" (what the choice guarantees,
Entry.bound), "CONTENDED", "THROTTLED", "cached", "REGRESSION",
"kept-clean-entry", "screen-contended", or the error of a problem left
without an entry. A number the daemon left at 0 is unknown and prints
blank. A compile-only job measured nothing: the report says what it
compiled, for which architecture, and lists only the problems that failed.

Pure functions of the message.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from autotune_client.jobs import state_name
from autotune_client.lookups import dtype_name, format_dims
from autotune_client.messages import pb

_DOT = " \u00b7 "  # " · "


def job_report(job: pb.Job) -> str:
    """The report of `job`, lines ending in "\\n"."""
    compile_only = job.spec.options.compile_only
    lines = [f"job {job.id} {state_name(job.state)}: {format_job_counts(job.counts)}"]
    if job.error:
        lines.append(f"error: {job.error}")
    reports = [r for r in job.reports if not compile_only or (r.error and not r.HasField("entry"))]
    if reports:
        lines.append("")
        lines += _table(
            ["FAMILY", "DIMS", "DTYPE", "CONFIG", "MEDIAN_US", "GB/S", "%LIMIT", "TFLOP/S",
             "SPEEDUP", "FLAGS"],
            {4, 5, 6, 7, 8},
            [_summary_row(job, report) for report in reports],
        )  # fmt: skip
    changed = [report for report in job.reports if report.HasField("previous")]
    if changed:
        lines += ["", "Changes against the cache"]
        lines += _table(
            ["FAMILY", "DIMS", "DTYPE", "OLD_US", "NEW_US", "OLD/NEW", "DIFFERS", "FLAGS"],
            {3, 4, 5},
            [_change_row(report) for report in changed],
        )
    summary = [
        line
        for line in (_compile_only_line(job), _status_line(job), _search_line(job), _time_line(job))
        if line
    ]
    if summary:
        lines.append("")
        lines += summary
    return "\n".join(lines) + "\n"


def _enum_name(enum: Any, value: int) -> str:
    """The name of a protobuf enum's value; its number when this client does
    not know it."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


def format_count(count: int) -> str:
    """2940 -> "2,940"."""
    return f"{count:,}"


def format_seconds(seconds: float) -> str:
    """0.42 -> "0.4 s", 41.3 -> "41 s", 125 -> "2 min 05 s", 3725 -> "1 h 02 min"."""
    if not seconds > 0:
        seconds = 0
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def format_job_counts(c: pb.JobCounts) -> str:
    """"2 problems, 48 variants: 48 compiled, 48 measured: 45 ok, 3 wrong result"."""
    text = f"{c.problems} problems"
    if c.cached_problems > 0:
        text += f" ({c.cached_problems} cached)"
    text += f", {c.variants} variants"
    if c.compiles > 0:
        text += f" ({c.compiles} distinct compiles)"
    text += f": {c.compiled} compiled"
    if c.compile_cache_hits > 0 or c.compile_errors > 0:
        text += f" ({c.compile_cache_hits} cache hits, {c.compile_errors} errors"
        if c.compile_timeouts > 0:
            text += f", {c.compile_timeouts} timeouts"
        text += ")"
    if c.measured > 0:
        text += f", {c.measured} measured: {c.ok} ok"
    for count, name in (
        (c.wrong_result, "wrong result"),
        (c.timeout, "timeout"),
        (c.fault, "fault"),
        (c.unsupported, "unsupported"),
    ):
        if count > 0:
            text += f", {count} {name}"
    return text


def format_config(params: Mapping[str, int]) -> str:
    """"BLOCK_V=64 THREADS=256": sorted by name, separated by spaces."""
    return format_dims(params).replace(",", " ")


def _known(template: str, value: float) -> str:
    return template.format(value) if value > 0 else ""


def _limit_percent(entry: pb.Entry) -> float:
    copy = entry.limits.copy_gbps
    achieved = entry.timing.achieved_gbps
    return 100 * achieved / copy if copy > 0 and achieved > 0 else 0.0


def _first_line(text: str, max_chars: int) -> str:
    line = text.split("\n", 1)[0]
    return line if len(line) <= max_chars else line[: max_chars - 3] + "..."


def _problem_cells(report: pb.ProblemReport) -> list[str]:
    return [report.family, format_dims(report.problem.dims), dtype_name(report.problem.dtype)]


def _summary_row(job: pb.Job, report: pb.ProblemReport) -> list[str]:
    row = _problem_cells(report)
    flags: list[str] = []
    if report.HasField("entry"):
        entry = report.entry
        timing = entry.timing
        row += [
            format_config(entry.config.params),
            _known("{:.2f}", timing.median_us),
            _known("{:.1f}", timing.achieved_gbps),
            _known("{:.0f}%", _limit_percent(entry)),
            _known("{:.2f}", timing.achieved_tflops),
        ]
        if entry.tie:
            flags.append(f"tie({entry.tied})")
        if entry.choice:
            flags.append("bound(?)" if entry.bound < 0 else f"bound({entry.bound * 100:.2f}%)")
        if entry.contended:
            flags.append("CONTENDED")
        if entry.throttled:
            flags.append("THROTTLED")
    else:
        row += [""] * 5
    row.append(_known("{:.2f}x", report.speedup))
    if report.cached:
        flags.append("cached")
    if report.regression:
        flags.append("REGRESSION")
    if report.kept_clean:
        flags.append("kept-clean-entry")
    if report.screen_contention:
        flags.append("screen-contended")
    if not report.HasField("entry"):
        if report.error:
            flags.append(f"error: {_first_line(report.error, 200)}")
        elif not job.spec.options.compile_only:
            flags.append("no entry")
    row.append(" ".join(flags))
    return row


def _change_row(report: pb.ProblemReport) -> list[str]:
    return _problem_cells(report) + [
        _known("{:.2f}", report.previous.timing.median_us),
        _known("{:.2f}", report.entry.timing.median_us),
        _known("{:.3f}x", report.previous_ratio),
        report.previous_differs,
        "REGRESSION" if report.regression else "",
    ]


def _table(header: list[str], right: set[int], rows: Sequence[list[str]]) -> list[str]:
    """Columns two spaces apart, `right` ones right-aligned, no trailing spaces."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        return "  ".join(cells).rstrip()

    return [line(header)] + [line(row) for row in rows]


def _compile_only_line(job: pb.Job) -> str:
    """What a compile-only job did and did not do; "" for one that measured."""
    if not job.spec.options.compile_only:
        return ""
    c = job.counts
    arch = f" for {job.arch}" if job.arch else ""
    return (
        f"compile-only{arch}: {format_count(c.compiled)} variants compiled, "
        f"{format_count(c.compile_cache_hits)} found compiled before, "
        f"{format_count(c.compile_errors)} failed; nothing was measured, so no entry was added "
        "or changed: lookups answer as before (MISS no-entry for a problem never measured "
        "here), and a tuning job that measures reuses these compiles"
    )


def _status_line(job: pb.Job) -> str:
    """"variants: OK 2,900 · WRONG_RESULT 12 (2,912 screened)": statuses in the
    enum's order, names this client does not know after them."""
    by_name: dict[str, int] = {}
    screened = carried = 0
    for report in job.reports:
        for name, count in report.status_counts.items():
            by_name[name] = by_name.get(name, 0) + count
        screened += report.screened
        carried += report.screens_carried
    if not by_name:
        return ""
    known = pb.VariantStatus.keys()

    def rank(name: str) -> tuple[int, str]:
        return (pb.VariantStatus.Value(name) if name in known else 1 << 20, name)

    parts = [f"{name} {format_count(by_name[name])}" for name in sorted(by_name, key=rank)]
    line = "variants: " + _DOT.join(parts)
    if screened > 0:
        line += f" ({format_count(screened)} screened"
        if carried > 0:
            line += f"; {format_count(carried)} screens carried from an older family version"
        line += ")"
    return line


def _search_line(job: pb.Job) -> str:
    """"search: model on 2 problems: 768 of 13,808 variants measured (5.6%),
    best found after 131 and 160"; "" when no report says."""
    problems: dict[str, int] = {}
    space = measured = 0
    found: list[str] = []
    for report in job.reports:
        if not report.HasField("search"):
            continue
        search = report.search
        strategy = _enum_name(pb.SearchStrategy, search.strategy).lower()
        problems[strategy] = problems.get(strategy, 0) + 1
        space += search.space
        measured += search.measured
        if search.best and len(found) < 8:
            found.append(format_count(search.best[-1].measured))
    if not problems:
        return ""
    strategies = [
        f"{name} on {format_count(count)} problem{'' if count == 1 else 's'}"
        for name, count in sorted(problems.items())
    ]
    line = (
        f"search: {_DOT.join(strategies)}: {format_count(measured)} of {format_count(space)} "
        "variants measured"
    )
    if space > 0 and measured < space:
        line += f" ({100 * measured / space:.1f}%)"
    if found:
        line += f", best found after {', '.join(found)}"
    return line


def _time_line(job: pb.Job) -> str:
    """"time: compile 12 s · screen 41 s · serial 30 s · total 1 min 28 s"."""
    if not job.HasField("timing"):
        return ""
    t = job.timing
    parts = [
        f"compile {format_seconds(t.compile_s)}",
        f"screen {format_seconds(t.screen_s)}",
        f"serial {format_seconds(t.serial_s)}",
    ]
    if t.waited_s > 0:
        parts.append(f"waited {format_seconds(t.waited_s)}")
    parts.append(f"total {format_seconds(t.elapsed_s)}")
    return "time: " + _DOT.join(parts)
