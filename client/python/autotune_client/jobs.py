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


def _set_budget(options: pb.SearchOptions, budget: Budget) -> None:
    if isinstance(budget, timedelta):
        if budget <= timedelta(0):
            raise _budget_error(budget, "a time must be positive")
        options.max_seconds = budget.total_seconds()
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
        options.max_seconds = seconds
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


def job_request(
    manifest: Union[PathLike, pb.Manifest],
    *,
    compile_only: bool = False,
    retune: bool = False,
    search: Optional[str] = None,
    budget: Optional[Budget] = None,
    seed: Optional[int] = None,
) -> pb.SubmitJobRequest:
    """The SubmitJobRequest of `autotune warmup MANIFEST` with these flags.
    `manifest`: a path to a manifest file, or a Manifest. Raises what
    read_manifest and search_options raise, and InvalidArgument for a
    search, budget or seed with `compile_only` (it measures nothing, so
    there is nothing to search)."""
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
    options.compile_only = compile_only
    options.retune = retune
    return request
