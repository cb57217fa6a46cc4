"""A client's on-disk copy of the service's answers and their cubins.

An inference server restarted while the service is down still starts with
its tuned kernels (startup.py uses it). The format is the C++ client's
(client/local_cache.h), byte for byte, so both clients share a directory:

    answers/<key>.answer    one LocalAnswer per lookup: the line
                            "autotune-answer 1 <sha256 hex of the rest>\\n",
                            then the serialized LocalAnswer
    cubins/<sha256>.cubin   a binary, named by the sha256 of its bytes

<key> is answer_key(request): the sha256 hex of the text

    "autotune-lookup 1\\n" family "\\n" family_hash "\\n" dims "\\n" dtype "\\n"
    device.name "\\n" device.compute_capability "\\n" device.sm_count "\\n"
    exact_only "\\n" driver_version "\\n"

with dims as "batch=8,n=4096" (sorted by name), the dtype's number, the
numbers and exact_only (0 or 1) in decimal; include_cubin does not count.

Every file is written to a unique temporary name beside it and renamed
over the old one, so processes and threads may read and write one
directory at once without locks: a reader sees an old file or a new one,
never part of one. Reads check every file (the answer's seal, the cubin's
sha256): a torn, corrupted or edited file raises LocalCacheCorrupt naming
it, and is never served; writing it again replaces it. Nothing is
fsync'ed. Other I/O failures raise LocalCacheError; a missing file is
None, never an error.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from pathlib import Path
from typing import Optional, Union

from google.protobuf.message import DecodeError

from autotune_client.errors import (
    InvalidArgument,
    LocalCacheCorrupt,
    LocalCacheError,
    local_cache_error,
)
from autotune_client.lookups import format_dims, sha256_hex
from autotune_client.messages import pb
from autotune_client.paths import default_local_cache_directory

_SEAL_PREFIX = b"autotune-answer 1 "
_SHA256_HEX_LENGTH = 64
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

# Temporary names are unique per process and call: "<path>.tmp.<pid>.<n>".
_temp_counter = itertools.count()
_temp_counter_lock = threading.Lock()


def answer_key(request: pb.LookupRequest) -> str:
    """The identity of a lookup as a file name (see the module's doc)."""
    device = request.device
    text = (
        "autotune-lookup 1\n"
        f"{request.family}\n"
        f"{request.family_hash}\n"
        f"{format_dims(request.problem.dims)}\n"
        f"{int(request.problem.dtype)}\n"
        f"{device.name}\n"
        f"{device.compute_capability}\n"
        f"{device.sm_count}\n"
        f"{1 if request.exact_only else 0}\n"
        f"{request.driver_version}\n"
    )
    return sha256_hex(text.encode("utf-8"))


def _is_sha256_hex(text: str) -> bool:
    return _SHA256_HEX.fullmatch(text) is not None


def _check_sha256_name(sha256: str) -> None:
    if not _is_sha256_hex(sha256):
        raise InvalidArgument(f"'{sha256}' is not a lower-case sha256 hex digest")


def _read_if_present(path: Union[str, Path], what: str) -> Optional[bytes]:
    """The file's bytes; None when it does not exist. Plain descriptor reads:
    a start reads two small files a lookup, where a buffered file object's
    set-up costs as much as the read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise local_cache_error(f"cannot read {what} {path}", error) from None
    try:
        pieces = []
        while True:
            piece = os.read(descriptor, 1 << 20)
            if not piece:
                break
            pieces.append(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)
    except OSError as error:
        raise local_cache_error(f"cannot read {what} {path}", error) from None
    finally:
        os.close(descriptor)


def _write_atomically(path: Path, contents: bytes, what: str) -> None:
    with _temp_counter_lock:
        number = next(_temp_counter)
    temp_path = path.with_name(f"{path.name}.tmp.{os.getpid()}.{number}")
    try:
        descriptor = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        # close() may be the first to report a full disk (NFS, quotas): the
        # with block closes before the rename.
        with os.fdopen(descriptor, "wb") as file:
            file.write(contents)
        os.replace(temp_path, path)
    except OSError as error:
        try:
            os.remove(temp_path)
        except OSError:
            pass
        raise local_cache_error(f"cannot write {what} {path}", error) from None


class LocalCache:
    """One local cache directory. Thread-safe, and safe to share between
    processes on one host."""

    def __init__(self, directory: Union[str, os.PathLike[str], None] = None) -> None:
        """Opens `directory` (None = $AUTOTUNE_LOCAL_CACHE, else
        $XDG_CACHE_HOME/autotune, else ~/.cache/autotune), creating it and its
        answers/ and cubins/ (mode 0700) when missing.

        Raises InvalidArgument when no directory can be found, LocalCacheError
        naming the path when one cannot be created.
        """
        chosen = os.fspath(directory) if directory is not None else default_local_cache_directory()
        if not chosen:
            raise InvalidArgument(
                "no local cache directory: set AUTOTUNE_LOCAL_CACHE, XDG_CACHE_HOME or HOME"
            )
        self._directory = Path(chosen)
        # Plain strings for the per-lookup paths: a start joins thousands.
        self._answers = os.path.join(chosen, "answers") + os.sep
        self._cubins = os.path.join(chosen, "cubins") + os.sep
        for path in (self._directory, self._directory / "answers", self._directory / "cubins"):
            try:
                os.makedirs(path, mode=0o700, exist_ok=True)
            except FileExistsError:
                raise LocalCacheError(
                    f"{path} exists and is not a directory", "FAILED_PRECONDITION"
                ) from None
            except OSError as error:
                raise local_cache_error(f"cannot create directory {path}", error) from None

    @property
    def directory(self) -> Path:
        return self._directory

    def answer_path(self, request: pb.LookupRequest) -> Path:
        return Path(self._answer_file(request))

    def cubin_path(self, sha256: str) -> Path:
        return Path(self._cubin_file(sha256))

    def has_answer(self, request: pb.LookupRequest) -> bool:
        """Whether an answer file exists for `request` (not read, not checked)."""
        return os.path.exists(self._answer_file(request))

    def _answer_file(self, request: pb.LookupRequest) -> str:
        return f"{self._answers}{answer_key(request)}.answer"

    def _cubin_file(self, sha256: str) -> str:
        return f"{self._cubins}{sha256}.cubin"

    def put_answer(self, answer: pb.LocalAnswer) -> None:
        """Stores `answer` under answer_key(answer.request); the request's
        include_cubin and the response's cubin are not stored (put_cubin
        keeps binaries)."""
        stored = pb.LocalAnswer()
        stored.CopyFrom(answer)
        stored.request.ClearField("include_cubin")
        stored.response.ClearField("cubin")
        payload = stored.SerializeToString()
        sealed = _SEAL_PREFIX + sha256_hex(payload).encode("ascii") + b"\n" + payload
        _write_atomically(Path(self._answer_file(stored.request)), sealed, "local answer")

    def get_answer(self, request: pb.LookupRequest) -> Optional[pb.LocalAnswer]:
        """The answer stored for `request`; None when there is none.

        Raises LocalCacheCorrupt when its file fails its seal or does not
        parse, LocalCacheError when it cannot be read.
        """
        path = self._answer_file(request)
        data = _read_if_present(path, "local answer")
        if data is None:
            return None
        newline = data.find(b"\n")
        if not data.startswith(_SEAL_PREFIX) or newline != len(_SEAL_PREFIX) + _SHA256_HEX_LENGTH:
            raise LocalCacheCorrupt(f"local answer {path} has no valid seal line")
        seal = data[len(_SEAL_PREFIX) : newline]
        payload = data[newline + 1 :]
        if sha256_hex(payload).encode("ascii") != seal:
            raise LocalCacheCorrupt(
                f"local answer {path} does not match its seal (torn or corrupted)"
            )
        answer = pb.LocalAnswer()
        try:
            answer.ParseFromString(payload)
        except DecodeError:
            raise LocalCacheCorrupt(f"local answer {path} does not parse") from None
        return answer

    def put_cubin(self, sha256: str, cubin: bytes) -> None:
        """Stores `cubin` as cubins/<sha256>.cubin.

        Raises InvalidArgument (nothing written) when `sha256` is not a
        lower-case hex digest or not the sha256 of `cubin`.
        """
        _check_sha256_name(sha256)
        if sha256_hex(cubin) != sha256:
            raise InvalidArgument(f"the cubin's bytes do not hash to {sha256}; not stored")
        path = self._cubin_file(sha256)
        try:
            same_size = os.stat(path).st_size == len(cubin)
        except OSError:
            same_size = False
        if same_size:
            # Content-addressed: the same bytes are there already, unless the
            # file was damaged in place, which the read checks.
            try:
                if self.get_cubin(sha256) is not None:
                    return
            except (LocalCacheCorrupt, LocalCacheError):
                pass
        _write_atomically(Path(path), cubin, "local cubin")

    def get_cubin(self, sha256: str) -> Optional[bytes]:
        """The binary `sha256`; None when absent.

        Raises LocalCacheCorrupt when its bytes do not match the name,
        InvalidArgument for a name that is not a sha256 hex digest,
        LocalCacheError when it cannot be read.
        """
        _check_sha256_name(sha256)
        path = self._cubin_file(sha256)
        data = _read_if_present(path, "local cubin")
        if data is not None and sha256_hex(data) != sha256:
            raise LocalCacheCorrupt(
                f"local cubin {path} does not match its sha256 (corrupted); refused"
            )
        return data
