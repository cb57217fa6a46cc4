"""The local cache's packs: the format of client/local_cache.cc, byte for byte
(checked against the C++ client itself through autotune-local-pack), their
checks, pruning, and start-ups where the xxhash module is missing."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import unittest
import warnings
from pathlib import Path
from typing import Optional
from unittest import mock

import support

from autotune_client import (
    SOURCE_LOCAL_CACHE,
    InvalidArgument,
    LocalCache,
    LocalCacheCorrupt,
    LocalCacheError,
    Match,
    StartupLookup,
    answer_key,
    pb,
)
from autotune_client import local_cache
from autotune_client.local_cache import PackedAnswer, batch_pack_key, pack_key, packs_supported

try:
    import xxhash
except ImportError:  # python3-xxhash: without it, only WithoutXxhashTest runs
    xxhash = None  # type: ignore[assignment]

# The sizes of the test's cubins: one over a 256 KiB chunk, none a multiple
# of 256 bytes.
CUBIN_SIZES = {1: 1000, 2: 300_001, 3: 5000}


def request(batch: int) -> pb.LookupRequest:
    """A lookup whose dims are set out of name order: a deterministic
    serialization sorts them, as the C++ one does."""
    made = pb.LookupRequest(
        family="gla_decode",
        device=pb.Device(name="NVIDIA H200", compute_capability=90, sm_count=132),
        driver_version="12.8",
    )
    made.problem.dims["heads"] = 32
    made.problem.dims["batch"] = batch
    made.problem.dims["dim"] = 128
    made.problem.dtype = pb.BFLOAT16
    return made


def cubin(batch: int) -> bytes:
    block = hashlib.sha256(str(batch).encode()).digest()
    data = b"\x7fELF" + block * (CUBIN_SIZES[batch] // len(block) + 1)
    return data[: CUBIN_SIZES[batch]]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def answer(batch: int, stored_at: str = "2026-12-01T10:00:00Z") -> pb.LocalAnswer:
    response = pb.LookupResponse(match=pb.EXACT)
    response.entry.binary_sha256 = sha256_hex(cubin(batch))
    for name, value in (("VEC", 4), ("BLOCK", 128), ("UNROLL", batch)):
        response.entry.config.params[name] = value
    return pb.LocalAnswer(
        request=request(batch),
        response=response,
        server="unix:///run/autotune.sock",
        stored_at=stored_at,
    )


def without_request(local: pb.LocalAnswer) -> pb.LocalAnswer:
    copy = pb.LocalAnswer()
    copy.CopyFrom(local)
    copy.ClearField("request")
    return copy


def flip_byte(path: Path, from_end: int) -> None:
    """Changes one byte of a (read-only) pack in place."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as file:
        file.seek(-from_end, os.SEEK_END)
        byte = file.read(1)
        file.seek(-from_end, os.SEEK_END)
        file.write(bytes([byte[0] ^ 1]))


class PackTestCase(unittest.TestCase):
    """A local cache holding the answers and cubins of batches 1, 2 and 3."""

    batches = (1, 2, 3)
    needs_xxhash = True

    def setUp(self) -> None:
        if self.needs_xxhash and xxhash is None:
            self.skipTest("python3-xxhash is not installed: packs are not read or written")
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        self.root = Path(temp.name)
        self.cache = LocalCache(self.root / "local")
        self.requests = [request(batch) for batch in self.batches]
        self.cubins = {sha256_hex(cubin(batch)): cubin(batch) for batch in self.batches}
        for batch in self.batches:
            self.cache.put_answer(answer(batch))
            self.cache.put_cubin(sha256_hex(cubin(batch)), cubin(batch))
        self.key = pack_key(self.requests)
        self.path = self.cache.pack_path(self.key)

    def packed(self) -> list[Optional[PackedAnswer]]:
        """Each lookup's answer as its file holds it now."""
        packed: list[Optional[PackedAnswer]] = []
        for lookup in self.requests:
            stamped = self.cache.get_stamped_answer(lookup)
            assert stamped is not None
            self.assertEqual(stamped.key, answer_key(lookup))
            packed.append(stamped)
        return packed

    def put_pack(self) -> None:
        self.cache.put_pack(self.key, self.packed(), self.cubins)


class PackTest(PackTestCase):
    def test_the_key_is_the_documented_text_of_the_requests_in_order(self) -> None:
        one = request(1).SerializeToString(deterministic=True)
        two = request(2).SerializeToString(deterministic=True)
        text = b"autotune-pack 2\n%d\n%s%d\n%s" % (len(one), one, len(two), two)
        key = pack_key([request(1), request(2)])
        self.assertEqual(key, sha256_hex(text))
        # Map entries in key order, whatever order they were set in.
        sorted_dims = request(1)
        sorted_dims.problem.ClearField("dims")
        for name, value in (("batch", 1), ("dim", 128), ("heads", 32)):
            sorted_dims.problem.dims[name] = value
        self.assertEqual(sorted_dims.SerializeToString(deterministic=True), one)
        # include_cubin does not count; the order does.
        with_cubin = request(1)
        with_cubin.include_cubin = True
        self.assertEqual(pack_key([with_cubin, request(2)]), key)
        self.assertNotEqual(pack_key([request(2), request(1)]), key)
        # From the batch as a start-up sends it, its flags set.
        batch = pb.BatchLookupRequest(
            lookups=[request(1), request(2)], include_cubin=True, include_recipe=True
        )
        self.assertEqual(batch_pack_key(batch.SerializeToString(deterministic=True)), key)
        for not_a_batch in (b"\x0a\x05ab", b"\x0d\x00\x00\x00\x00", b"\x0a"):
            with self.assertRaisesRegex(InvalidArgument, "not a serialized BatchLookupRequest"):
                batch_pack_key(not_a_batch)

    def test_a_pack_gives_back_its_answers_and_cubins_from_one_read_only_file(self) -> None:
        self.assertIsNone(self.cache.get_pack(self.key))
        self.put_pack()
        self.assertEqual(os.stat(self.path).st_mode & 0o222, 0)  # never written in place
        pack = self.cache.get_pack(self.key)
        assert pack is not None
        self.assertEqual(pack.changed, 0)
        self.assertEqual(len(pack.answers), 3)
        for batch, back in zip(self.batches, pack.answers):
            assert back is not None
            self.assertEqual(back, without_request(answer(batch)))  # the key names it
        self.assertEqual(pack.cubins, self.cubins)

    def test_the_file_is_laid_out_as_local_cache_cc_writes_it(self) -> None:
        self.put_pack()
        data = self.path.read_bytes()
        first_line, rest = data.split(b"\n", 1)
        prefix, size, check = first_line.rsplit(b" ", 2)
        self.assertEqual(prefix, b"autotune-pack 1")
        index_bytes = rest[: int(size)]
        # XXH3-128 as XXH128_canonicalFromHash writes it: big-endian.
        digest = xxhash.xxh3_128_intdigest(index_bytes).to_bytes(16, "big")
        self.assertEqual(check, digest.hex().encode())
        index = pb.LocalPack.FromString(index_bytes)
        self.assertEqual(index.SerializeToString(deterministic=True), index_bytes)
        data_start = -(-(len(first_line) + 1 + int(size)) // 256) * 256
        self.assertEqual(data[len(first_line) + 1 + int(size) : data_start].strip(b"\0"), b"")
        packed = data[data_start:]
        self.assertEqual(len(packed) % 256, 0)
        keys = [answer_key(lookup) for lookup in self.requests]
        self.assertEqual([entry.key for entry in index.answers], keys)
        for entry, lookup in zip(index.answers, self.requests):
            info = os.stat(self.cache.answer_path(lookup))
            self.assertEqual(
                (entry.inode, entry.size, entry.mtime_ns, entry.ctime_ns),
                (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns),
            )
        # The cubins in sha256 order, each at a multiple of 256 bytes.
        self.assertEqual([blob.sha256 for blob in index.cubins], sorted(self.cubins))
        for blob in index.cubins:
            self.assertEqual(blob.offset % 256, 0)
            at = blob.offset
            self.assertEqual(packed[at : at + blob.size], self.cubins[blob.sha256])
        self.assertEqual(index.chunk_bytes, 256 * 1024)
        self.assertEqual(
            list(index.chunk_xxh3_128),
            [
                xxhash.xxh3_128_digest(packed[start : start + 256 * 1024])
                for start in range(0, len(packed), 256 * 1024)
            ],
        )
        self.assertEqual(len(index.chunk_xxh3_128), 2)

    def test_a_lookup_without_an_answer_keeps_its_place(self) -> None:
        packed = self.packed()
        packed[1] = None  # the service had no answer for it
        self.cache.put_pack(self.key, packed, self.cubins)
        pack = self.cache.get_pack(self.key)
        assert pack is not None
        self.assertEqual([back is not None for back in pack.answers], [True, False, True])
        self.assertEqual(pack.changed, 0)

    def test_the_pack_is_rewritten_only_when_its_contents_change(self) -> None:
        self.put_pack()
        first = os.stat(self.path)
        os.utime(self.path, ns=(1000, 1000))
        self.put_pack()
        same = os.stat(self.path)
        self.assertEqual(same.st_ino, first.st_ino)  # kept, only its time refreshed
        self.assertGreater(same.st_mtime_ns, 1000)
        # An answer kept again since: written anew.
        self.cache.put_answer(answer(1, "2026-12-04T00:00:00Z"))
        self.put_pack()
        rewritten = os.stat(self.path)
        self.assertNotEqual(rewritten.st_ino, first.st_ino)
        pack = self.cache.get_pack(self.key)
        assert pack is not None and pack.answers[0] is not None
        self.assertEqual(pack.answers[0].stored_at, "2026-12-04T00:00:00Z")
        # Another cubin, or one less answer: written anew.
        fewer_cubins = {sha: self.cubins[sha] for sha in sorted(self.cubins)[:2]}
        self.cache.put_pack(self.key, self.packed(), fewer_cubins)
        self.assertNotEqual(os.stat(self.path).st_ino, rewritten.st_ino)
        rewritten = os.stat(self.path)
        self.cache.put_pack(self.key, self.packed()[:2] + [None], self.cubins)
        self.assertNotEqual(os.stat(self.path).st_ino, rewritten.st_ino)
        # Damaged in place: written anew, whole.
        rewritten = os.stat(self.path)
        flip_byte(self.path, 300)
        self.cache.put_pack(self.key, self.packed()[:2] + [None], self.cubins)
        self.assertNotEqual(os.stat(self.path).st_ino, rewritten.st_ino)
        self.assertIsNotNone(self.cache.get_pack(self.key))

    def test_an_answer_written_since_the_pack_is_not_served_from_it(self) -> None:
        self.put_pack()
        # Another process keeps a newer answer for the first lookup.
        self.cache.put_answer(answer(1, "2026-12-05T00:00:00Z"))
        pack = self.cache.get_pack(self.key)
        assert pack is not None
        self.assertEqual(pack.changed, 1)
        self.assertIsNone(pack.answers[0])
        self.assertIsNotNone(pack.answers[1])
        self.assertEqual(len(pack.cubins), 3)  # named by their bytes: never stale
        # Removed since: not served either.
        os.remove(self.cache.answer_path(request(2)))
        pack = self.cache.get_pack(self.key)
        assert pack is not None
        self.assertEqual([back is not None for back in pack.answers], [False, False, True])

    def test_a_damaged_pack_raises_local_cache_corrupt_naming_the_file(self) -> None:
        self.put_pack()
        whole = self.path.read_bytes()

        def restore(contents: bytes = whole) -> None:
            os.remove(self.path)
            self.path.write_bytes(contents)

        # A byte of the last cubin.
        flip_byte(self.path, 300)
        with self.assertRaises(LocalCacheCorrupt) as caught:
            self.cache.get_pack(self.key)
        self.assertEqual(caught.exception.code, "DATA_LOSS")
        self.assertIn(f"local pack {self.path} ", caught.exception.message)
        self.assertIn("does not match the check of its data at byte 262144 (corrupted)",
                      caught.exception.message)
        # A byte of the index.
        restore()
        flip_byte(self.path, len(whole) - 60)
        with self.assertRaisesRegex(LocalCacheCorrupt, "does not match its index's check"):
            self.cache.get_pack(self.key)
        # Cut short, in the index and in the data.
        for size in (len(whole) // 400, len(whole) - 10):
            restore(whole[:size])
            with self.assertRaisesRegex(LocalCacheCorrupt, str(self.path)):
                self.cache.get_pack(self.key)
        # Not a pack at all, or empty.
        for contents in (b"autotune-answer 1 ...\n", b""):
            restore(contents)
            with self.assertRaisesRegex(LocalCacheCorrupt, "has no valid first line"):
                self.cache.get_pack(self.key)
        # Writing it again mends it.
        os.remove(self.path)
        self.put_pack()
        pack = self.cache.get_pack(self.key)
        assert pack is not None
        self.assertEqual(len(pack.answers), 3)

    def test_a_pack_that_cannot_be_read_is_an_error_not_a_miss(self) -> None:
        os.mkdir(self.path)
        with self.assertRaisesRegex(LocalCacheError, "cannot map local pack") as caught:
            self.cache.get_pack(self.key)
        self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")

    def test_a_pack_of_cubins_that_do_not_match_their_names_is_not_written(self) -> None:
        cubins = dict(self.cubins)
        cubins[sha256_hex(b"other")] = b"not other"
        with self.assertRaisesRegex(InvalidArgument, "do not hash to"):
            self.cache.put_pack(self.key, self.packed(), cubins)
        self.assertFalse(self.path.exists())
        with self.assertRaisesRegex(InvalidArgument, "pack key"):
            self.cache.put_pack("../answers/x", self.packed(), {})
        with self.assertRaisesRegex(InvalidArgument, "pack key"):
            self.cache.get_pack("../answers/x")

    def test_only_the_most_recently_written_packs_are_kept(self) -> None:
        keys = []
        for i in range(LocalCache.PACKS_KEPT + 3):
            keys.append(pack_key([request(100 + i)]))
            self.cache.put_pack(keys[-1], self.packed()[:1], {})
            # Times apart, so that the order is theirs and not the file system's.
            at = (1000 + i) * 1_000_000_000
            os.utime(self.cache.pack_path(keys[-1]), ns=(at, at))
        kept = [self.cache.pack_path(key).exists() for key in keys]
        self.assertEqual(kept, [i >= 3 for i in range(len(keys))])
        self.assertEqual(sorted(os.listdir(self.root / "local" / "packs")),
                         sorted(f"{key}.pack" for key in keys[3:]))


class WithoutXxhashTest(PackTestCase):
    """Where python3-xxhash is missing, packs are neither read nor written, a
    start-up is served from answers/ and cubins/, and that is said once."""

    needs_xxhash = False

    def setUp(self) -> None:
        super().setUp()
        if xxhash is not None:
            self.put_pack()  # a pack that a start must not read
        without = mock.patch.object(local_cache, "_xxhash", None)
        without.start()
        self.addCleanup(without.stop)
        not_warned = mock.patch.object(local_cache, "_packs_warned", False)
        not_warned.start()
        self.addCleanup(not_warned.stop)

    def test_packs_are_skipped_and_that_is_said_once(self) -> None:
        # Without its cubin files, only the pack could give the cubins.
        for sha in self.cubins:
            os.remove(self.cache.cubin_path(sha))
        down = f"unix://{self.root / 'nobody.sock'}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                with StartupLookup(address=down, deadline=1.0, local_cache=self.cache) as lookup:
                    answers = lookup.lookup_all(self.requests)
                for answer in answers:
                    self.assertIsNone(answer.error)
                    self.assertEqual(answer.source, SOURCE_LOCAL_CACHE)
                    assert answer.result is not None
                    self.assertEqual(answer.result.match, Match.EXACT)
                    self.assertIsNone(answer.result.cubin)
                    self.assertIn("its cubin is not in the local cache", answer.note)
                    self.assertNotIn("local pack", answer.note)
        said = [str(warning.message) for warning in caught]
        self.assertEqual(len(said), 1, said)
        self.assertIn("python3-xxhash", said[0])
        self.assertFalse(packs_supported())
        with self.assertRaisesRegex(LocalCacheError, "xxhash") as refused:
            self.cache.get_pack(self.key)
        self.assertEqual(refused.exception.code, "FAILED_PRECONDITION")
        with self.assertRaisesRegex(LocalCacheError, "xxhash"):
            self.cache.put_pack(self.key, self.packed(), self.cubins)


class CrossLanguageTest(PackTestCase):
    """Packs the C++ client writes are read here and those written here are
    read by it (autotune-local-pack): the same key, the same bytes, the same
    checks."""

    def setUp(self) -> None:
        if not os.access(support.LOCAL_PACK, os.X_OK):
            self.skipTest(
                f"{support.LOCAL_PACK} is not built; build it or set AUTOTUNE_LOCAL_PACK"
            )
        super().setUp()
        self.requests_file = self.root / "requests.pb"
        batch = pb.BatchLookupRequest(lookups=self.requests)
        self.requests_file.write_bytes(batch.SerializeToString())

    def cpp(self, *args: str) -> str:
        """The tool's output; the test fails when it does."""
        ran = support.run_local_pack(*args)
        self.assertEqual(ran.returncode, 0, ran.stderr)
        return ran.stdout

    def cpp_read(self) -> list[str]:
        return self.cpp("read", str(self.cache.directory), str(self.requests_file)).splitlines()

    def expected_read(self, answers: list[Optional[pb.LocalAnswer]], changed: int = 0) -> list[str]:
        """What `autotune-local-pack read` prints for these answers and the cubins."""
        lines = [f"changed {changed}"]
        for position, back in enumerate(answers):
            digest = "-" if back is None else sha256_hex(back.SerializeToString(deterministic=True))
            lines.append(f"answer {position} {digest}")
        for sha in sorted(self.cubins):
            lines.append(f"cubin {sha} {len(self.cubins[sha])} {sha}")
        return lines

    def test_both_clients_compute_the_same_key(self) -> None:
        self.assertEqual(self.cpp("key", str(self.requests_file)).strip(), self.key)

    def test_a_pack_written_here_is_read_by_the_cpp_client(self) -> None:
        self.put_pack()
        expected = [without_request(answer(batch)) for batch in self.batches]
        self.assertEqual(self.cpp_read(), self.expected_read(list(expected)))
        # An answer kept since is left out there too.
        self.cache.put_answer(answer(2, "2026-12-05T00:00:00Z"))
        self.assertEqual(
            self.cpp_read(), self.expected_read([expected[0], None, expected[2]], changed=1)
        )

    def test_a_pack_the_cpp_client_wrote_is_read_here_and_is_the_same_file(self) -> None:
        written = self.cpp("write", str(self.cache.directory), str(self.requests_file)).strip()
        self.assertEqual(written, str(self.path))
        pack = self.cache.get_pack(self.key)
        assert pack is not None
        self.assertEqual(pack.changed, 0)
        self.assertEqual(pack.answers, [without_request(answer(batch)) for batch in self.batches])
        self.assertEqual(pack.cubins, self.cubins)
        # Written here from the same files: the same bytes.
        cpp_bytes = self.path.read_bytes()
        os.remove(self.path)
        self.put_pack()
        self.assertEqual(self.path.read_bytes(), cpp_bytes)
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode) & 0o222, 0)

    def test_both_clients_refuse_a_damaged_pack_in_the_same_words(self) -> None:
        self.put_pack()
        whole = self.path.read_bytes()
        for from_end in (300, len(whole) - 60):  # a cubin's byte, an index's byte
            os.remove(self.path)
            self.path.write_bytes(whole)
            flip_byte(self.path, from_end)
            with self.assertRaises(LocalCacheCorrupt) as caught:
                self.cache.get_pack(self.key)
            ran = support.run_local_pack("read", str(self.cache.directory), str(self.requests_file))
            self.assertEqual(ran.returncode, 1)
            self.assertEqual(ran.stderr.strip(), str(caught.exception))


if __name__ == "__main__":
    unittest.main()
