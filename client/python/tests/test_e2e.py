"""End to end against the real autotuned holding the quick start's sample
(vector_scale bf16 n=4096 at batch 1, 8 and 64 on an NVIDIA H200): plain
lookups, start-up lookups with the service up, stopped and hung, and a
family registered, checked, tuned (compile-only: no GPU) and removed.

Skipped, saying which, when the C++ binaries are not built.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import socket
import tempfile
import time
import unittest
import warnings
from pathlib import Path
from typing import Optional
from unittest import mock

import support

from autotune_client import (
    SOURCE_LOCAL_CACHE,
    SOURCE_SERVICE,
    Client,
    DimDistance,
    InvalidArgument,
    LaunchError,
    LaunchDims,
    LocalCache,
    Lookup,
    Match,
    MissKind,
    NotFound,
    ServiceUnavailable,
    Unauthenticated,
    StartupAnswer,
    StartupLookup,
    TunedKernel,
    pb,
    read_token_file,
    startup_lookup,
)
from autotune_client import local_cache
from autotune_client.local_cache import pack_key

DEVICE = "NVIDIA H200"


def vector_scale(batch: int, n: int = 4096, family: str = "vector_scale") -> Lookup:
    return Lookup(family, {"batch": batch, "n": n}, "bf16")


def server_shapes() -> list[Lookup]:
    """EXACT, NEAREST, MISS (no entry for n=1000) and an unknown family."""
    return [
        vector_scale(8),
        vector_scale(12),
        vector_scale(8, 1000),
        vector_scale(8, 4096, "no_such_family"),
    ]


class DaemonTestCase(unittest.TestCase):
    """A fresh daemon with the sample imported, in a directory of its own;
    both go when the test ends, however it ends."""

    def setUp(self) -> None:
        missing = support.missing_binaries()
        if missing:
            self.skipTest(
                "the C++ binaries are not built (missing: "
                + ", ".join(str(path) for path in missing)
                + "); build the tree or set AUTOTUNED, AUTOTUNE_CLI, AUTOTUNE_MAKE_SAMPLE"
            )
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        self.dir = Path(temp.name)
        self.daemon = support.Daemon(self.dir)
        self.addCleanup(self.daemon.stop)
        self.daemon.start()
        # What the daemon serves for the sample: its own compile.
        self.sample_cubin = self.daemon.import_sample(support.fake_cubin())
        self.sample_sha256 = hashlib.sha256(self.sample_cubin).hexdigest()
        self.address = self.daemon.address
        self.local_dir = self.dir / "local"

    def stop_daemon(self) -> None:
        self.assertEqual(self.daemon.stop(), 0, self.daemon.log_tail())

    def lookup(
        self, local_cache: Optional[Path] = None, deadline: float = 5.0, address: str = ""
    ) -> StartupLookup:
        lookup = StartupLookup(
            address=address or self.address,
            deadline=deadline,
            local_cache=self.local_dir if local_cache is None else local_cache,
            device=DEVICE,
        )
        self.addCleanup(lookup.close)
        return lookup

    def warm_local_cache(self) -> None:
        """One start with the service up, its local cache writes done."""
        lookup = self.lookup()
        lookup.lookup_all(server_shapes())
        lookup.flush_local_cache()

    def expect_server_shapes_answered(self, answers: list[StartupAnswer], source: str) -> None:
        """The answers to server_shapes(), checked."""
        self.assertEqual(len(answers), 4)
        for index, answer in enumerate(answers[:3]):
            self.assertIsNone(answer.error, index)
            self.assertEqual(answer.source, source, index)
        exact, nearest, miss = (answer.result for answer in answers[:3])
        assert exact is not None and nearest is not None and miss is not None
        self.assertEqual(exact.match, Match.EXACT)
        self.assertEqual(exact.cubin, self.sample_cubin)
        self.assertEqual(nearest.match, Match.NEAREST)
        self.assertEqual(nearest.tuned_dims["batch"], 8)
        self.assertEqual(nearest.cubin, self.sample_cubin)
        # The miss carries what to run untuned.
        self.assertEqual(miss.match, Match.MISS)
        self.assertEqual(miss.miss_kind, MissKind.NO_ENTRY)
        self.assertEqual(miss.default_config, {"BLOCK": 256, "ELEMS_PER_THREAD": 1})
        self.assertIsNone(miss.cubin)


class LaunchEndToEndTest(DaemonTestCase):
    """What the launcher loads, with a fake driver: the GPU test
    (tests/gpu/python_launch.sh) launches for real."""

    def test_a_miss_is_compiled_here_from_its_recipe_and_launched_with_the_default(self) -> None:
        from test_launch import FakeDriver, FakeTensor

        answers = startup_lookup(
            [vector_scale(8, 1000)], address=self.address, local_cache=str(self.local_dir),
            deadline=5.0, recipes=True,
        )  # fmt: skip
        result = answers[0].result
        self.assertEqual(result.match, Match.MISS)
        self.assertTrue(result.response.recipe.source)
        driver = FakeDriver(arch="sm_90")
        kernel = TunedKernel.load(result, driver=driver)
        self.assertTrue(kernel.compiled_here)
        cubin, name, _ = driver.loaded[0]
        self.assertTrue(cubin.startswith(b"\x7fELF"), cubin[:16])
        self.assertIn("vector_scale", name)
        kernel(FakeTensor(0x1000, 8 * 1000), FakeTensor(0x2000, 8 * 1000), stream=0)
        self.assertEqual(driver.launches[0][1], (32, 1, 1))  # the default config's grid
        # Without the recipe there is nothing to build.
        plain = startup_lookup([vector_scale(8, 1000)], address=self.address, local_cache="none")
        with self.assertRaisesRegex(LaunchError, "look up with recipes=True"):
            TunedKernel.load(plain[0].result, driver=FakeDriver())


class LookupEndToEndTest(DaemonTestCase):
    def test_exact_nearest_and_miss(self) -> None:
        with Client(self.address) as client:
            exact = client.lookup(vector_scale(8), include_cubin=True)
            self.assertEqual(exact.match, Match.EXACT)
            self.assertEqual(exact.config, {"BLOCK": 256, "ELEMS_PER_THREAD": 2})
            # 8 * 4096 elements, 256 threads of 2 each.
            self.assertEqual(exact.launch, LaunchDims((64,), (256,), 0))
            self.assertEqual(exact.cubin, self.sample_cubin)
            self.assertEqual(exact.binary_sha256, self.sample_sha256)
            self.assertEqual(exact.miss_kind, MissKind.NONE)
            self.assertEqual(exact.entry.device.name, DEVICE)

            without = client.lookup(vector_scale(8))
            self.assertIsNone(without.cubin)
            self.assertEqual(without.binary_sha256, self.sample_sha256)

            nearest = client.lookup(vector_scale(12))
            self.assertEqual(nearest.match, Match.NEAREST)
            self.assertEqual(nearest.tuned_dims, {"batch": 8, "n": 4096})
            self.assertEqual(nearest.distance, (DimDistance("batch", 12, 8),))
            self.assertGreater(nearest.log2_distance, 0)
            # Launched for batch 12: 12 * 4096 elements, 256 threads of 2 each.
            self.assertEqual(nearest.launch, LaunchDims((96,), (256,), 0))
            # The arguments for batch 12: what a launcher checks and passes.
            arguments = nearest.arguments
            self.assertIsNotNone(arguments)
            self.assertEqual([(b.name, list(b.shape)) for b in arguments.buffers], [("x", [12 * 4096]), ("y", [12 * 4096])])
            self.assertEqual([(s.name, s.value) for s in arguments.scalars], [("alpha", 0.5), ("count", 12 * 4096)])

            exact_only = Lookup("vector_scale", {"batch": 12, "n": 4096}, "bf16", exact_only=True)
            self.assertEqual(client.lookup(exact_only).miss_kind, MissKind.EXACT_ONLY)

            miss = client.lookup(vector_scale(8, 1000), include_cubin=True)
            self.assertEqual(miss.match, Match.MISS)
            self.assertEqual(miss.miss_kind, MissKind.NO_ENTRY)
            self.assertIn("no entry", miss.miss_reason)
            self.assertEqual(miss.default_config, {"BLOCK": 256, "ELEMS_PER_THREAD": 1})
            self.assertEqual(miss.default_launch, LaunchDims((32,), (256,), 0))
            self.assertEqual(miss.arguments.scalars[1].value, 8 * 1000)  # the default config's
            self.assertEqual(miss.config, {})
            self.assertIsNone(miss.cubin)

    def test_errors_are_typed(self) -> None:
        with Client(self.address) as client:
            with self.assertRaisesRegex(NotFound, "no_such_family") as caught:
                client.lookup(vector_scale(8, 4096, "no_such_family"))
            self.assertEqual(caught.exception.code, "NOT_FOUND")
            with self.assertRaisesRegex(InvalidArgument, "missing 'n'"):
                client.lookup(Lookup("vector_scale", {"batch": 8}, "bf16"))
        self.stop_daemon()
        with Client(self.address) as client:
            with self.assertRaisesRegex(ServiceUnavailable, "cannot reach autotuned at"):
                client.lookup(vector_scale(8))

    def test_a_batch_answers_each_item_on_its_own(self) -> None:
        with Client(self.address) as client:
            answers = client.batch_lookup(server_shapes(), include_cubin=True)
        self.assertEqual([a.request.problem.dims["batch"] for a in answers], [8, 12, 8, 8])
        results = [answer.result for answer in answers]
        assert results[0] is not None and results[1] is not None and results[2] is not None
        self.assertEqual(results[0].match, Match.EXACT)
        self.assertEqual(results[0].cubin, self.sample_cubin)
        self.assertEqual(results[1].match, Match.NEAREST)
        self.assertEqual(results[1].cubin, self.sample_cubin)
        self.assertEqual(results[2].match, Match.MISS)
        self.assertIsNone(answers[3].result)
        self.assertIsInstance(answers[3].error, NotFound)
        self.assertIn("no_such_family", str(answers[3].error))

    def test_an_entry_built_for_a_newer_driver_is_not_served_as_exact(self) -> None:
        # The sample's binaries are NVRTC 13.0.
        answers = startup_lookup(
            [vector_scale(8)],
            address=self.address,
            local_cache="none",
            device=DEVICE,
            driver_version="12.8",
        )
        self.assertIsNone(answers[0].error)
        result = answers[0].result
        assert result is not None
        self.assertEqual(result.match, Match.MISS)
        self.assertEqual(result.miss_kind, MissKind.DRIVER_TOO_OLD)
        self.assertEqual(result.config["BLOCK"], 256)
        self.assertIsNone(result.cubin)
        self.assertEqual(answers[0].request.driver_version, "12.8")


class StartupEndToEndTest(DaemonTestCase):
    def test_the_service_answers_and_the_local_cache_keeps_the_answers(self) -> None:
        lookup = self.lookup()
        answers = lookup.lookup_all(server_shapes())
        self.expect_server_shapes_answered(answers, SOURCE_SERVICE)
        self.assertIsInstance(answers[3].error, NotFound)
        self.assertIn("no_such_family", str(answers[3].error))
        self.assertIn(f"answered by {self.address}", answers[0].note)
        self.assertEqual(answers[0].request.device.name, DEVICE)
        # What a restart will find, once the writes behind the answers are
        # done, read by a cache of its own.
        lookup.flush_local_cache()
        local = LocalCache(self.local_dir)
        kept = local.get_answer(answers[0].request)
        assert kept is not None
        self.assertEqual(kept.server, self.address)
        self.assertEqual(kept.response.match, Match.EXACT)
        self.assertRegex(kept.stored_at, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(local.get_cubin(self.sample_sha256), self.sample_cubin)
        # Three answers kept (not the unknown family), one cubin.
        self.assertEqual(len(list((self.local_dir / "answers").iterdir())), 3)
        self.assertEqual(len(list((self.local_dir / "cubins").iterdir())), 1)

    def test_a_failed_local_cache_write_is_in_the_note_once_flushed(self) -> None:
        lookup = self.lookup()
        # answers/ replaced by a file: every answer's write fails.
        answers_dir = self.local_dir / "answers"
        for child in answers_dir.iterdir():
            child.unlink()
        answers_dir.rmdir()
        answers_dir.write_bytes(b"")
        answers = lookup.lookup_all(server_shapes())
        self.expect_server_shapes_answered(answers, SOURCE_SERVICE)
        lookup.flush_local_cache()
        self.assertIn("not kept in the local cache", answers[0].note)
        self.assertIn("cannot write local answer", answers[0].note)

    def test_with_the_service_down_a_warm_local_cache_answers(self) -> None:
        self.warm_local_cache()
        self.stop_daemon()
        lookup = self.lookup()
        start = time.monotonic()
        answers = lookup.lookup_all(server_shapes())
        self.assertLess(time.monotonic() - start, 2)
        self.expect_server_shapes_answered(answers, SOURCE_LOCAL_CACHE)
        self.assertIn("the service did not answer", answers[0].note)
        self.assertIn("answer stored", answers[0].note)
        self.assertIn(f"by {self.address}", answers[0].note)
        # Never answered by the service, so never kept: an error that says both.
        self.assertIsInstance(answers[3].error, ServiceUnavailable)
        self.assertIn("has no answer for it", str(answers[3].error))

    def test_with_the_service_down_a_cold_local_cache_fails_within_the_deadline(self) -> None:
        self.stop_daemon()
        lookup = self.lookup(local_cache=self.dir / "cold", deadline=1.0)
        start = time.monotonic()
        answers = lookup.lookup_all(server_shapes())
        self.assertLess(time.monotonic() - start, 2)
        self.assertEqual(len(answers), 4)
        for answer in answers:
            self.assertIsNone(answer.result)
            self.assertEqual(answer.source, SOURCE_LOCAL_CACHE)
            self.assertIsInstance(answer.error, ServiceUnavailable)
            message = str(answer.error)
            self.assertIn("the service did not answer", message)
            self.assertIn(self.address, message)
            self.assertIn("has no answer for it", message)
        self.assertIn("vector_scale batch=8,n=4096 bf16", str(answers[0].error))

    def test_a_hung_service_costs_the_deadline_and_no_more(self) -> None:
        self.warm_local_cache()
        # A socket that accepts connections and never says a word.
        path = self.dir / "hung.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(listener.close)
        listener.bind(str(path))
        listener.listen(16)
        lookup = self.lookup(address=f"unix://{path}", deadline=0.5)
        start = time.monotonic()
        answers = lookup.lookup_all(server_shapes())
        took = time.monotonic() - start
        self.assertGreaterEqual(took, 0.4)
        self.assertLess(took, 1.5)
        self.expect_server_shapes_answered(answers, SOURCE_LOCAL_CACHE)
        self.assertIn("the service did not answer", answers[0].note)

    def remove_packs(self) -> None:
        """Removes the local cache's packs: what follows reads file by file."""
        shutil.rmtree(self.local_dir / "packs")
        (self.local_dir / "packs").mkdir()

    def test_a_damaged_local_cubin_is_refused_and_fetched_again(self) -> None:
        lookup = self.lookup()
        lookup.lookup_all(server_shapes())
        lookup.flush_local_cache()
        self.remove_packs()
        assert lookup.local_cache is not None
        cubin_path = lookup.local_cache.cubin_path(self.sample_sha256)
        with open(cubin_path, "r+b") as file:
            file.seek(10)
            file.write(b"X")
        answers = lookup.lookup_all(server_shapes())
        self.expect_server_shapes_answered(answers, SOURCE_SERVICE)
        self.assertIn("does not match its sha256", answers[0].note)
        self.assertIn("fetched again", answers[0].note)
        lookup.flush_local_cache()
        self.assertEqual(lookup.local_cache.get_cubin(self.sample_sha256), self.sample_cubin)

        # With the service down, a damaged cubin is refused, not served.
        self.remove_packs()
        with open(cubin_path, "r+b") as file:
            file.seek(10)
            file.write(b"Y")
        self.stop_daemon()
        offline = self.lookup().lookup_all(server_shapes())
        result = offline[0].result
        assert result is not None
        self.assertEqual(result.match, Match.EXACT)
        self.assertIsNone(result.cubin)
        self.assertIn("does not match its sha256", offline[0].note)

    def test_without_cubins_only_configs_are_fetched(self) -> None:
        lookup = StartupLookup(address=self.address, local_cache=self.local_dir, cubins=False)
        self.addCleanup(lookup.close)
        answers = lookup.lookup_all([vector_scale(8)])
        result = answers[0].result
        assert result is not None
        self.assertEqual(result.match, Match.EXACT)
        self.assertIsNone(result.cubin)
        lookup.flush_local_cache()
        self.assertEqual(list((self.local_dir / "cubins").iterdir()), [])


class StartupPackEndToEndTest(DaemonTestCase):
    """A start keeps its batch's answers and cubins in one pack
    (local_cache.py), as the C++ StartupLookup does (tests/e2e/
    e2e_startup_test.cc): the next start reads it instead of each file."""

    def setUp(self) -> None:
        without_xxhash = self._testMethodName.startswith("test_without_xxhash")
        if not without_xxhash and importlib.util.find_spec("xxhash") is None:
            self.skipTest("python3-xxhash is not installed: packs are not read or written")
        super().setUp()

    def warm_and_stop(self) -> tuple[list[StartupAnswer], Path]:
        """One start with the service up, its writes done, then the daemon
        stopped: its answers and the path of its pack."""
        lookup = self.lookup()
        first = lookup.lookup_all(server_shapes())
        lookup.flush_local_cache()
        assert lookup.local_cache is not None
        pack_path = lookup.local_cache.pack_path(pack_key(answer.request for answer in first))
        self.assertTrue(pack_path.is_file())
        self.stop_daemon()
        return first, pack_path

    def test_with_the_service_down_the_batchs_pack_answers_unless_it_is_damaged(self) -> None:
        _, pack_path = self.warm_and_stop()
        # The pack alone answers: the cubin file is gone.
        os.remove(self.local_dir / "cubins" / f"{self.sample_sha256}.cubin")
        offline = self.lookup().lookup_all(server_shapes())
        self.expect_server_shapes_answered(offline, SOURCE_LOCAL_CACHE)
        self.assertNotIn("local pack", offline[0].note)

        # Damaged: refused whole, the files answer (here without the cubin).
        os.chmod(pack_path, 0o644)
        with open(pack_path, "r+b") as file:
            file.seek(-1, os.SEEK_END)
            file.write(b"Z")
        offline = self.lookup().lookup_all(server_shapes())
        result = offline[0].result
        assert result is not None
        self.assertEqual(result.match, Match.EXACT)
        self.assertIsNone(result.cubin)
        self.assertIn(f"local pack {pack_path} ", offline[0].note)
        self.assertIn("(corrupted); read file by file", offline[0].note)
        self.assertIn("its cubin is not in the local cache", offline[0].note)

    def test_an_answer_kept_since_the_pack_wins_over_it(self) -> None:
        first, _ = self.warm_and_stop()
        # Another server on this host kept a newer answer for the first lookup.
        newer = pb.LocalAnswer(
            request=first[0].request,
            server="unix:///elsewhere.sock",
            stored_at="2026-12-05T00:00:00Z",
        )
        assert first[0].result is not None
        newer.response.CopyFrom(first[0].result.response)
        newer.response.entry.config.params["BLOCK"] = 1024
        LocalCache(self.local_dir).put_answer(newer)
        offline = self.lookup().lookup_all(server_shapes())
        self.expect_server_shapes_answered(offline, SOURCE_LOCAL_CACHE)
        assert offline[0].result is not None and offline[1].result is not None
        self.assertEqual(offline[0].result.config["BLOCK"], 1024)
        self.assertIn("by unix:///elsewhere.sock", offline[0].note)
        assert first[1].result is not None
        self.assertEqual(offline[1].result.config, first[1].result.config)

    def test_with_the_service_up_the_cubins_come_from_the_pack(self) -> None:
        lookup = self.lookup()
        lookup.lookup_all(server_shapes())
        lookup.flush_local_cache()
        cubin_path = self.local_dir / "cubins" / f"{self.sample_sha256}.cubin"
        os.remove(cubin_path)
        answers = lookup.lookup_all(server_shapes())
        self.expect_server_shapes_answered(answers, SOURCE_SERVICE)
        lookup.flush_local_cache()
        # Not fetched, so not written again.
        self.assertFalse(cubin_path.exists())

    def test_the_pack_a_start_writes_is_read_by_the_cpp_client(self) -> None:
        if not os.access(support.LOCAL_PACK, os.X_OK):
            self.skipTest(f"{support.LOCAL_PACK} is not built")
        first, _ = self.warm_and_stop()
        requests_file = self.dir / "requests.pb"
        batch = pb.BatchLookupRequest(lookups=[answer.request for answer in first])
        requests_file.write_bytes(batch.SerializeToString())
        read = support.run_local_pack("read", str(self.local_dir), str(requests_file))
        self.assertEqual(read.returncode, 0, read.stderr)
        lines = read.stdout.splitlines()
        self.assertEqual(lines[0], "changed 0")
        # Three answers kept (not the unknown family's), one cubin.
        packed = [line.split()[2] != "-" for line in lines[1:5]]
        self.assertEqual(packed, [True, True, True, False])
        self.assertEqual(
            lines[5:],
            [f"cubin {self.sample_sha256} {len(self.sample_cubin)} {self.sample_sha256}"],
        )

    def test_without_xxhash_no_pack_is_written_and_that_is_said_once(self) -> None:
        with mock.patch.object(local_cache, "_xxhash", None), mock.patch.object(
            local_cache, "_packs_warned", False
        ), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lookup = self.lookup()
            answers = lookup.lookup_all(server_shapes())
            lookup.flush_local_cache()
            self.expect_server_shapes_answered(answers, SOURCE_SERVICE)
            self.assertEqual(len(list((self.local_dir / "answers").iterdir())), 3)
            self.assertEqual(list((self.local_dir / "packs").iterdir()), [])
            self.stop_daemon()
            offline = self.lookup().lookup_all(server_shapes())
            self.expect_server_shapes_answered(offline, SOURCE_LOCAL_CACHE)
        said = [str(warning.message) for warning in caught]
        self.assertEqual(len(said), 1, said)
        self.assertIn("python3-xxhash", said[0])


AXPY_MANIFEST = """\
arch: "sm_90"
items {
  family: "axpy"
  dims { name: "n" values: [1024] }
  dtypes: [FLOAT32]
}
"""


class TuningEndToEndTest(DaemonTestCase):
    def test_register_check_tune_report_and_unregister_a_family(self) -> None:
        family_dir = self.dir / "family"
        family_dir.mkdir()
        good = support.REPO_ROOT / "kernels" / "testdata" / "good"
        for name in ("axpy.textproto", "axpy.cu"):
            shutil.copy(good / name, family_dir / name)
        descriptor = family_dir / "axpy.textproto"
        manifest = self.dir / "axpy.manifest"
        manifest.write_text(AXPY_MANIFEST)

        checked = Client.check(descriptor, arch="sm_90", cli=support.AUTOTUNE_CLI)
        self.assertIn("compiled for sm_90", checked.output)
        # axpy names no default_config: allowed, and said.
        self.assertTrue(any("default_config" in w for w in checked.warnings), checked.warnings)

        with Client(self.address) as client:
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                registered = client.register(descriptor)
            self.assertTrue(registered.changed)
            self.assertEqual(registered.kernel.name, "axpy")
            self.assertEqual(registered.kernel.config_count, 24)
            self.assertTrue(registered.warnings)
            self.assertEqual(
                [str(w.message) for w in warned],
                [f"register axpy: {text}" for text in registered.warnings],
            )
            self.assertIn("axpy", [kernel.name for kernel in client.list_kernels()])
            with self.assertWarnsRegex(UserWarning, "register axpy: default_config"):
                again = client.register(descriptor)
            self.assertFalse(again.changed)

            seen: list[pb.JobProgress] = []
            job = client.tune(manifest, compile_only=True, on_progress=seen.append)
            self.assertEqual(job.state, pb.SUCCEEDED, job.error)
            self.assertTrue(seen)
            self.assertEqual(seen[-1].job.state, pb.SUCCEEDED)
            self.assertTrue(all(progress.job.id == job.id for progress in seen))
            self.assertEqual(job.arch, "sm_90")
            self.assertEqual(job.counts.problems, 1)
            self.assertGreater(job.counts.compiled + job.counts.compile_cache_hits, 0)
            self.assertEqual(job.counts.compile_errors, 0)

            report = client.report(job)
            self.assertTrue(report.startswith(f"job {job.id} SUCCEEDED: 1 problems"), report)
            self.assertIn("compile-only for sm_90", report)
            self.assertIn("lookups answer as before", report)

            self.assertIn(job.id, [listed.id for listed in client.list_jobs()])
            self.assertEqual(len(client.list_jobs(limit=1)), 1)
            self.assertEqual(client.wait(job.id, poll=0.1, timeout=30).state, pb.SUCCEEDED)
            self.assertEqual(client.get_job(job.id).spec.options.compile_only, True)
            with self.assertRaises(NotFound):
                client.get_job("no-such-job")

            # Compiling measured nothing: lookups answer as before.
            miss = client.lookup(Lookup("axpy", {"n": 1024}, "fp32"))
            self.assertEqual(miss.match, Match.MISS)
            self.assertEqual(miss.miss_kind, MissKind.NO_ENTRY)

            removed = client.unregister("axpy")
            self.assertEqual(removed.versions_removed, 1)
            self.assertEqual(removed.entries_removed, 0)
            self.assertNotIn("axpy", [kernel.name for kernel in client.list_kernels()])
            with self.assertRaises(NotFound):
                client.unregister("axpy")

    def test_a_descriptor_with_problems(self) -> None:
        descriptor = self.dir / "broken.textproto"
        descriptor.write_text(
            (support.REPO_ROOT / "kernels" / "testdata" / "good" / "axpy.textproto")
            .read_text()
            .replace('source_file: "axpy.cu"', 'source: "extern \\"C\\" __global__ void axpy() {}"')
        )
        with self.assertRaises(InvalidArgument) as checked:
            Client.check(descriptor, cli=support.AUTOTUNE_CLI)
        self.assertIn("broken.textproto", checked.exception.message)
        with Client(self.address) as client:
            with self.assertRaises(InvalidArgument):
                client.register(descriptor)
            self.assertNotIn("axpy", [kernel.name for kernel in client.list_kernels()])


class ServerConfigsEndToEndTest(DaemonTestCase):
    def test_the_files_are_those_of_the_cli_and_read_the_way_vllm_reads_them(self) -> None:
        import json

        from autotune_client import Client, InvalidArgument, NotFound, export_server_configs

        python_dir = self.dir / "from-python"
        with Client(self.address) as client:
            written = export_server_configs(client, "vector_scale", python_dir)
            with self.assertRaises(NotFound):
                export_server_configs(client, "no_such_family", python_dir)
            with self.assertRaises(InvalidArgument):
                export_server_configs(client, "vector_scale", python_dir, bucket="rows")
        name = "n=4096,device_name=NVIDIA_H200,dtype=bf16.json"
        self.assertEqual(written, {name: 3})
        cli_dir = self.dir / "from-cli"
        exported = support.run(
            [str(support.AUTOTUNE_CLI), "--server", self.address, "export-configs",
             "vector_scale", "--out", str(cli_dir)]
        )
        self.assertEqual(exported.returncode, 0, exported.stderr)
        self.assertEqual((python_dir / name).read_bytes(), (cli_dir / name).read_bytes())
        # As vLLM reads its fused-MoE configs: integer keys, the nearest one.
        configs = {int(key): value for key, value in json.loads((python_dir / name).read_text()).items()}
        self.assertEqual(sorted(configs), [1, 8, 64])
        nearest = configs[min(configs, key=lambda key: abs(key - 40))]
        self.assertEqual(nearest, configs[64])


if __name__ == "__main__":
    unittest.main()


class AdminUrlEndToEndTest(unittest.TestCase):
    """The daemon's own user gets a login link into the admin page."""

    def test_the_link_carries_a_token_and_expires(self) -> None:
        if support.missing_binaries():
            self.skipTest("the C++ binaries are not built")
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        daemon = support.Daemon(Path(temp.name), ("--http-listen", "127.0.0.1:0"))
        self.addCleanup(daemon.stop)
        daemon.start()
        with Client(daemon.address) as client:
            link = client.admin_url()
        self.assertRegex(link.url, r"^http://127\.0\.0\.1:[0-9]+/admin#login=[0-9a-f]+$")
        self.assertTrue(link.expires_at.startswith("20"), link.expires_at)


class TokenEndToEndTest(unittest.TestCase):
    """A daemon that gives this uid no role: only a token lets a client in."""

    def test_a_token_names_the_callers_role(self) -> None:
        missing = support.missing_binaries()
        if missing:
            self.skipTest("the C++ binaries are not built")
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        directory = Path(temp.name)
        token_path = directory / "reader.token"
        made = support.run(
            [str(support.AUTOTUNE_CLI), "token", "new", "--role", "reader", "--id", "py",
             "--out", str(token_path)]
        )  # fmt: skip
        self.assertEqual(made.returncode, 0, made.stderr)
        (directory / "tokens").write_text(made.stdout, encoding="utf-8")
        daemon = support.Daemon(
            directory,
            ("--token-file", str(directory / "tokens"), "--peer-role", f"uid:{os.getuid()}=none"),
        )
        self.addCleanup(daemon.stop)
        daemon.start()
        with Client(daemon.address) as anonymous:
            with self.assertRaises(Unauthenticated) as refused:
                anonymous.list_kernels()
            self.assertIn("needs the reader role", refused.exception.message)
        with Client(daemon.address, token=read_token_file(str(token_path))) as reader:
            self.assertEqual(reader.list_kernels(), [])
        with Client(daemon.address, token="0" * 64) as wrong:
            with self.assertRaises(Unauthenticated):
                wrong.list_kernels()
