"""What a tuning job asks for: the manifest, and the options `autotune
warmup` takes as flags (client/cli/cli_jobs.cc, cli_flags.cc), with the
same meanings.

    request = job_request("warmup.manifest", search="random", budget="5%", seed=7)

A manifest is autotune.v1.Manifest in protobuf text format: items of a
family over a grid of dims and dtypes, and the architecture to compile for:

    arch: "sm_90"
    items {
      family: "rmsnorm"
      dims { name: "rows" values: [64, 4096] }
      dims { name: "hidden" values: [4096] }
      dtypes: [BFLOAT16]
    }

A search budget is what `--budget` takes: a count of variants (500 or
"500"), a share of each problem's space ("5%") or a time for the search's
rounds ("90s", "5m", "1h30m", or a datetime.timedelta).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Optional, Union

from google.protobuf import text_format

from autotune_client.errors import InvalidArgument, file_error
from autotune_client.lookups import NamedIntEnum
from autotune_client.messages import pb

PathLike = Union[str, "os.PathLike[str]"]
Budget = Union[int, str, timedelta]

# The states a job does not leave.
FINISHED_STATES = frozenset({pb.SUCCEEDED, pb.FAILED, pb.CANCELLED})


# A job's state (pb.JobState, Job.state) with its name: str(JobState(job.state))
# and f"{JobState(job.state)}" are "SUCCEEDED". Its members are the proto's.
JobState = NamedIntEnum(  # type: ignore[misc]
    "JobState", {value.name: value.number for value in pb.JobState.DESCRIPTOR.values}
)


def state_name(state: int) -> str:
    """"SUCCEEDED"; "state 9" for a state this client does not know."""
    try:
        return str(pb.JobState.Name(state))
    except ValueError:
        return f"state {state}"


def read_manifest(path: PathLike) -> pb.Manifest:
    """The Manifest a text file holds. Raises NotFound (or the code of the
    failure) for a file that cannot be read, InvalidArgument naming the file
    and the line of the first problem, or saying that it lists no items."""
    name = f"manifest {os.fspath(path)}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise file_error(name, error) from None
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"{name}: not UTF-8 text ({error.reason})") from None
    manifest = pb.Manifest()
    try:
        text_format.Parse(text, manifest)
    except text_format.ParseError as error:
        raise InvalidArgument(f"{name}:{error}") from None
    _require_items(manifest, name)
    return manifest


def _require_items(manifest: pb.Manifest, name: str) -> None:
    if not manifest.items:
        raise InvalidArgument(f"{name} lists no items; nothing to tune")


# absl::ParseDuration's syntax, which the CLI's --budget reads: numbers with
# a unit each, e.g. "1h30m", "1.5s".
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|ms|s|m|h)")
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_SECONDS_PER_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _budget_error(budget: object, why: str) -> InvalidArgument:
    return InvalidArgument(f"invalid budget {budget!r}: {why}")


def _parse_seconds(text: str) -> Optional[float]:
    """Seconds of a duration like "90s" or "1h30m"; None when it is not one."""
    position = 0
    seconds = 0.0
    while position < len(text):
        part = _DURATION_PART.match(text, position)
        if part is None:
            return None
        seconds += float(part.group(1)) * _SECONDS_PER_UNIT[part.group(2)]
        position = part.end()
    return seconds if text else None


def search_options(
    search: Optional[str] = None, budget: Optional[Budget] = None, seed: Optional[int] = None
) -> pb.SearchOptions:
    """The SearchOptions of `autotune warmup --search S --budget B --seed N`;
    an empty message when none is given.

    `search`: "exhaustive", "random" or "model", any case; None = the
    daemon's default. `budget`: an int count of variants (at least 1), or a
    string as the CLI reads it: "500", "5%" (a share in (0%, 100%]), "90s"
    / "5m" / "1h30m" (a positive time), or a positive timedelta; None = no
    budget. `seed`: the search's seed (deterministic for a seed). Raises
    InvalidArgument naming the value for anything else.
    """
    options = pb.SearchOptions()
    if search is not None:
        try:
            strategy = pb.SearchStrategy.Value(search.upper())
        except ValueError:
            strategy = pb.SEARCH_STRATEGY_UNSPECIFIED
        if strategy == pb.SEARCH_STRATEGY_UNSPECIFIED:
            raise InvalidArgument(
                f"invalid search {search!r}: expected exhaustive, random or model"
            )
        options.strategy = strategy
    if budget is not None:
        _set_budget(options, budget)
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
            raise InvalidArgument(f"invalid seed {seed!r}: expected an integer in [0, 2^64)")
        options.seed = seed
    return options


_MAX_SEARCH_SECONDS = 24 * 3600.0  # kMaxSearchSeconds (service/defaults.h)


def _search_seconds(budget: Budget, seconds: float) -> float:
    if seconds > _MAX_SEARCH_SECONDS:
        raise _budget_error(budget, "a time is at most 24h (a day of searching one problem)")
    return seconds


def _set_budget(options: pb.SearchOptions, budget: Budget) -> None:
    if isinstance(budget, timedelta):
        if budget <= timedelta(0):
            raise _budget_error(budget, "a time must be positive")
        options.max_seconds = _search_seconds(budget, budget.total_seconds())
        return
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise _budget_error(budget, "expected an int, a string or a timedelta")
    if isinstance(budget, int):
        if budget < 1:
            raise _budget_error(budget, "a count of variants must be at least 1")
        options.max_variants = budget
        return
    text = budget.strip()
    if text and text[-1].isalpha():
        seconds = _parse_seconds(text)
        if seconds is None or not seconds > 0:
            raise _budget_error(budget, "a time must be positive, like 90s, 5m or 1h30m")
        options.max_seconds = _search_seconds(budget, seconds)
    elif text.endswith("%"):
        number = text[:-1]
        percent = float(number) if _DECIMAL.fullmatch(number) else 0.0
        if not 0 < percent <= 100:
            raise _budget_error(budget, "a share of the space must be in (0%, 100%]")
        options.max_fraction = percent / 100
    elif re.fullmatch(r"[+-]?\d+", text) and int(text) >= 1:
        options.max_variants = int(text)
    else:
        raise _budget_error(
            budget,
            "expected a count of variants (at least 1), a share like 5% or a time like 90s",
        )


# The ranges the daemon accepts (service/defaults.h; the CLI checks the same
# before sending, and client/testdata/warmup_options.json holds both
# clients to them): keyword -> (JobOptions field, most allowed).
_MEASURING_LIMITS = {
    "variant_timeout": ("variant_timeout_s", 60.0),  # kMaxVariantTimeoutS
    "quiet_wait": ("quiet_wait_s", 7 * 24 * 3600.0),  # kMaxQuietWaitS
    "candidate_band": ("candidate_band", 10.0),  # kMaxCandidateBand
    "serial_noise": ("serial_noise", 0.5),  # kMaxSerialNoise
    "serial_max": ("serial_max_s", 3600.0),  # kMaxSerialMaxS
}
_MAX_COMPILE_TIMEOUT_S = 600.0  # kMaxCompileTimeoutS
_MAX_SERIAL_CANDIDATES = 256  # kMaxSerialCandidates


def _number(name: str, value: object, most: float) -> float:
    """`value` as seconds or a fraction in [0, most] (0 = the daemon's default)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"invalid {name} {value!r}: expected a number")
    if not 0 <= value <= most:  # NaN fails too
        raise InvalidArgument(f"invalid {name} {value!r}: not in [0, {most:g}] (0 = the default)")
    return float(value)


def _set_shard(options: pb.JobOptions, shard: str) -> None:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", shard) if isinstance(shard, str) else None
    if match is None:
        raise InvalidArgument(f"invalid shard {shard!r}: expected I/N, e.g. 0/4")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise InvalidArgument(f"invalid shard {shard!r}: the shard count must be at least 1")
    if index >= count:
        raise InvalidArgument(f"invalid shard {shard!r}: the shard index must be in 0..{count - 1}")
    options.shard_index = index
    options.shard_count = count


def job_request(
    manifest: Union[PathLike, pb.Manifest],
    *,
    compile_only: bool = False,
    retune: bool = False,
    search: Optional[str] = None,
    budget: Optional[Budget] = None,
    seed: Optional[int] = None,
    shard: Optional[str] = None,
    compile_timeout: Optional[float] = None,
    variant_timeout: Optional[float] = None,
    force: bool = False,
    quiet_wait: Optional[float] = None,
    candidates: Optional[int] = None,
    candidate_band: Optional[float] = None,
    serial_noise: Optional[float] = None,
    serial_max: Optional[float] = None,
) -> pb.SubmitJobRequest:
    """The SubmitJobRequest of `autotune warmup MANIFEST` with these flags,
    one keyword per flag (--compile-only is compile_only, --serial-max is
    serial_max, ...), each with the flag's meaning and range.

    `manifest`: a path to a manifest file, or a Manifest. `search`,
    `budget`, `seed`: as search_options. `shard`: "I/N", tune only shard I
    of N (0-based). `compile_timeout` (seconds, at most 600) and, measuring,
    `variant_timeout` (seconds one variant may run, at most 60),
    `quiet_wait` (seconds to wait for a quiet GPU), `candidates` (1..256
    serial candidates per problem), `candidate_band` (candidates within
    1 + band of the best screened median), `serial_noise` (the serial
    rounds' noise target, at most 0.5), `serial_max` (GPU seconds of serial
    rounds per problem, at most 3600), `force` (measure on a GPU others
    use). None (or 0) leaves a number to the daemon's default.

    Raises what read_manifest and search_options raise, and InvalidArgument
    naming the keyword for a value out of range, or for a search, budget,
    seed or measuring keyword with `compile_only` (it measures nothing)."""
    request = pb.SubmitJobRequest()
    if isinstance(manifest, pb.Manifest):
        _require_items(manifest, "the manifest")
        request.spec.manifest.CopyFrom(manifest)
    else:
        request.spec.manifest.CopyFrom(read_manifest(manifest))
    options = request.spec.options
    search_set = search_options(search, budget, seed)
    if search_set.ByteSize() > 0:
        if compile_only:
            raise InvalidArgument(
                "search, budget and seed choose what to measure; compile_only measures nothing"
            )
        options.search.CopyFrom(search_set)
    measuring = {
        "variant_timeout": variant_timeout,
        "quiet_wait": quiet_wait,
        "candidate_band": candidate_band,
        "serial_noise": serial_noise,
        "serial_max": serial_max,
    }
    given = [name for name, value in measuring.items() if value is not None]
    given += [name for name, value in (("force", force), ("candidates", candidates)) if value]
    if compile_only and given:
        raise InvalidArgument(
            f"{', '.join(given)} {'says' if len(given) == 1 else 'say'} how to measure; "
            "compile_only measures nothing"
        )
    for name, value in measuring.items():
        if value is not None:
            field, most = _MEASURING_LIMITS[name]
            setattr(options, field, _number(name, value, most))
    if candidates is not None:
        if isinstance(candidates, bool) or not isinstance(candidates, int):
            raise InvalidArgument(f"invalid candidates {candidates!r}: expected an integer")
        if not 1 <= candidates <= _MAX_SERIAL_CANDIDATES:
            raise InvalidArgument(
                f"invalid candidates {candidates!r}: not in [1, {_MAX_SERIAL_CANDIDATES}]"
            )
        options.serial_candidates = candidates
    if compile_timeout is not None:
        options.compile_timeout_s = _number(
            "compile_timeout", compile_timeout, _MAX_COMPILE_TIMEOUT_S
        )
    if shard is not None:
        _set_shard(options, shard)
    options.compile_only = compile_only
    options.retune = retune
    options.force = force
    return request
