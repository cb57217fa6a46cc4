"""The local cache: its format (shared with client/local_cache.cc), its
checks, and concurrent writers."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import support  # noqa: F401  (puts the package on sys.path)

from autotune_client import (
    InvalidArgument,
    LocalCache,
    LocalCacheCorrupt,
    LocalCacheError,
    answer_key,
    default_local_cache_directory,
    pb,
)


CPP_CACHE = Path(__file__).resolve().parent / "testdata" / "cpp_local_cache"


def request(batch: int) -> pb.LookupRequest:
    """The request of client/local_cache_test.cc."""
    return pb.LookupRequest(
        family="gla_decode",
        problem=pb.Problem(dims={"batch": batch, "dim": 128}, dtype=pb.BFLOAT16),
        device=pb.Device(name="NVIDIA H200"),
    )


def answer(batch: int, stored_at: str = "2026-12-01T10:00:00Z") -> pb.LocalAnswer:
    local = pb.LocalAnswer(
        request=request(batch),
        response=pb.LookupResponse(
            match=pb.EXACT, entry=pb.Entry(config=pb.Config(params={"VEC": 4}))
        ),
        server="unix:///run/autotune.sock",
        stored_at=stored_at,
    )
    return local


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_rounds(directory: str, writer: int, big: bytes) -> None:
    """One of the concurrent writers: 200 answers of different sizes, each
    with the same big cubin."""
    cache = LocalCache(directory)
    sha = sha256_hex(big)
    for round_number in range(200):
        local = answer(8, f"writer {writer} round {round_number}")
        # Answers of different sizes, so a torn one could not pass as whole.
        local.server = "s" * (1 + (round_number * 37) % 4000)
        cache.put_answer(local)
        cache.put_cubin(sha, big)


class LocalCacheTest(unittest.TestCase):
    def setUp(self) -> None:
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        self.root = Path(temp.name)
        self.cache = LocalCache(self.root / "local")

    def test_the_key_is_the_documented_text(self) -> None:
        # The same text and hash as TheKeyIsTheDocumentedText in the C++ test.
        text = b"autotune-lookup 1\ngla_decode\n\nbatch=8,dim=128\n3\nNVIDIA H200\n0\n0\n0\n\n"
        self.assertEqual(answer_key(request(8)), sha256_hex(text))
        # Dims are sorted by name, whatever order they were set in.
        reordered = request(8)
        reordered.problem.ClearField("dims")
        reordered.problem.dims["dim"] = 128
        reordered.problem.dims["batch"] = 8
        self.assertEqual(answer_key(reordered), answer_key(request(8)))
        full = pb.LookupRequest(
            family="flash_attn",
            family_hash="ab" * 32,
            problem=pb.Problem(dims={"seq": 512, "batch": 4, "heads": 32}, dtype=pb.FLOAT16),
            device=pb.Device(name="NVIDIA H100", compute_capability=90, sm_count=132),
            exact_only=True,
            driver_version="12.8",
        )
        self.assertEqual(
            answer_key(full),
            sha256_hex(
                b"autotune-lookup 1\nflash_attn\n" + b"ab" * 32 + b"\nbatch=4,heads=32,seq=512\n"
                b"2\nNVIDIA H100\n90\n132\n1\n12.8\n"
            ),
        )

    def test_answers_come_back_by_their_lookup(self) -> None:
        local = answer(8)
        local.request.include_cubin = True
        local.response.cubin = b"not kept here"
        self.cache.put_answer(local)
        back = self.cache.get_answer(request(8))
        assert back is not None
        self.assertEqual(back.response.entry.config.params["VEC"], 4)
        self.assertEqual(back.response.cubin, b"")
        self.assertFalse(back.request.include_cubin)
        self.assertEqual(back.server, "unix:///run/autotune.sock")
        self.assertEqual(back.stored_at, "2026-12-01T10:00:00Z")
        self.assertIsNone(self.cache.get_answer(request(16)))
        # include_cubin does not make another lookup; exact_only and the driver do.
        with_cubin = request(8)
        with_cubin.include_cubin = True
        self.assertEqual(answer_key(with_cubin), answer_key(request(8)))
        exact_only = request(8)
        exact_only.exact_only = True
        self.assertNotEqual(answer_key(exact_only), answer_key(request(8)))
        old_driver = request(8)
        old_driver.driver_version = "12.8"
        self.assertNotEqual(answer_key(old_driver), answer_key(request(8)))

    def test_the_files_are_laid_out_as_local_cache_cc_writes_them(self) -> None:
        self.cache.put_answer(answer(8))
        path = self.root / "local" / "answers" / f"{answer_key(request(8))}.answer"
        self.assertEqual(self.cache.answer_path(request(8)), path)
        data = path.read_bytes()
        seal_line, payload = data.split(b"\n", 1)
        self.assertEqual(seal_line, b"autotune-answer 1 " + sha256_hex(payload).encode())
        parsed = pb.LocalAnswer.FromString(payload)
        self.assertEqual(parsed, answer(8))

        # A file made by hand the way local_cache.cc makes one is read back.
        by_hand = answer(64, "2026-12-02T08:00:00Z")
        payload = by_hand.SerializeToString()
        hand_path = self.root / "local" / "answers" / f"{answer_key(request(64))}.answer"
        seal = b"autotune-answer 1 " + sha256_hex(payload).encode() + b"\n"
        hand_path.write_bytes(seal + payload)
        self.assertEqual(self.cache.get_answer(request(64)), by_hand)

        cubin = b"\x7fELF" + bytes(range(256)) * 8
        self.cache.put_cubin(sha256_hex(cubin), cubin)
        cubin_path = self.root / "local" / "cubins" / f"{sha256_hex(cubin)}.cubin"
        self.assertEqual(cubin_path.read_bytes(), cubin)
        for directory in ("", "answers", "cubins", "packs"):
            mode = os.stat(self.root / "local" / directory).st_mode & 0o777
            self.assertEqual(mode, 0o700, directory)

    def test_a_torn_or_edited_answer_is_refused_and_writing_it_again_mends_it(self) -> None:
        self.cache.put_answer(answer(8))
        path = self.cache.answer_path(request(8))
        data = path.read_bytes()
        path.write_bytes(data[:-3])
        with self.assertRaisesRegex(LocalCacheCorrupt, "does not match its seal") as caught:
            self.cache.get_answer(request(8))
        self.assertEqual(caught.exception.code, "DATA_LOSS")
        self.assertIn(str(path), caught.exception.message)
        edited = bytearray(data)
        edited[-1] ^= 1
        path.write_bytes(bytes(edited))
        with self.assertRaises(LocalCacheCorrupt):
            self.cache.get_answer(request(8))
        path.write_bytes(b"garbage")
        with self.assertRaisesRegex(LocalCacheCorrupt, "no valid seal line"):
            self.cache.get_answer(request(8))
        # Sealed, but not a LocalAnswer.
        junk = b"\xff\xff\xff"
        path.write_bytes(b"autotune-answer 1 " + sha256_hex(junk).encode() + b"\n" + junk)
        with self.assertRaisesRegex(LocalCacheCorrupt, "does not parse"):
            self.cache.get_answer(request(8))
        self.cache.put_answer(answer(8))
        self.assertEqual(self.cache.get_answer(request(8)), answer(8))

    def test_cubins_are_checked_on_the_way_in_and_out(self) -> None:
        cubin = b"c" * 5000
        sha = sha256_hex(cubin)
        with self.assertRaisesRegex(InvalidArgument, "do not hash to"):
            self.cache.put_cubin(sha256_hex(b"other"), cubin)
        with self.assertRaises(InvalidArgument):
            self.cache.put_cubin("../../etc/passwd", cubin)
        with self.assertRaises(InvalidArgument):
            self.cache.get_cubin(sha.upper())
        self.assertEqual(os.listdir(self.cache.directory / "cubins"), [])
        self.assertIsNone(self.cache.get_cubin(sha))
        self.cache.put_cubin(sha, cubin)
        self.assertEqual(self.cache.get_cubin(sha), cubin)

        # Damaged in place: refused, then stored again whole.
        with open(self.cache.cubin_path(sha), "r+b") as file:
            file.seek(100)
            file.write(b"X")
        with self.assertRaisesRegex(LocalCacheCorrupt, "does not match its sha256"):
            self.cache.get_cubin(sha)
        self.cache.put_cubin(sha, cubin)
        self.assertEqual(self.cache.get_cubin(sha), cubin)

    def test_a_file_that_cannot_be_read_is_an_error_not_a_miss(self) -> None:
        os.mkdir(self.cache.answer_path(request(8)))
        with self.assertRaisesRegex(LocalCacheError, "cannot read local answer") as caught:
            self.cache.get_answer(request(8))
        self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")

    def test_two_processes_writing_at_once_never_leave_a_partial_file(self) -> None:
        big = b"b" * (1 << 20)
        sha = sha256_hex(big)
        directory = str(self.cache.directory)
        # spawn, not fork: the parent has gRPC loaded.
        context = multiprocessing.get_context("spawn")
        writers = [
            context.Process(target=write_rounds, args=(directory, writer, big))
            for writer in range(2)
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            self.addCleanup(writer.kill)
        reads = 0
        while reads == 0 or any(writer.is_alive() for writer in writers):
            # Raises LocalCacheCorrupt on a partial file.
            self.cache.get_answer(request(8))
            self.cache.get_cubin(sha)
            reads += 1
        for writer in writers:
            writer.join()
            self.assertEqual(writer.exitcode, 0)
        self.assertGreater(reads, 1)
        last = self.cache.get_answer(request(8))
        assert last is not None
        self.assertIn("round 199", last.stored_at)
        self.assertEqual(self.cache.get_cubin(sha), big)
        # No temporary file is left behind.
        self.assertEqual(len(os.listdir(self.cache.directory / "answers")), 1)
        self.assertEqual(os.listdir(self.cache.directory / "cubins"), [f"{sha}.cubin"])


class CppWrittenCacheTest(unittest.TestCase):
    """testdata/cpp_local_cache is a local cache as the C++ StartupLookup left
    it in tests/e2e/e2e_startup_test.cc (TheServiceAnswersAndTheLocalCacheKeeps-
    TheAnswers: vector_scale bf16 at batch 8 and 12 with n=4096, and batch 8
    with n=1000, on "NVIDIA H200"; a synthetic 4 KiB cubin). The C++ side
    named every file, so finding them is the key's interop test."""

    def test_its_answers_and_cubin_are_found_and_read(self) -> None:
        with tempfile.TemporaryDirectory(prefix="autotune-py-") as temp:
            # A copy, so that nothing a test does can change the fixture.
            shutil.copytree(CPP_CACHE, Path(temp) / "local")
            cache = LocalCache(Path(temp) / "local")
            matches = []
            for batch, n in ((8, 4096), (12, 4096), (8, 1000)):
                lookup = pb.LookupRequest(
                    family="vector_scale",
                    problem=pb.Problem(dims={"batch": batch, "n": n}, dtype=pb.BFLOAT16),
                    device=pb.Device(name="NVIDIA H200"),
                )
                self.assertTrue(cache.answer_path(lookup).is_file(), (batch, n))
                stored = cache.get_answer(lookup)
                assert stored is not None
                self.assertEqual(stored.request.problem.dims["batch"], batch)
                self.assertTrue(stored.server.startswith("unix://"))
                matches.append(stored.response.match)
                if stored.response.match != pb.MISS:
                    cubin = cache.get_cubin(stored.response.entry.binary_sha256)
                    assert cubin is not None
                    self.assertEqual(len(cubin), 4096)
                else:
                    self.assertEqual(
                        dict(stored.response.default_config.params),
                        {"BLOCK": 256, "ELEMS_PER_THREAD": 1},
                    )
            self.assertEqual(matches, [pb.EXACT, pb.NEAREST, pb.MISS])


class LocalCacheDirectoryTest(unittest.TestCase):
    def test_follows_the_environment(self) -> None:
        with mock.patch.dict(os.environ, {"AUTOTUNE_LOCAL_CACHE": "/x/local"}):
            self.assertEqual(default_local_cache_directory(), "/x/local")
        with mock.patch.dict(
            os.environ, {"AUTOTUNE_LOCAL_CACHE": "", "XDG_CACHE_HOME": "/x/cache"}
        ):
            self.assertEqual(default_local_cache_directory(), "/x/cache/autotune")
        with mock.patch.dict(
            os.environ, {"AUTOTUNE_LOCAL_CACHE": "", "XDG_CACHE_HOME": "", "HOME": "/home/u"}
        ):
            self.assertEqual(default_local_cache_directory(), "/home/u/.cache/autotune")
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(default_local_cache_directory(), "")
            with self.assertRaisesRegex(InvalidArgument, "no local cache directory"):
                LocalCache()

    def test_a_file_in_the_way_is_an_error(self) -> None:
        with tempfile.TemporaryDirectory(prefix="autotune-py-") as temp:
            in_the_way = Path(temp) / "local"
            in_the_way.write_text("not a directory")
            with self.assertRaisesRegex(LocalCacheError, "is not a directory") as caught:
                LocalCache(in_the_way)
            self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")


if __name__ == "__main__":
    unittest.main()
