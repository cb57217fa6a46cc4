"""What a lookup asks and what it answers, as plain Python values.

    lookup = Lookup("gla_decode", {"batch": 8, "heads": 32, "dim": 128}, "bf16",
                    device="NVIDIA H200")
    result = client.lookup(lookup, include_cubin=True)
    result.match           # Match.EXACT, NEAREST, PREDICTED or MISS (prints its name)
    result.config          # {"BLOCK_V": 32, "THREADS": 128, "UNROLL": 1, "VEC": 4}
    result.launch          # LaunchDims(grid=(4, 256), block=(128,), dynamic_shared_bytes=0)
    result.cubin           # bytes, sha256 checked, when asked for
    result.miss_kind       # MissKind.NO_ENTRY ... for a MISS; MissKind.NONE otherwise
    result.default_config  # for a MISS: what to run untuned, when the family names one

The text forms follow proto/problem.cc: dims as "batch=8,n=4096" (sorted
by name) and the dtype names "bf16" / "bfloat16".
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple, Optional, TypeVar, Union, cast

from autotune_client.errors import AutotuneError, InvalidArgument
from autotune_client.messages import pb

_T = TypeVar("_T")


class NamedIntEnum(enum.IntEnum):
    """An IntEnum that prints as its name: str(Match.MISS) and f"{Match.MISS}"
    are "MISS" (on Python 3.11 and later IntEnum prints the number). It
    still compares and hashes as its number; a numeric format
    (f"{Match.MISS:d}") formats the number."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        if spec and spec[-1] in "bcdoxXneEfFgG%":
            return format(int(self), spec)
        return format(self.name, spec)


class DType(NamedIntEnum):
    """Data types, numbered as autotune.v1.DType."""

    UNSPECIFIED = 0
    FLOAT32 = 1
    FLOAT16 = 2
    BFLOAT16 = 3
    FLOAT64 = 4
    INT8 = 5
    INT32 = 6
    INT64 = 7
    UINT8 = 8
    FLOAT8_E4M3 = 9
    FLOAT8_E5M2 = 10


# (short name, long name) as in proto/problem.cc's dtype table.
_DTYPE_NAMES: dict[DType, tuple[str, str]] = {
    DType.FLOAT32: ("fp32", "float32"),
    DType.FLOAT16: ("fp16", "float16"),
    DType.BFLOAT16: ("bf16", "bfloat16"),
    DType.FLOAT64: ("fp64", "float64"),
    DType.INT8: ("int8", "int8"),
    DType.INT32: ("int32", "int32"),
    DType.INT64: ("int64", "int64"),
    DType.UINT8: ("uint8", "uint8"),
    DType.FLOAT8_E4M3: ("fp8e4m3", "float8_e4m3"),
    DType.FLOAT8_E5M2: ("fp8e5m2", "float8_e5m2"),
}


# Bytes per element, as proto/problem.cc's DTypeBytes.
_DTYPE_BYTES: dict[DType, int] = {
    DType.FLOAT32: 4,
    DType.FLOAT16: 2,
    DType.BFLOAT16: 2,
    DType.FLOAT64: 8,
    DType.INT8: 1,
    DType.INT32: 4,
    DType.INT64: 8,
    DType.UINT8: 1,
    DType.FLOAT8_E4M3: 1,
    DType.FLOAT8_E5M2: 1,
}


def dtype_bytes(dtype: int) -> int:
    """Bytes per element of a dtype number; 0 for one this client does not know."""
    return _DTYPE_BYTES.get(dtype, 0)  # type: ignore[call-overload]  # IntEnum keys match their numbers


def parse_dtype(value: Union[DType, str, int]) -> DType:
    """A DType from itself, its number, or a name: "bf16", "bfloat16" or "BFLOAT16".

    Raises InvalidArgument naming the known names for anything else.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return DType(value)
        except ValueError:
            raise InvalidArgument(f"unknown dtype number {value}") from None
    if isinstance(value, str):
        text = value.strip().lower()
        for dtype, names in _DTYPE_NAMES.items():
            if text in names or text == dtype.name.lower():
                return dtype
    known = ", ".join(short for short, _ in _DTYPE_NAMES.values())
    raise InvalidArgument(f"unknown dtype {value!r} (expected one of {known})")


def dtype_name(dtype: int) -> str:
    """The short name of a dtype number ("bf16"), as the C++ side prints it."""
    if dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[DType(dtype)][0]
    if dtype == DType.UNSPECIFIED:
        return "unspecified"
    return f"dtype {dtype}"


def format_dims(dims: Mapping[str, int]) -> str:
    """"batch=8,n=4096": sorted by name (byte order, as std::sort does), no spaces."""
    ordered = sorted(dims.items(), key=lambda item: item[0].encode("utf-8"))
    return ",".join(f"{name}={value}" for name, value in ordered)


def describe_request(request: pb.LookupRequest) -> str:
    """"vector_scale batch=8,n=4096 bf16", for messages."""
    problem = request.problem
    return f"{request.family} {format_dims(problem.dims)} {dtype_name(problem.dtype)}"


def sha256_hex(data: bytes) -> str:
    """The lower-case hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


class Match(NamedIntEnum):
    """How a lookup matched (autotune.v1.MatchKind)."""

    EXACT = 1
    NEAREST = 2
    MISS = 3
    # Nothing tuned for the problem on the device: the config a model of the
    # family, learned from the problems tuned there, predicts fastest among
    # their winners (`prediction` says what it rests on); never measured on
    # this problem.
    PREDICTED = 4


class MissKind(NamedIntEnum):
    """Why a lookup is a MISS (autotune.v1.MissKind); NONE when it is not one."""

    NONE = 0
    NO_ENTRY = 1
    OTHER_DEVICE = 2
    OLDER_VERSION = 3
    EXACT_ONLY = 4
    DRIVER_TOO_OLD = 5
    NEAREST_UNFIT = 6
    # A kind newer than this client; miss_reason says what it is.
    UNRECOGNIZED = -1


@dataclass(frozen=True)
class Device:
    """The GPU a lookup is for. An empty name accepts any device, as long as
    only one matches; sm_count 0 is any."""

    name: str = ""
    compute_capability: int = 0  # major*10 + minor, e.g. 90
    sm_count: int = 0

    def to_proto(self) -> pb.Device:
        return pb.Device(
            name=self.name, compute_capability=self.compute_capability, sm_count=self.sm_count
        )


@dataclass
class Lookup:
    """One problem of one kernel family to look up.

    `device` may be a Device, a device name, or None (unset: the start-up
    lookup fills in its own device; a plain lookup then accepts any).
    `driver_version` is the CUDA version the driver supports ("12.8"), so
    that a binary built by a newer NVRTC is not served; empty = not checked.
    """

    family: str
    dims: Mapping[str, int]
    dtype: Union[DType, str, int]
    device: Union[Device, str, None] = None
    family_hash: str = ""  # empty = the family's current version
    exact_only: bool = False  # never answer NEAREST
    driver_version: str = ""

    def to_request(self, include_cubin: bool = False) -> pb.LookupRequest:
        """The LookupRequest message. Raises InvalidArgument for a dim that is
        not an integer or an unknown dtype."""
        for name, value in self.dims.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgument(
                    f"{self.family}: dims['{name}'] is {value!r}, not an integer"
                )
        request = pb.LookupRequest(
            family=self.family,
            # DType is numbered as the proto's enum.
            problem=pb.Problem(
                dims=dict(self.dims), dtype=cast("pb.DType", int(parse_dtype(self.dtype)))
            ),
            family_hash=self.family_hash,
            include_cubin=include_cubin,
            exact_only=self.exact_only,
            driver_version=self.driver_version,
        )
        if isinstance(self.device, Device):
            request.device.CopyFrom(self.device.to_proto())
        elif isinstance(self.device, str):
            request.device.CopyFrom(pb.Device(name=self.device))
        return request


class LaunchDims(NamedTuple):
    """Launch geometry: grid and block of 1 to 3 values each, and the dynamic
    shared memory in bytes."""

    grid: tuple[int, ...]
    block: tuple[int, ...]
    dynamic_shared_bytes: int

    @classmethod
    def from_proto(cls, launch: pb.LaunchDims) -> LaunchDims:
        return cls(tuple(launch.grid), tuple(launch.block), launch.dynamic_shared_bytes)


class DimDistance(NamedTuple):
    """For a NEAREST answer: one bucketed dimension that differs."""

    name: str
    requested: int
    tuned: int


class LookupResult:
    """One answer of the service.

    `config`, `function_name`, `binary_sha256` and `tuned_dims` describe
    the entry: set for EXACT and NEAREST, and for a MISS of kind
    DRIVER_TOO_OLD (its config still applies; no cubin is served). `launch`
    is that config's grid and block for the requested problem (a NEAREST
    entry was tuned at other dims: its own launch does not apply). For
    other misses they are empty, and `default_config` / `default_launch`
    are what to run untuned when the family names a default that fits.
    `cubin` is the entry's binary when it was asked for and sent, its
    sha256 checked; None otherwise. `response` is the full message (its
    cubin field cleared), for everything else an Entry holds (timing, NVRTC
    version, ...).

    The plain values are read from `response` when first asked for, not when
    the answer arrives: a start-up of a thousand answers that launches from
    the messages (autotune_client.launch) never builds their dicts.
    """

    __slots__ = ("match", "miss_kind", "cubin", "response", "_values")

    def __init__(
        self,
        match: Match,
        response: pb.LookupResponse,
        cubin: Optional[bytes] = None,
        miss_kind: MissKind = MissKind.NONE,
    ) -> None:
        self.match = match
        self.miss_kind = miss_kind
        self.cubin = cubin
        self.response = response
        self._values: dict[str, object] = {}

    def _value(self, name: str, make: Callable[[], _T]) -> _T:
        try:
            return cast(_T, self._values[name])
        except KeyError:
            value = self._values[name] = make()
            return value

    @property
    def config(self) -> dict[str, int]:
        return self._value("config", lambda: _as_dict(self.response.entry.config.params))

    @property
    def launch(self) -> Optional[LaunchDims]:
        return self._value("launch", lambda: _launch_for(self.match, self.response))

    @property
    def function_name(self) -> str:
        return self.response.entry.function_name

    @property
    def binary_sha256(self) -> str:
        return self.response.entry.binary_sha256

    @property
    def tuned_dims(self) -> dict[str, int]:
        return self._value("tuned_dims", lambda: _as_dict(self.response.entry.problem.dims))

    @property
    def distance(self) -> tuple[DimDistance, ...]:
        return self._value(
            "distance",
            lambda: tuple(
                DimDistance(d.name, d.requested, d.tuned) for d in self.response.distance
            ),
        )

    @property
    def log2_distance(self) -> float:
        return self.response.log2_distance

    @property
    def miss_reason(self) -> str:
        return self.response.miss_reason

    @property
    def prediction(self) -> Optional[pb.Prediction]:
        """For a PREDICTED answer: the model's median for the problem, the
        problems and measurements it learned from, the configs it ranked and
        the device; None otherwise."""
        return self.response.prediction if self.response.HasField("prediction") else None

    @property
    def default_config(self) -> dict[str, int]:
        return self._value(
            "default_config",
            lambda: (
                _as_dict(self.response.default_config.params)
                if self.response.HasField("default_config")
                else {}
            ),
        )

    @property
    def default_launch(self) -> Optional[LaunchDims]:
        return self._value(
            "default_launch",
            lambda: (
                LaunchDims.from_proto(self.response.default_launch)
                if self.response.HasField("default_launch")
                else None
            ),
        )

    @property
    def entry(self) -> pb.Entry:
        """The tuned entry (an empty message for most misses)."""
        return self.response.entry

    @property
    def arguments(self) -> Optional[pb.LaunchArguments]:
        """The buffers' shapes and the scalars' values of the answer's config
        (the entry's, else the default config) for the requested problem: what
        a launcher checks tensors against and passes. None when the answer has
        no config to launch, or was stored before the service sent them."""
        return self.response.arguments if self.response.HasField("arguments") else None

    @property
    def has_binary(self) -> bool:
        """An answer whose cubin can be loaded: EXACT, NEAREST or PREDICTED with a binary."""
        return self.match != Match.MISS and bool(self.binary_sha256)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LookupResult):
            return NotImplemented
        return (self.match, self.miss_kind, self.cubin, self.response) == (
            other.match,
            other.miss_kind,
            other.cubin,
            other.response,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        return (
            f"LookupResult(match={self.match}, config={self.config}, launch={self.launch}, "
            f"function_name={self.function_name!r}, binary_sha256={self.binary_sha256!r}, "
            f"tuned_dims={self.tuned_dims}, distance={self.distance}, "
            f"miss_kind={self.miss_kind}, miss_reason={self.miss_reason!r}, "
            f"default_config={self.default_config}, default_launch={self.default_launch}, "
            f"cubin={'None' if self.cubin is None else f'<{len(self.cubin)} bytes>'})"
        )

    @classmethod
    def from_response(
        cls, response: pb.LookupResponse, cubin: Optional[bytes] = None, copy: bool = True
    ) -> LookupResult:
        """The result for a response; `cubin` as already checked by the caller.
        `copy=False` hands `response` over to the result instead of copying it
        (its cubin field is cleared in place): for a message nothing else
        holds, such as one just read from the local cache.

        Raises AutotuneError (UNKNOWN) for a match kind this client does not
        know: it cannot tell whether the entry may be used.
        """
        try:
            match = Match(response.match)
        except ValueError:
            raise AutotuneError(
                f"the service answered match kind {response.match}, which this client does "
                "not know"
            ) from None
        try:
            miss_kind = MissKind(response.miss_kind)
        except ValueError:
            miss_kind = MissKind.UNRECOGNIZED
        if copy:
            kept = pb.LookupResponse()
            kept.CopyFrom(response)
        else:
            kept = response
        kept.ClearField("cubin")
        return cls(match, kept, cubin, miss_kind)


def _as_dict(values: Mapping[str, int]) -> dict[str, int]:
    """A protobuf map as a dict, iterated directly: dict() goes through the
    Mapping ABC's key view, a third slower, and a start converts three maps
    per answer."""
    return {name: values[name] for name in values}


def _launch_for(match: Match, response: pb.LookupResponse) -> Optional[LaunchDims]:
    if response.HasField("launch"):
        return LaunchDims.from_proto(response.launch)
    # An answer without one (stored by an older client): the entry's own
    # launch holds only for the problem it was tuned at.
    if match == Match.EXACT and response.entry.HasField("launch"):
        return LaunchDims.from_proto(response.entry.launch)
    return None


@dataclass
class BatchAnswer:
    """One item of a batch lookup: a result, or the error the service gave for
    this item alone (unknown family, bad dims) or a cubin that failed its
    check (DataLoss)."""

    request: pb.LookupRequest
    result: Optional[LookupResult]
    error: Optional[AutotuneError]
