"""Start-up lookups for inference servers, as client/startup_lookup.h does them.

Every (family, problem) a server will run is asked in one batch with one
deadline, answered by the service when it answers in time, else from the
local cache (local_cache.py):

    answers = startup_lookup(
        [Lookup("gla_decode", {"batch": 8, "heads": 32, "dim": 128}, "bf16")],
        deadline=2.0,
        device="NVIDIA H200",
        driver_version="13.0",  # cuDriverGetVersion, as "major.minor"
    )
    for answer in answers:
        if answer.error is not None:
            ...  # nothing to go on: str(answer.error) says why
        answer.source         # "service" or "local cache"
        answer.result.match   # EXACT / NEAREST / MISS (miss_kind, default_config)
        answer.result.cubin   # the entry's binary, sha256 checked, when at hand
        answer.note           # where it came from, what went wrong on the way

Cost: at most `deadline` seconds waiting on the service, whatever it does
(absent, slow, hung): one BatchLookup without cubins, then one GetBinaries,
by sha256, for the cubins the local cache lacks or holds damaged (a damaged cubin is refused
and fetched again). Then only local reads. Each answer the service gives is
written to the local cache with its cubin, and the batch's answers and
cubins to its pack (local_cache.py), so the next start finds them when the
service is down: behind the answers, by a thread of the StartupLookup,
which flush_local_cache() and close() wait for (startup_lookup() returns
once they are done); a failed write is said in the answer's note by then.
A start reads the batch's pack first, for the cubins when the service
answers and for the answers too when it does not, and reads file by file
what the pack lacks, holds older than answers/ does, or all of it when the
pack is damaged (the answers' note then names it).

Per item: an error from the service for one lookup (unknown family, bad
dims) is that answer's error; the service is not asked again and the local
cache not read for it. When the service cannot answer, an item with no
usable local answer gets an error naming the service's failure and the
local cache's.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional, Sequence, Union

from autotune_client.client import Client, error_from_code_number
from autotune_client.errors import AutotuneError, InvalidArgument, error_for_code
from autotune_client.lookups import Device, Lookup, LookupResult, describe_request, sha256_hex
from autotune_client.local_cache import (
    LocalCache,
    Pack,
    PackedAnswer,
    batch_pack_key,
    packs_supported,
)
from autotune_client.messages import pb

SOURCE_SERVICE = "service"
SOURCE_LOCAL_CACHE = "local cache"

# The value of `local_cache` that keeps no local cache, as in the C++ options.
NO_LOCAL_CACHE = "none"


@dataclass
class StartupAnswer:
    """The answer to one start-up lookup.

    `request` is the request as sent (device and driver version filled in).
    `result` is None exactly when `error` is set. `source` is SOURCE_SERVICE
    or SOURCE_LOCAL_CACHE. `note`, for people, says where the answer came
    from and what went wrong on the way: "the service did not answer (...);
    answer stored 2026-12-01T10:00:00Z by unix:///run/autotune.sock".
    """

    request: pb.LookupRequest
    result: Optional[LookupResult] = None
    source: str = SOURCE_SERVICE
    note: str = ""
    error: Optional[AutotuneError] = None

    def add_note(self, note: str) -> None:
        self.note = f"{self.note}; {note}" if self.note else note


class _Pending:
    """One answer while it is being put together: the response message and
    the cubin arrive separately."""

    def __init__(self, request: pb.LookupRequest) -> None:
        self.answer = StartupAnswer(request=request)
        self.response: Optional[pb.LookupResponse] = None
        self.cubin: Optional[bytes] = None
        self.fetched = False  # the cubin came from the service now
        # The response was read from the local cache for this answer alone:
        # the result takes it as it is, uncopied.
        self.response_is_own = False

    def binary_sha256(self) -> str:
        """The sha256 of the entry's binary; empty when the answer has none to
        load (an error, a MISS, an entry without a binary)."""
        if self.response is None or self.response.match == pb.MISS:
            return ""
        return self.response.entry.binary_sha256

    def finish(self) -> StartupAnswer:
        if self.answer.error is None and self.response is not None:
            try:
                self.answer.result = LookupResult.from_response(
                    self.response, self.cubin, copy=not self.response_is_own
                )
            except AutotuneError as error:
                self.answer.error = error
        return self.answer


def _now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class StartupLookup:
    """Start-up lookups against one service and one local cache. Thread-safe:
    lookup_all may be called from several threads at once."""

    def __init__(
        self,
        address: Optional[str] = None,
        deadline: float = 2.0,
        local_cache: Union[LocalCache, str, os.PathLike[str], None] = None,
        device: Union[Device, str, None] = None,
        driver_version: str = "",
        cubins: bool = True,
        client: Optional[Client] = None,
        recipes: bool = False,
    ) -> None:
        """`address`: the service (None = $AUTOTUNE_SERVER, else the default
        socket), or pass a `client`. `deadline`: seconds the service may cost
        in all, both calls together. `local_cache`: a LocalCache, a
        directory, None for the default directory, or NO_LOCAL_CACHE ("none")
        for none. `device` and `driver_version` are set on every lookup that
        leaves them unset. `cubins`: fetch the entries' binaries (False:
        configs only). `recipes`: ask for each answer's compile recipe with
        its source (LookupResponse.recipe), kept in the local cache too, so
        that a MISS can be compiled here (TunedKernel).

        Raises InvalidArgument for a deadline that is not positive, and
        LocalCacheError / InvalidArgument ("local cache: ...") when the local
        cache cannot be opened.
        """
        if deadline <= 0:
            raise InvalidArgument("the start-up deadline must be positive")
        self._recipes = recipes
        self._deadline = deadline
        self._device = Device(name=device) if isinstance(device, str) else device
        self._driver_version = driver_version
        self._cubins = cubins
        self._local: Optional[LocalCache]
        if isinstance(local_cache, LocalCache):
            self._local = local_cache
        elif local_cache is not None and os.fspath(local_cache) == NO_LOCAL_CACHE:
            self._local = None
        else:
            try:
                self._local = LocalCache(local_cache)
            except AutotuneError as error:
                raise error_for_code(error.code, f"local cache: {error.message}") from None
        # The batches' packs, where this Python can check them.
        self._packs = self._local is not None and packs_supported()
        # A client handed in stays the caller's to close.
        self._owns_client = client is None
        self._client = client if client is not None else Client(address, timeout=deadline)
        # The local cache's writes, behind the answers (one thread, made at
        # the first answers to keep).
        self._writes_lock = threading.Lock()
        self._writer: Optional[ThreadPoolExecutor] = None
        self._writes: list[Future[None]] = []

    @property
    def local_cache(self) -> Optional[LocalCache]:
        return self._local

    @property
    def client(self) -> Client:
        return self._client

    def flush_local_cache(self) -> None:
        """Waits until every answer given so far is written to the local
        cache (or its note says why not)."""
        with self._writes_lock:
            writes, self._writes = self._writes, []
        for write in writes:
            write.result()

    def close(self) -> None:
        """Waits for the local cache's writes, then closes the client this
        lookup made (not one it was given)."""
        self.flush_local_cache()
        with self._writes_lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> StartupLookup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def lookup_all(self, lookups: Sequence[Union[Lookup, pb.LookupRequest]]) -> list[StartupAnswer]:
        """One answer per lookup, in order. Never raises for the service or the
        local cache: failures are in the answers. InvalidArgument only for a
        lookup that cannot be made into a request (a dim that is not an
        integer, an unknown dtype name)."""
        deadline = time.monotonic() + self._deadline
        # The requests are made in the batch, and each answer refers to its own.
        batch = pb.BatchLookupRequest(include_recipe=self._recipes)
        batch.lookups.extend(
            lookup.to_request() if isinstance(lookup, Lookup) else lookup for lookup in lookups
        )
        pending = [_Pending(self._filled_in(request)) for request in batch.lookups]
        if not pending:
            return []
        # A first start on this host (most answers not kept here, judged on
        # up to 16 of them): the cubins come with the answers, in one call.
        # Otherwise the answers alone, and the cubins the local cache lacks
        # by their sha256 (GetBinaries).
        cubins_now = self._cubins and self._mostly_new(pending)
        batch.include_cubin = cubins_now
        # Serialized once: sent, and the key of the batch's pack.
        serialized = batch.SerializeToString(deterministic=True)
        key = batch_pack_key(serialized) if self._packs else ""
        try:
            answered = self._client.raw_batch_lookup(
                batch, timeout=self._deadline, serialized=serialized
            )
        except AutotuneError as why:
            self._from_local_cache(why, pending, key)
            return [item.finish() for item in pending]
        for item, result in zip(pending, answered.results):
            item.answer.source = SOURCE_SERVICE
            if result.error_code != 0:
                item.answer.error = error_from_code_number(result.error_code, result.error_message)
                continue
            item.response = result.response
            recipe = item.response.recipe
            if item.response.HasField("recipe") and not recipe.source:
                recipe.source = answered.sources.get(recipe.source_sha256, "")
            item.answer.note = f"answered by {self._client.address}"
            sha256 = item.binary_sha256()
            if cubins_now and sha256:
                cubin = answered.binaries.get(sha256)
                if cubin is None:
                    item.answer.add_note("the service sent no cubin for it")
                elif sha256_hex(cubin) != sha256:
                    item.answer.add_note(
                        f"the cubin the service sent does not match {sha256}; refused"
                    )
                else:
                    item.cubin = cubin
                    item.fetched = True
        if self._cubins and not cubins_now:
            self._attach_cubins(deadline, pending, key)
        answers = [item.finish() for item in pending]
        if self._local is not None and any(self._keeps(item) for item in pending):
            with self._writes_lock:
                if self._writer is None:
                    self._writer = ThreadPoolExecutor(1, thread_name_prefix="autotune-local-cache")
                self._writes.append(self._writer.submit(self._store_all, pending, key))
        return answers

    @staticmethod
    def _keeps(item: _Pending) -> bool:
        """Whether the item's answer is one to keep in the local cache."""
        return item.answer.error is None and item.response is not None

    def _store_all(self, pending: list[_Pending], key: str) -> None:
        """Writes the answers to keep and their cubins, then the batch's pack:
        each answer as its file holds it now."""
        packed: list[Optional[PackedAnswer]] = [None] * len(pending)
        cubins: dict[str, Optional[bytes]] = {}
        kept: list[_Pending] = []
        for position, item in enumerate(pending):
            if not self._keeps(item):
                continue
            kept.append(item)
            packed[position] = self._store(item)
            if packed[position] is not None and item.cubin is not None:
                cubins[item.binary_sha256()] = item.cubin
        if not key or self._local is None:
            return
        try:
            self._local.put_pack(key, packed, cubins)
        except AutotuneError as error:
            for item in kept:
                item.answer.add_note(f"not kept in the local cache's pack: {error.message}")

    def _read_pack(self, key: str, answers: bool = True) -> tuple[Optional[Pack], str]:
        """The batch's pack (None when there is none or packs are not used),
        with its answers or not (LocalCache.get_pack), and, when it cannot be
        read, a note that says why."""
        if not key or self._local is None:
            return None, ""
        try:
            return self._local.get_pack(key, answers=answers), ""
        except AutotuneError as error:
            return None, f"{error.message}; read file by file"

    def _filled_in(self, request: pb.LookupRequest) -> pb.LookupRequest:
        """`request` without include_cubin, and with the device and driver
        version this StartupLookup sets where it has none; returns it."""
        if request.include_cubin:
            request.ClearField("include_cubin")
        if self._device is not None and not request.HasField("device"):
            request.device.CopyFrom(self._device.to_proto())
        if not request.driver_version and self._driver_version:
            request.driver_version = self._driver_version
        return request

    def _mostly_new(self, pending: list[_Pending]) -> bool:
        """Whether the local cache lacks most of these answers (a sample)."""
        if self._local is None:
            return True
        step = max(1, len(pending) // 16)
        sample = pending[::step]
        kept = sum(1 for item in sample if self._local.has_answer(item.answer.request))
        return 2 * kept < len(sample)

    def _attach_cubins(self, deadline: float, pending: list[_Pending], key: str) -> None:
        """Fills each item's cubin from the local cache (the pack `key` first)
        or, for those it lacks, from the service before `deadline`."""
        # A damaged pack only costs time: its cubins are read file by file.
        pack, _ = self._read_pack(key, answers=False)
        fetch = pb.GetBinariesRequest()
        fetched: list[_Pending] = []
        for item in pending:
            sha256 = item.binary_sha256()
            if item.answer.error is not None or not sha256:
                continue
            if pack is not None and sha256 in pack.cubins:
                item.cubin = pack.cubins[sha256]
                continue
            if self._local is not None:
                try:
                    cubin = self._local.get_cubin(sha256)
                except AutotuneError as error:
                    item.answer.add_note(f"{error.message}; fetched again")
                else:
                    if cubin is not None:
                        item.cubin = cubin
                        continue
            fetch.sha256.append(sha256)
            fetched.append(item)
        if not fetched:
            return
        left = deadline - time.monotonic()
        binaries = pb.GetBinariesResponse()
        failure: Optional[AutotuneError] = None
        if left > 0:
            try:
                binaries = self._client.raw_get_binaries(fetch, timeout=left)
            except AutotuneError as error:
                failure = error
        else:
            failure = error_for_code("DEADLINE_EXCEEDED", "no time was left for the cubins")
        for item in fetched:
            sha256 = item.binary_sha256()
            if failure is not None:
                item.answer.add_note(f"its cubin was not fetched: {failure.message}")
            elif sha256 not in binaries.binaries:
                item.answer.add_note(
                    "the service no longer stores its cubin (removed since it answered)"
                )
            elif sha256_hex(binaries.binaries[sha256]) != sha256:
                item.answer.add_note(
                    f"the cubin the service sent does not match {sha256}; refused"
                )
            else:
                item.cubin = binaries.binaries[sha256]
                item.fetched = True

    def _store(self, item: _Pending) -> Optional[PackedAnswer]:
        """Writes the answer and its cubin to the local cache; a failure is
        noted: serving this start is what matters, the next asks again.
        Returns the answer as its file holds it now, for the pack; None when
        that is not this answer (a failed write, another writer's since)."""
        if self._local is None or item.response is None:
            return None
        sha256 = item.binary_sha256()
        local = pb.LocalAnswer(
            request=item.answer.request,
            response=item.response,
            server=self._client.address,
            stored_at=_now_text(),
        )
        try:
            # An answer the cache holds already is not written again, nor a
            # cubin it gave.
            there = self._stamped_answer(item.answer.request)
            holds = there is not None and there.answer.response == item.response
            if not holds:
                self._local.put_answer(local)
                # Read back for the pack: the file may be another writer's by now.
                there = self._stamped_answer(item.answer.request)
                holds = there is not None and there.answer.response == item.response
            if item.cubin is not None and item.fetched:
                self._local.put_cubin(sha256, item.cubin)
        except AutotuneError as error:
            item.answer.add_note(f"not kept in the local cache: {error.message}")
            return None
        return there if holds else None

    def _stamped_answer(self, request: pb.LookupRequest) -> Optional[PackedAnswer]:
        """The answer the local cache holds for `request`; None when it holds
        none or one that cannot be read (written again, then)."""
        assert self._local is not None
        try:
            return self._local.get_stamped_answer(request)
        except AutotuneError:
            return None

    def _from_local_cache(self, why: AutotuneError, pending: list[_Pending], key: str) -> None:
        """The answers from the local cache when the service failed with `why`:
        from the batch's pack `key` first; those it lacks (or holds older than
        answers/ does) file by file."""
        service = f"the service did not answer ({why.message})"
        pack, pack_note = self._read_pack(key)
        packed = pack.answers if pack is not None and len(pack.answers) == len(pending) else None
        for position, item in enumerate(pending):
            answer = item.answer
            answer.source = SOURCE_LOCAL_CACHE
            if self._local is None:
                answer.error = error_for_code(
                    why.code,
                    f"{describe_request(answer.request)}: {service} and there is no local cache",
                )
                continue
            directory = self._local.directory
            try:
                local = packed[position] if packed is not None else None
                if local is None:
                    local = self._local.get_answer(answer.request)
            except AutotuneError as error:
                answer.error = error_for_code(
                    error.code,
                    f"{describe_request(answer.request)}: {service} and the local cache "
                    f"{directory}: {error.message}",
                )
                continue
            if local is None:
                answer.error = error_for_code(
                    why.code,
                    f"{describe_request(answer.request)}: {service} and the local cache "
                    f"{directory} has no answer for it",
                )
                continue
            item.response = local.response
            item.response_is_own = True
            answer.note = f"{service}; answer stored {local.stored_at} by {local.server}"
            if pack_note:
                answer.add_note(pack_note)
            sha256 = item.binary_sha256()
            if not self._cubins or not sha256:
                continue
            if pack is not None and sha256 in pack.cubins:
                item.cubin = pack.cubins[sha256]
                continue
            try:
                cubin = self._local.get_cubin(sha256)
            except AutotuneError as error:
                answer.add_note(error.message)
                continue
            if cubin is None:
                answer.add_note("its cubin is not in the local cache")
            else:
                item.cubin = cubin


def startup_lookup(
    lookups: Sequence[Union[Lookup, pb.LookupRequest]],
    deadline: float = 2.0,
    local_cache: Union[LocalCache, str, os.PathLike[str], None] = None,
    device: Union[Device, str, None] = None,
    driver_version: str = "",
    address: Optional[str] = None,
    cubins: bool = True,
    recipes: bool = False,
) -> list[StartupAnswer]:
    """One StartupLookup.lookup_all with a client of its own, closed afterwards.
    The arguments are StartupLookup's."""
    with StartupLookup(
        address=address,
        deadline=deadline,
        local_cache=local_cache,
        device=device,
        driver_version=driver_version,
        cubins=cubins,
        recipes=recipes,
    ) as lookup:
        return lookup.lookup_all(lookups)
