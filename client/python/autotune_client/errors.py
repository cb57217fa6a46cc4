"""The exceptions of the autotune client.

Every error the package raises is an AutotuneError carrying a canonical
gRPC status code name (`code`, e.g. "NOT_FOUND") and a message for people
(`message`). The subclasses let a program catch what it can act on:

    try:
        result = client.lookup(lookup)
    except ServiceUnavailable:
        ...  # the daemon is down or slow: run the default config
    except NotFound:
        ...  # no such kernel family on this daemon

The codes follow the C++ client (client/grpc_status.h, base/posix_error.cc)
so that both clients report one failure the same way.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the messages need the generated module; errors do not
    from autotune_client.messages import pb


class AutotuneError(Exception):
    """An error from the service, the local cache or the client itself."""

    default_code = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code: str = code if code is not None else self.default_code
        self.message: str = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ServiceUnavailable(AutotuneError):
    """The service could not be reached (UNAVAILABLE) or did not answer in time
    (DEADLINE_EXCEEDED). Worth retrying later; a start-up path falls back on
    the local cache or the default config."""

    default_code = "UNAVAILABLE"


class NotFound(AutotuneError):
    """NOT_FOUND: e.g. a kernel family the service does not know."""

    default_code = "NOT_FOUND"


class InvalidArgument(AutotuneError):
    """INVALID_ARGUMENT: a request the service (or this client) refuses, such as
    a missing dimension or an unsupported dtype; the message names the field."""

    default_code = "INVALID_ARGUMENT"


class Unauthenticated(AutotuneError):
    """UNAUTHENTICATED: the daemon does not know who is calling (no token, a
    token it does not hold or one past its expiry)."""

    default_code = "UNAUTHENTICATED"


class PermissionDenied(AutotuneError):
    """PERMISSION_DENIED: the caller's role is below what the call needs; the
    message names both."""

    default_code = "PERMISSION_DENIED"


class DataLoss(AutotuneError):
    """DATA_LOSS: bytes that fail their check, e.g. a cubin whose sha256 does not
    match its name. Never served."""

    default_code = "DATA_LOSS"


class LocalCacheCorrupt(DataLoss):
    """A local cache file that fails its check: a torn, corrupted or edited
    answer, or a cubin whose bytes do not match its sha256. The message names
    the file; writing it again replaces it."""


class LocalCacheError(AutotuneError):
    """The local cache could not be read or written (permissions, a full disk,
    a path that is not a directory); the message names the path."""

    default_code = "INTERNAL"


class JobFailed(AutotuneError):
    """A tuning job that ended FAILED (code ABORTED) or CANCELLED (code
    CANCELLED), raised by Client.tune. `job` is the job as it ended: its
    `error` says why it failed (a variant that did not compile, a problem
    left without a valid config), its `reports` what each problem got."""

    default_code = "ABORTED"

    def __init__(self, job: pb.Job, message: str, code: str | None = None) -> None:
        super().__init__(message, code)
        self.job = job


_CLASS_BY_CODE: dict[str, type[AutotuneError]] = {
    "UNAVAILABLE": ServiceUnavailable,
    "DEADLINE_EXCEEDED": ServiceUnavailable,
    "NOT_FOUND": NotFound,
    "INVALID_ARGUMENT": InvalidArgument,
    "DATA_LOSS": DataLoss,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
}


def error_for_code(code: str, message: str) -> AutotuneError:
    """The exception for a status code name: its subclass, else AutotuneError."""
    return _CLASS_BY_CODE.get(code, AutotuneError)(message, code)


# As base/posix_error.cc maps errno values.
_CODE_BY_ERRNO: dict[int, str] = {
    errno.ENOENT: "NOT_FOUND",
    errno.EACCES: "PERMISSION_DENIED",
    errno.EPERM: "PERMISSION_DENIED",
    errno.EROFS: "PERMISSION_DENIED",
    errno.EEXIST: "ALREADY_EXISTS",
    errno.ENOSPC: "RESOURCE_EXHAUSTED",
    errno.EDQUOT: "RESOURCE_EXHAUSTED",
    errno.ENOMEM: "RESOURCE_EXHAUSTED",
    errno.EMFILE: "RESOURCE_EXHAUSTED",
    errno.ENFILE: "RESOURCE_EXHAUSTED",
    errno.EAGAIN: "UNAVAILABLE",
    errno.EINTR: "UNAVAILABLE",
    errno.EBUSY: "UNAVAILABLE",
    errno.ENOTDIR: "FAILED_PRECONDITION",
    errno.EISDIR: "FAILED_PRECONDITION",
    errno.ELOOP: "FAILED_PRECONDITION",
    errno.EINVAL: "INVALID_ARGUMENT",
    errno.ENAMETOOLONG: "INVALID_ARGUMENT",
}


def errno_code(error: OSError) -> str:
    """The status code name of a failed file operation."""
    return _CODE_BY_ERRNO.get(error.errno or 0, "INTERNAL")


def local_cache_error(context: str, error: OSError) -> LocalCacheError:
    """A LocalCacheError for a failed file operation: "<context>: <reason>"."""
    return LocalCacheError(f"{context}: {error.strerror or error}", errno_code(error))


def file_error(context: str, error: OSError) -> AutotuneError:
    """The error for a file this client was asked to read (a descriptor, a
    manifest): "<context>: <reason>", NotFound for a missing one."""
    return error_for_code(errno_code(error), f"{context}: {error.strerror or error}")
