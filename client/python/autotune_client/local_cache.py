"""A client's on-disk copy of the service's answers and their cubins.

An inference server restarted while the service is down still starts with
its tuned kernels (startup.py uses it). The format is the C++ client's
(client/local_cache.h), byte for byte, so both clients share a directory:

    answers/<key>.answer    one LocalAnswer per lookup: the line
                            "autotune-answer 1 <sha256 hex of the rest>\\n",
                            then the serialized LocalAnswer
    cubins/<sha256>.cubin   a binary, named by the sha256 of its bytes
    packs/<key>.pack        the answers of one start-up batch and their
                            cubins in one read-only file, key =
                            pack_key(the batch's requests), so that a start
                            reads one file instead of two per lookup: the
                            line "autotune-pack 1 <index bytes> <XXH3-128
                            hex of the index>\\n", the index (a serialized
                            LocalPack), zeros up to a multiple of 256, then
                            the cubins (each at a multiple of 256, as the
                            index says), the XXH3-128 of each 256 KiB of
                            them in the index

In answers/, <key> is answer_key(request): the sha256 hex of the text

    "autotune-lookup 1\\n" family "\\n" family_hash "\\n" dims "\\n" dtype "\\n"
    device.name "\\n" device.compute_capability "\\n" device.sm_count "\\n"
    exact_only "\\n" driver_version "\\n"

with dims as "batch=8,n=4096" (sorted by name), the dtype's number, the
numbers and exact_only (0 or 1) in decimal; include_cubin does not count.

A pack serves an answer only while its answers/ file is the one it was
made from (same inode, size and times), so it never serves an answer older
than the one answers/ holds; every read checks its index and all of its
bytes. At most PACKS_KEPT packs are kept, the least recently written
removed first. Packs need the xxhash module (Debian's python3-xxhash):
without it a start-up reads answers/ and cubins/ alone, and says so once.

Every file is written to a unique temporary name beside it and renamed
over the old one, so processes and threads may read and write one
directory at once without locks: a reader sees an old file or a new one,
never part of one. Reads check every file (the answer's seal, the cubin's
sha256, the pack's XXH3-128): a torn, corrupted or edited file raises
LocalCacheCorrupt naming it, and is never served; writing it again
replaces it. Nothing is fsync'ed. Other I/O failures raise
LocalCacheError; a missing file is None, never an error.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import mmap
import os
import re
import stat
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence, Union

from google.protobuf.message import DecodeError

try:
    import xxhash as _xxhash
except ImportError:  # without it, packs are neither read nor written
    _xxhash = None  # type: ignore[assignment]

from autotune_client.errors import (
    AutotuneError,
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

_PACK_PREFIX = b"autotune-pack 1 "
_PACK_KEY_PREFIX = b"autotune-pack 2\n"
_DECIMAL = re.compile(rb"[0-9]+")
# The pieces of a pack's data that are checked apart.
_PACK_CHUNK_BYTES = 256 * 1024
# Where each cubin of a pack starts (base/shared_bytes.h's kCubinAlignment).
_CUBIN_ALIGNMENT = 256
_ZEROS = bytes(_CUBIN_ALIGNMENT)

_packs_warned = False
_packs_warned_lock = threading.Lock()

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


def pack_key(requests: Iterable[pb.LookupRequest]) -> str:
    """The key of the pack of a batch of lookups, in their order: the sha256
    hex of "autotune-pack 2\\n", then of each request (include_cubin
    cleared) its deterministic serialization, preceded by its size in
    decimal and "\\n" (client/local_cache.h's PackKey)."""
    batch = pb.BatchLookupRequest(lookups=requests)
    for request in batch.lookups:
        request.ClearField("include_cubin")
    return batch_pack_key(batch.SerializeToString(deterministic=True))


def batch_pack_key(serialized: bytes) -> str:
    """pack_key of the lookups of a BatchLookupRequest, from the batch
    serialized deterministically, its lookups' include_cubin unset: each
    lookup's bytes are there already (field 1 of the batch), so a start-up
    that sends the batch serializes its thousand requests once, not twice.
    Raises InvalidArgument for bytes that are not such a batch."""
    not_a_batch = InvalidArgument("not a serialized BatchLookupRequest")
    parts = [_PACK_KEY_PREFIX]
    position = 0
    try:
        while position < len(serialized):
            tag, position = _read_varint(serialized, position)
            if tag & 7 == 2:  # length-delimited: a lookup is field 1
                size, position = _read_varint(serialized, position)
                if tag >> 3 == 1:
                    parts.append(b"%d\n" % size)
                    parts.append(serialized[position : position + size])
                position += size
            elif tag & 7 == 0:  # the batch's flags
                _, position = _read_varint(serialized, position)
            else:
                raise not_a_batch
    except IndexError:  # cut short
        raise not_a_batch from None
    if position != len(serialized):
        raise not_a_batch
    return hashlib.sha256(b"".join(parts)).hexdigest()


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    """The base-128 varint at `position` in `data`, and where it ends."""
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def packs_supported() -> bool:
    """Whether this Python reads and writes packs: it needs the xxhash module
    (Debian's python3-xxhash). The first call that finds it missing says so
    (a UserWarning); a start-up then reads answers/ and cubins/ alone."""
    global _packs_warned
    if _xxhash is not None:
        return True
    with _packs_warned_lock:
        warn, _packs_warned = not _packs_warned, True
    if warn:
        warnings.warn(
            "autotune_client: the xxhash module is missing (apt-get install python3-xxhash), "
            "so the local cache's packs are neither read nor written: start-ups read "
            "answers/ and cubins/ file by file",
            UserWarning,
            stacklevel=2,
        )
    return False


def _require_xxhash() -> None:
    if _xxhash is None:
        raise LocalCacheError(
            "local packs need the xxhash module (apt-get install python3-xxhash)",
            "FAILED_PRECONDITION",
        )


def _xxh3(data: Union[bytes, memoryview]) -> bytes:
    """XXH3-128, big-endian (XXH128_canonicalFromHash, as local_cache.cc
    writes it)."""
    return _xxhash.xxh3_128_digest(data)


def _chunk_hashes(data: Union[bytes, mmap.mmap], start: int = 0) -> list[bytes]:
    """The XXH3-128 of each _PACK_CHUNK_BYTES of `data` from `start`, the last
    one shorter. Each piece is a view, dropped once hashed."""
    with memoryview(data) as view:
        return [
            _xxh3(view[offset : offset + _PACK_CHUNK_BYTES])
            for offset in range(start, len(view), _PACK_CHUNK_BYTES)
        ]


def _align(offset: int) -> int:
    return -(-offset // _CUBIN_ALIGNMENT) * _CUBIN_ALIGNMENT


class FileStamp(NamedTuple):
    """What stat() says of a file, enough to tell a file replaced by rename
    from the one seen before."""

    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileStamp:
        return cls(info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class PackedAnswer(NamedTuple):
    """One lookup's answer as read from its file, for put_pack: `key` =
    answer_key(answer.request) names the file, `stamp` is the file's when it
    was read (get_stamped_answer)."""

    key: str
    answer: pb.LocalAnswer
    stamp: FileStamp


@dataclass
class Pack:
    """A pack, read and checked. `answers`: one per lookup of the batch, in its
    order: the answer while its file is still the one packed (its request
    cleared), else None. `changed`: the answers left out because their file
    changed since. `cubins`: by sha256."""

    answers: list[Optional[pb.LocalAnswer]] = field(default_factory=list)
    changed: int = 0
    cubins: dict[str, bytes] = field(default_factory=dict)


def _is_sha256_hex(text: str) -> bool:
    return _SHA256_HEX.fullmatch(text) is not None


def _check_sha256_name(sha256: str) -> None:
    if not _is_sha256_hex(sha256):
        raise InvalidArgument(f"'{sha256}' is not a lower-case sha256 hex digest")


def _check_pack_key(key: str) -> None:
    if not _is_sha256_hex(key):
        raise InvalidArgument(f"'{key}' is not a lower-case sha256 hex pack key")


def _read_if_present(path: Union[str, Path], what: str) -> Optional[bytes]:
    """The file's bytes; None when it does not exist."""
    read = _read_stamped_if_present(path, what, stamp=False)
    return None if read is None else read[0]


def _read_stamped_if_present(
    path: Union[str, Path], what: str, stamp: bool = True
) -> Optional[tuple[bytes, Optional[os.stat_result]]]:
    """The file's bytes and, with `stamp`, what fstat() says of the file they
    were read from; None when it does not exist. Plain descriptor reads: a
    start reads two small files a lookup, where a buffered file object's
    set-up costs as much as the read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise local_cache_error(f"cannot read {what} {path}", error) from None
    try:
        info = os.fstat(descriptor) if stamp else None
        pieces = []
        while True:
            piece = os.read(descriptor, 1 << 20)
            if not piece:
                break
            pieces.append(piece)
        return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), info
    except OSError as error:
        raise local_cache_error(f"cannot read {what} {path}", error) from None
    finally:
        os.close(descriptor)


def _map_if_present(path: str, what: str) -> Optional[Union[mmap.mmap, bytes]]:
    """The whole file mapped read-only, its pages read in by the call; b""
    for an empty file, None when it does not exist. Only for files that are
    replaced whole, never written in place (packs): a file truncated while
    mapped would fault its reader."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise local_cache_error(f"cannot map {what} {path}", error) from None
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(info.st_mode):
            raise LocalCacheError(
                f"cannot map {what} {path}: not a regular file", "FAILED_PRECONDITION"
            )
        if info.st_size == 0:
            return b""
        return mmap.mmap(
            descriptor,
            info.st_size,
            flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0),
            prot=mmap.PROT_READ,
        )
    except OSError as error:
        raise local_cache_error(f"cannot map {what} {path}", error) from None
    finally:
        os.close(descriptor)


def _write_atomically(
    path: Path, contents: Union[bytes, Sequence[bytes]], what: str, mode: int = 0o666
) -> None:
    """Writes `contents` (bytes, or pieces one after the other) to a temporary
    name beside `path`, created with `mode` (less the umask), then renames it
    over `path`."""
    pieces = (contents,) if isinstance(contents, bytes) else contents
    with _temp_counter_lock:
        number = next(_temp_counter)
    temp_path = path.with_name(f"{path.name}.tmp.{os.getpid()}.{number}")
    try:
        descriptor = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        # close() may be the first to report a full disk (NFS, quotas): the
        # with block closes before the rename.
        with os.fdopen(descriptor, "wb") as file:
            file.writelines(pieces)
        os.replace(temp_path, path)
    except OSError as error:
        try:
            os.remove(temp_path)
        except OSError:
            pass
        raise local_cache_error(f"cannot write {what} {path}", error) from None


def _parse_answer(path: str, data: bytes) -> pb.LocalAnswer:
    """The answer in the bytes of its file `path`, its seal checked."""
    newline = data.find(b"\n")
    if not data.startswith(_SEAL_PREFIX) or newline != len(_SEAL_PREFIX) + _SHA256_HEX_LENGTH:
        raise LocalCacheCorrupt(f"local answer {path} has no valid seal line")
    seal = data[len(_SEAL_PREFIX) : newline]
    payload = data[newline + 1 :]
    if sha256_hex(payload).encode("ascii") != seal:
        raise LocalCacheCorrupt(f"local answer {path} does not match its seal (torn or corrupted)")
    answer = pb.LocalAnswer()
    try:
        answer.ParseFromString(payload)
    except DecodeError:
        raise LocalCacheCorrupt(f"local answer {path} does not parse") from None
    return answer


class LocalCache:
    """One local cache directory. Thread-safe, and safe to share between
    processes on one host."""

    # Packs kept in packs/ (see the module's doc).
    PACKS_KEPT = 8

    def __init__(self, directory: Union[str, os.PathLike[str], None] = None) -> None:
        """Opens `directory` (None = $AUTOTUNE_LOCAL_CACHE, else
        $XDG_CACHE_HOME/autotune, else ~/.cache/autotune), creating it and its
        answers/, cubins/ and packs/ (mode 0700) when missing.

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
        self._packs = os.path.join(chosen, "packs")
        for path in (
            self._directory,
            self._directory / "answers",
            self._directory / "cubins",
            self._directory / "packs",
        ):
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

    def pack_path(self, key: str) -> Path:
        """The pack of key `key` (pack_key(requests))."""
        return Path(self._pack_file(key))

    def has_answer(self, request: pb.LookupRequest) -> bool:
        """Whether an answer file exists for `request` (not read, not checked)."""
        return os.path.exists(self._answer_file(request))

    def _answer_file(self, request: pb.LookupRequest) -> str:
        return f"{self._answers}{answer_key(request)}.answer"

    def _cubin_file(self, sha256: str) -> str:
        return f"{self._cubins}{sha256}.cubin"

    def _pack_file(self, key: str) -> str:
        return f"{self._packs}{os.sep}{key}.pack"

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
        return None if data is None else _parse_answer(path, data)

    def get_stamped_answer(self, request: pb.LookupRequest) -> Optional[PackedAnswer]:
        """get_answer, with the key and the stamp of the file the answer was
        read from, as put_pack takes it; None when there is none. Raises as
        get_answer does."""
        key = answer_key(request)
        path = f"{self._answers}{key}.answer"
        read = _read_stamped_if_present(path, "local answer")
        if read is None:
            return None
        data, info = read
        assert info is not None
        return PackedAnswer(key, _parse_answer(path, data), FileStamp.of(info))

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

    def put_pack(
        self,
        key: str,
        answers: Sequence[Optional[PackedAnswer]],
        cubins: Mapping[str, Optional[bytes]],
    ) -> None:
        """Writes the pack `key` of `answers`, one per lookup of the batch in its
        order (None: no answer for it), and the `cubins` they use, by sha256.
        When the pack there is whole and was made from the same answer files
        (the same stamps) and the same cubins, its index would be written
        again byte for byte: only its time is refreshed. Then removes the
        oldest packs beyond PACKS_KEPT.

        Raises InvalidArgument (nothing written) for a key that is not a
        sha256 hex digest or a cubin whose bytes do not hash to its name,
        LocalCacheError when it cannot be written or xxhash is missing.
        """
        _check_pack_key(key)
        _require_xxhash()
        blobs: list[tuple[str, int, int]] = []  # (sha256, offset, size)
        pieces: list[bytes] = []
        offset = 0
        for sha256, cubin in sorted(cubins.items()):
            if cubin is None:
                continue
            if not _is_sha256_hex(sha256) or sha256_hex(cubin) != sha256:
                raise InvalidArgument(f"the cubin's bytes do not hash to {sha256}; no pack written")
            blobs.append((sha256, offset, len(cubin)))
            pieces.append(cubin)
            pieces.append(_ZEROS[: _align(len(cubin)) - len(cubin)])
            offset += _align(len(cubin))
        data = b"".join(pieces)
        chunks = _chunk_hashes(data)
        path = self._pack_file(key)
        if self._holds_pack(path, answers, blobs, len(data), chunks):
            try:
                os.utime(path)  # kept, as the most recent
            except OSError as error:
                raise local_cache_error(f"cannot refresh local pack {path}", error) from None
        else:
            head = _pack_head(_pack_index(answers, blobs, chunks))
            padding = bytes(_align(len(head)) - len(head))
            _write_atomically(Path(path), (head, padding, data), "local pack", 0o444)
        self._prune_old_packs(path)

    @staticmethod
    def _holds_pack(
        path: str,
        answers: Sequence[Optional[PackedAnswer]],
        blobs: list[tuple[str, int, int]],
        data_size: int,
        chunks: list[bytes],
    ) -> bool:
        """Whether the pack at `path` is whole and made from these answers'
        files (by their stamps) and these cubins: its index is then the one
        put_pack would write, without making it (serializing a thousand
        answers costs tens of ms here)."""
        try:
            mapped = _map_if_present(path, "local pack")
        except AutotuneError:
            return False
        if mapped is None:
            return False
        try:
            index, data_start = _read_pack_index(path, mapped)
            return (
                len(index.answers) == len(answers)
                and all(map(_packs_the_same, index.answers, answers))
                and [(blob.sha256, blob.offset, blob.size) for blob in index.cubins] == blobs
                and list(index.chunk_xxh3_128) == chunks
                and len(mapped) - data_start == data_size
                and _chunk_hashes(mapped, data_start) == chunks
            )
        except LocalCacheCorrupt:
            return False
        finally:
            if isinstance(mapped, mmap.mmap):
                mapped.close()

    def _prune_old_packs(self, keep: str) -> None:
        """Removes the least recently written packs beyond PACKS_KEPT, never `keep`."""
        try:
            names = os.listdir(self._packs)
        except OSError as error:
            raise local_cache_error(f"cannot list {self._packs}", error) from None
        packs: list[tuple[int, str]] = []  # (mtime ns, path)
        for name in names:
            path = f"{self._packs}{os.sep}{name}"
            if not name.endswith(".pack") or path == keep:
                continue
            try:
                packs.append((os.stat(path).st_mtime_ns, path))
            except OSError:
                continue
        packs.sort(reverse=True)  # the most recent first
        for _, path in packs[self.PACKS_KEPT - 1 :]:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as error:
                raise local_cache_error(f"cannot remove local pack {path}", error) from None

    def get_pack(self, key: str, answers: bool = True) -> Optional[Pack]:
        """The pack `key`, checked; None when there is none. `answers=False`:
        its cubins alone (Pack.answers left empty, no answer file looked at),
        for a start whose answers came from the service.

        Raises LocalCacheCorrupt naming the file when its index or any byte of
        its data fails its check (nothing of it is then served),
        InvalidArgument for a key that is not a sha256 hex digest,
        LocalCacheError when it cannot be read or xxhash is missing.
        """
        _check_pack_key(key)
        _require_xxhash()
        path = self._pack_file(key)
        mapped = _map_if_present(path, "local pack")
        if mapped is None:
            return None
        # No view of the mapping outlives the expression that makes it, so
        # that it can be unmapped after.
        try:
            index, data_start = _read_pack_index(path, mapped)
            pack = Pack()
            if answers:
                pack.answers, pack.changed = self._unchanged_answers(path, index)
            for chunk, check in enumerate(_chunk_hashes(mapped, data_start)):
                if check != index.chunk_xxh3_128[chunk]:
                    raise LocalCacheCorrupt(
                        f"local pack {path} does not match the check of its data at byte "
                        f"{chunk * _PACK_CHUNK_BYTES} (corrupted)"
                    )
            for blob in index.cubins:
                start = data_start + blob.offset
                pack.cubins[blob.sha256] = mapped[start : start + blob.size]
            return pack
        finally:
            if isinstance(mapped, mmap.mmap):
                mapped.close()

    def _unchanged_answers(
        self, path: str, index: pb.LocalPack
    ) -> tuple[list[Optional[pb.LocalAnswer]], int]:
        """The answers of the pack `path` whose file is still the one packed (the
        others None), and how many are not."""
        answers: list[Optional[pb.LocalAnswer]] = [None] * len(index.answers)
        changed = 0
        # Each answer's file is looked up in its folder, not by its whole path
        # (one walk of the directory's path, not one per answer). When the
        # folder cannot be opened, no file is found: every answer counts as
        # changed.
        try:
            folder: Optional[int] = os.open(
                self._answers, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
            )
        except OSError:
            folder = None
        try:
            for position, packed in enumerate(index.answers):
                name = packed.key
                if not name:
                    continue  # no answer for this lookup
                if _SHA256_HEX.fullmatch(name) is None:
                    raise LocalCacheCorrupt(f"local pack {path} has an answer with no valid key")
                try:
                    if folder is None:
                        raise FileNotFoundError
                    info = os.stat(f"{name}.answer", dir_fd=folder)
                except OSError:
                    changed += 1
                    continue
                if (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns) == (
                    packed.inode,
                    packed.size,
                    packed.mtime_ns,
                    packed.ctime_ns,
                ):
                    answers[position] = packed.answer
                else:
                    changed += 1
        finally:
            if folder is not None:
                os.close(folder)
        return answers, changed


def _pack_index(
    answers: Sequence[Optional[PackedAnswer]],
    blobs: list[tuple[str, int, int]],
    chunks: list[bytes],
) -> pb.LocalPack:
    index = pb.LocalPack(chunk_bytes=_PACK_CHUNK_BYTES, chunk_xxh3_128=chunks)
    for packed in answers:
        entry = index.answers.add()
        if packed is None or not packed.key:
            continue
        entry.answer.CopyFrom(packed.answer)
        entry.answer.ClearField("request")
        entry.key = packed.key
        entry.inode, entry.size, entry.mtime_ns, entry.ctime_ns = packed.stamp
    for sha256, offset, size in blobs:
        index.cubins.add(sha256=sha256, offset=offset, size=size)
    return index


def _pack_head(index: pb.LocalPack) -> bytes:
    """The first line and the index of a pack, as written and read."""
    index_bytes = index.SerializeToString(deterministic=True)
    check = _xxh3(index_bytes).hex().encode("ascii")
    return b"%s%d %s\n%s" % (_PACK_PREFIX, len(index_bytes), check, index_bytes)


def _packs_the_same(entry: pb.LocalPack.Answer, packed: Optional[PackedAnswer]) -> bool:
    """Whether an answer of an index is made from the file `packed` names."""
    if packed is None or not packed.key:
        return not entry.key
    return entry.key == packed.key and (
        entry.inode,
        entry.size,
        entry.mtime_ns,
        entry.ctime_ns,
    ) == tuple(packed.stamp)


def _read_pack_index(path: str, mapped: Union[mmap.mmap, bytes]) -> tuple[pb.LocalPack, int]:
    """The index of the pack in `mapped`, the bytes of the file `path`, and
    where its data starts: its first line, index and layout checked, not its
    data. Raises LocalCacheCorrupt naming the file."""

    def damaged(why: str) -> LocalCacheCorrupt:
        return LocalCacheCorrupt(f"local pack {path} {why}")

    first = mapped[:128]
    newline = first.find(b"\n")
    if not first.startswith(_PACK_PREFIX) or newline < 0:
        raise damaged("has no valid first line")
    fields = first[len(_PACK_PREFIX) : newline].split(b" ", 1)
    if len(fields) != 2 or not _DECIMAL.fullmatch(fields[0]) or len(fields[1]) != 32:
        raise damaged("has no valid first line")
    index_size = int(fields[0])
    if index_size > len(mapped) - newline - 1:
        raise damaged("is shorter than its index (torn)")
    index_bytes = mapped[newline + 1 : newline + 1 + index_size]
    data_start = min(len(mapped), _align(newline + 1 + index_size))
    data_size = len(mapped) - data_start
    if _xxh3(index_bytes).hex().encode("ascii") != fields[1]:
        raise damaged("does not match its index's check (torn or corrupted)")
    index = pb.LocalPack()
    try:
        index.ParseFromString(index_bytes)
    except DecodeError:
        raise damaged("has an index that does not parse") from None
    chunks = -(-data_size // _PACK_CHUNK_BYTES)
    if index.chunk_bytes != _PACK_CHUNK_BYTES or len(index.chunk_xxh3_128) != chunks:
        raise damaged("is not laid out as this version writes packs")
    for blob in index.cubins:
        if (
            not _is_sha256_hex(blob.sha256)
            or blob.offset > data_size
            or blob.size > data_size - blob.offset
        ):
            raise damaged(f"has a cubin out of its bounds ({blob.sha256})")
    return index, data_start
