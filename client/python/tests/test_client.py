"""The client's pieces that need no daemon: default addresses, the problem
vocabulary, results, how errors are reported, descriptors and manifests as
the CLI reads them, job reports, `autotune check` run by a stand-in CLI, and
the tuning calls against a stand-in service."""

from __future__ import annotations

import enum
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import unittest
from concurrent import futures
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator, Union
from unittest import mock

import grpc
import support
from google.protobuf import json_format

import autotune_client
from autotune_client import (
    AutotuneError,
    Client,
    DataLoss,
    Device,
    DType,
    InvalidArgument,
    JobFailed,
    JobState,
    LaunchDims,
    Lookup,
    LookupResult,
    Match,
    MissKind,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
    Unauthenticated,
    client_server_address,
    default_server_address,
    format_dims,
    parse_dtype,
    pb,
    read_family,
    read_manifest,
    search_options,
)
from autotune_client.errors import error_for_code
from autotune_client.jobs import Budget, job_request

TESTDATA = support.REPO_ROOT / "kernels" / "testdata"
SHARED_TESTDATA = support.REPO_ROOT / "client" / "testdata"


class AddressTest(unittest.TestCase):
    def test_the_default_address_follows_base_paths_cc(self) -> None:
        with mock.patch.dict(os.environ, {"XDG_RUNTIME_DIR": "/run/user/7", "AUTOTUNE_SERVER": ""}):
            self.assertEqual(default_server_address(), "unix:///run/user/7/autotune.sock")
            self.assertEqual(client_server_address(), "unix:///run/user/7/autotune.sock")
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(
                default_server_address(), f"unix:///tmp/autotune-{os.getuid()}/autotune.sock"
            )
        with mock.patch.dict(os.environ, {"AUTOTUNE_SERVER": "localhost:7070"}):
            self.assertEqual(client_server_address(), "localhost:7070")
            with Client() as client:
                self.assertEqual(client.address, "localhost:7070")

    def test_bad_options_are_refused(self) -> None:
        with self.assertRaises(InvalidArgument):
            Client("")
        with self.assertRaises(InvalidArgument):
            Client("unix:///tmp/x.sock", timeout=0)


class VocabularyTest(unittest.TestCase):
    def test_the_enums_are_numbered_as_the_proto(self) -> None:
        for member in DType:
            name = "DTYPE_UNSPECIFIED" if member == DType.UNSPECIFIED else member.name
            self.assertEqual(pb.DType.Value(name), member.value, name)
        # The proto's short aliases (bf16 for BFLOAT16) name the same values.
        self.assertEqual(len(DType), len(set(pb.DType.values())))
        self.assertEqual(pb.DType.Value("bf16"), DType.BFLOAT16.value)
        for match in Match:
            self.assertEqual(pb.MatchKind.Value(match.name), match.value)
        for kind in MissKind:
            if kind == MissKind.UNRECOGNIZED:
                continue
            name = "MISS_KIND_UNSPECIFIED" if kind == MissKind.NONE else f"MISS_{kind.name}"
            self.assertEqual(pb.MissKind.Value(name), kind.value, name)
        self.assertEqual(len(MissKind) - 1, len(pb.MissKind.keys()))
        self.assertEqual(len(JobState), len(pb.JobState.keys()))
        self.assertEqual(JobState.SUCCEEDED, pb.SUCCEEDED)
        self.assertEqual(str(JobState(pb.FAILED)), "FAILED")
        self.assertEqual(f"{JobState(pb.COMPILING)}", "COMPILING")

    def test_dtypes_parse_from_their_names(self) -> None:
        spellings: tuple[Union[DType, str, int], ...] = (
            "bf16", "bfloat16", "BFLOAT16", " BF16 ", 3, DType.BFLOAT16
        )
        for spelling in spellings:
            self.assertEqual(parse_dtype(spelling), DType.BFLOAT16, spelling)
        self.assertEqual(parse_dtype("fp8e4m3"), DType.FLOAT8_E4M3)
        with self.assertRaisesRegex(InvalidArgument, "expected one of fp32, fp16, bf16"):
            parse_dtype("bf17")
        with self.assertRaises(InvalidArgument):
            parse_dtype(99)

    def test_dims_are_written_sorted_by_name(self) -> None:
        self.assertEqual(format_dims({"n": 4096, "batch": 8}), "batch=8,n=4096")
        self.assertEqual(format_dims({}), "")

    def test_a_lookup_becomes_its_request(self) -> None:
        lookup = Lookup(
            "vector_scale",
            {"batch": 8, "n": 4096},
            "bf16",
            device=Device("NVIDIA H200", 90, 132),
            exact_only=True,
            driver_version="12.8",
        )
        request = lookup.to_request(include_cubin=True)
        self.assertEqual(request.family, "vector_scale")
        self.assertEqual(dict(request.problem.dims), {"batch": 8, "n": 4096})
        self.assertEqual(request.problem.dtype, pb.BFLOAT16)
        self.assertEqual(request.device.sm_count, 132)
        self.assertTrue(request.include_cubin and request.exact_only)
        self.assertEqual(request.driver_version, "12.8")
        self.assertFalse(Lookup("f", {"n": 1}, "fp32").to_request().HasField("device"))
        self.assertEqual(Lookup("f", {"n": 1}, "fp32", device="X").to_request().device.name, "X")
        with self.assertRaisesRegex(InvalidArgument, r"dims\['n'\] is '8', not an integer"):
            Lookup("f", {"n": "8"}, "fp32").to_request()  # type: ignore[dict-item]


class EnumPrintTest(unittest.TestCase):
    def test_every_enum_prints_its_name_and_compares_as_its_number(self) -> None:
        enums = [
            value
            for value in vars(autotune_client).values()
            if isinstance(value, type) and issubclass(value, enum.IntEnum)
        ]
        self.assertIn(Match, enums)
        self.assertIn(DType, enums)
        self.assertIn(MissKind, enums)
        for kind in enums:
            for member in kind:
                self.assertEqual(str(member), member.name, kind)
                self.assertEqual(f"{member}", member.name, kind)
                self.assertEqual(f"{member:d}", str(member.value), kind)
        self.assertEqual(f"[{Match.MISS:>6}]", "[  MISS]")
        self.assertEqual(Match.MISS, 3)
        self.assertEqual(Match(pb.MISS), Match.MISS)
        self.assertEqual(DType.BFLOAT16 + 0, 3)
        self.assertEqual({DType.BFLOAT16: "x"}[3], "x")  # type: ignore[index]
        result = LookupResult.from_response(pb.LookupResponse(match=pb.MISS))
        self.assertEqual(f"match {result.match}", "match MISS")


def copy_testdata(folder: str, into: Path) -> Path:
    """kernels/testdata/<folder> copied into `into`; the copy's path."""
    target = into / folder
    shutil.copytree(TESTDATA / folder, target)
    return target


class DescriptorTest(unittest.TestCase):
    def setUp(self) -> None:
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        self.dir = Path(temp.name)

    def test_the_source_and_headers_are_read_beside_the_descriptor(self) -> None:
        good = copy_testdata("good", self.dir)
        family = read_family(good / "axpy.textproto")
        self.assertEqual(family.name, "axpy")
        self.assertEqual(family.source, (good / "axpy.cu").read_text())
        self.assertEqual(family.source_file, "axpy.cu")
        self.assertEqual(list(family.dtypes), [pb.FLOAT32, pb.FLOAT16])
        with_headers = copy_testdata("with_headers", self.dir)
        family = read_family(str(with_headers / "axpy.textproto"))
        self.assertEqual(family.headers[0].name, "detail/fma.cuh")
        self.assertEqual(family.headers[0].text, (with_headers / "detail/fma.cuh").read_text())

    def write(self, text: str, name: str = "f.textproto") -> Path:
        path = self.dir / name
        path.write_text(text)
        return path

    def test_files_outside_the_descriptors_folder_are_refused(self) -> None:
        inner = self.dir / "inner"
        inner.mkdir()
        (self.dir / "secret.cu").write_text("// not yours")
        for source_file, why in (
            ("../secret.cu", "goes up a folder (..)"),
            ("sub/../../secret.cu", "goes up a folder (..)"),
            (f"{self.dir}/secret.cu", "is absolute"),
        ):
            path = self.write(f'name: "f" source_file: "{source_file}"', "inner/f.textproto")
            with self.assertRaisesRegex(InvalidArgument, f"source_file: '{source_file}' {why}"):
                read_family(path)
        os.symlink(self.dir / "secret.cu", inner / "link.cu")
        path = self.write('name: "f" source_file: "link.cu"', "inner/f.textproto")
        with self.assertRaisesRegex(InvalidArgument, "through a link.*outside the descriptor"):
            read_family(path)
        path = self.write('name: "f" source: "x" headers { name: "h.cuh" file: "../secret.cu" }',
                          "inner/f.textproto")
        with self.assertRaisesRegex(InvalidArgument, r"headers\[0\]\.file: '../secret.cu' goes up"):
            read_family(path)

    def test_bad_descriptors_are_refused_naming_the_file(self) -> None:
        for text, why in (
            ('name: "f" source_file: "missing.cu"', "source_file: .*missing.cu"),
            ('name: "f" source: "x" source_file: "a.cu"', "set source or source_file, not both"),
            ('name: "f" source_file: "empty.cu"', "'empty.cu' is empty"),
            ('name: "f"\nparams { name: "B" values: [1, x] }', r"f.textproto:2:"),
            ('name: "f" source: "x" headers { name: "h" text: "t" file: "a.cu" }',
             "set text or file, not both"),
        ):
            (self.dir / "empty.cu").write_text("")
            (self.dir / "a.cu").write_text("a")
            with self.assertRaisesRegex(InvalidArgument, why):
                read_family(self.write(text))
        with self.assertRaisesRegex(NotFound, "descriptor .*nothing.textproto"):
            read_family(self.dir / "nothing.textproto")


class JobRequestTest(unittest.TestCase):
    def test_budgets_mean_what_the_clis_budget_means(self) -> None:
        cases: tuple[tuple[Budget, str, float], ...] = (
            ("500", "max_variants", 500),
            (500, "max_variants", 500),
            ("5%", "max_fraction", 0.05),
            ("100%", "max_fraction", 1.0),
            ("0.5%", "max_fraction", 0.005),
            ("90s", "max_seconds", 90.0),
            ("5m", "max_seconds", 300.0),
            ("1h30m", "max_seconds", 5400.0),
            ("1.5s", "max_seconds", 1.5),
            ("250ms", "max_seconds", 0.25),
            (timedelta(minutes=2), "max_seconds", 120.0),
        )
        for budget, field, value in cases:
            options = search_options(budget=budget)
            self.assertAlmostEqual(getattr(options, field), value, msg=repr(budget))
            self.assertEqual(options.ListFields()[0][0].name, field, budget)
        refused: tuple[tuple[object, str], ...] = (
            ("0", "count of variants"),
            (0, "at least 1"),
            ("-3", "count of variants"),
            ("five", "a time must be positive"),
            ("0s", "a time must be positive"),
            ("90x", "a time must be positive"),
            ("0%", r"\(0%, 100%\]"),
            ("101%", r"\(0%, 100%\]"),
            ("x%", r"\(0%, 100%\]"),
            ("", "count of variants"),
            (True, "expected an int"),
            (timedelta(0), "positive"),
        )
        for bad, why in refused:
            with self.assertRaisesRegex(InvalidArgument, f"invalid budget .*{why}"):
                search_options(budget=bad)  # type: ignore[arg-type]

    def test_search_and_seed(self) -> None:
        options = search_options("Model", "5%", 7)
        self.assertEqual(options.strategy, pb.MODEL)
        self.assertEqual(options.seed, 7)
        self.assertEqual(search_options(), pb.SearchOptions())
        with self.assertRaisesRegex(InvalidArgument, "expected exhaustive, random or model"):
            search_options("greedy")
        with self.assertRaisesRegex(InvalidArgument, "expected exhaustive, random or model"):
            search_options("search_strategy_unspecified")
        with self.assertRaisesRegex(InvalidArgument, "invalid seed"):
            search_options(seed=-1)

    def test_every_keyword_reaches_the_wire_as_the_shared_table_says(self) -> None:
        # The table the CLI's test reads too (client/cli/cli_test.cc): both
        # clients put the same JobOptions on the wire, or refuse the same
        # values naming the flag / keyword.
        table = json.loads(SHARED_TESTDATA.joinpath("warmup_options.json").read_text())
        made = pb.Manifest(arch="sm_90", items=[pb.ManifestItem(family="axpy")])
        self.assertGreater(len(table["cases"]), 40)
        for case in table["cases"]:
            keywords = case["python"]
            with self.subTest(cli=" ".join(case["cli"]), python=keywords):
                if "error" in case:
                    with self.assertRaisesRegex(InvalidArgument, re.escape(case["error"]["python"])):
                        job_request(made, **keywords)
                    continue
                wire = json_format.ParseDict(case["wire"], pb.JobOptions())
                self.assertEqual(job_request(made, **keywords).spec.options, wire)

    def test_a_manifest_becomes_the_job_request(self) -> None:
        manifest = TESTDATA / "manifests" / "warmup.textproto"
        request = job_request(manifest, retune=True, search="random", budget="10%", seed=3)
        self.assertEqual(request.spec.manifest, read_manifest(manifest))
        self.assertTrue(request.spec.manifest.items)
        self.assertTrue(request.spec.options.retune)
        self.assertEqual(request.spec.options.search.max_fraction, 0.1)
        made = pb.Manifest(arch="sm_90", items=[pb.ManifestItem(family="axpy")])
        only_compiled = job_request(made, compile_only=True)
        self.assertTrue(only_compiled.spec.options.compile_only)
        self.assertFalse(only_compiled.spec.options.HasField("search"))
        with self.assertRaisesRegex(InvalidArgument, "compile_only measures nothing"):
            job_request(made, compile_only=True, budget="5%")
        with self.assertRaisesRegex(InvalidArgument, "lists no items"):
            job_request(pb.Manifest(arch="sm_90"))
        with self.assertRaisesRegex(InvalidArgument, "bad_syntax.textproto:"):
            read_manifest(TESTDATA / "manifests" / "bad_syntax.textproto")
        with self.assertRaises(NotFound):
            read_manifest(TESTDATA / "manifests" / "absent.textproto")


def measured_job() -> pb.Job:
    """A finished job of three problems: one tuned (a regression against the
    cache), one cached, one that failed."""
    job = pb.Job(id="job-7", state=pb.FAILED, error="1 of 3 problems got no valid config")
    job.counts.CopyFrom(pb.JobCounts(problems=3, cached_problems=1, variants=40, compiled=40,
                                     measured=40, ok=36, wrong_result=4))
    job.timing.CopyFrom(pb.JobTiming(compile_s=12.2, screen_s=41, serial_s=30, elapsed_s=88.6))
    tuned = job.reports.add(family="rmsnorm", speedup=1.3125, regression=True,
                            previous_ratio=0.964, previous_differs="NVRTC 12.8 -> 13.0")
    tuned.problem.CopyFrom(pb.Problem(dims={"rows": 64, "hidden": 4096}, dtype=pb.BFLOAT16))
    tuned.entry.config.params.update({"VEC": 4, "ITEMS": 8})
    tuned.entry.timing.CopyFrom(pb.TimingStats(median_us=3.1, achieved_gbps=338.25,
                                               achieved_tflops=0.42))
    tuned.entry.limits.copy_gbps = 3382.5
    tuned.entry.tie = True
    tuned.entry.tied = 3
    tuned.previous.timing.median_us = 2.99
    tuned.status_counts.update({"OK": 16, "WRONG_RESULT": 4})
    tuned.screened = 20
    cached = job.reports.add(family="rmsnorm", cached=True)
    cached.problem.CopyFrom(pb.Problem(dims={"rows": 64, "hidden": 8192}, dtype=pb.BFLOAT16))
    cached.entry.config.params["VEC"] = 8
    cached.entry.timing.median_us = 5.0
    failed = job.reports.add(family="softmax",
                             error="all 20 variants rejected: 20 WRONG_RESULT\nmore")
    failed.problem.CopyFrom(pb.Problem(dims={"rows": 8, "cols": 32000}, dtype=pb.FLOAT32))
    failed.status_counts.update({"OK": 20, "NEW_STATUS": 1})
    return job


class ReportTest(unittest.TestCase):
    def test_a_measured_job(self) -> None:
        text = Client.report(measured_job())
        lines = text.splitlines()
        self.assertEqual(
            lines[0],
            "job job-7 FAILED: 3 problems (1 cached), 40 variants: 40 compiled, 40 measured: "
            "36 ok, 4 wrong result",
        )
        self.assertEqual(lines[1], "error: 1 of 3 problems got no valid config")
        header = lines[3].split()
        self.assertEqual(header, ["FAMILY", "DIMS", "DTYPE", "CONFIG", "MEDIAN_US", "GB/S",
                                  "%LIMIT", "TFLOP/S", "SPEEDUP", "FLAGS"])
        self.assertEqual(
            lines[4].split(),
            ["rmsnorm", "hidden=4096,rows=64", "bf16", "ITEMS=8", "VEC=4", "3.10", "338.2",
             "10%", "0.42", "1.31x", "tie(3)", "REGRESSION"],
        )
        # Right-aligned numbers end where their header does.
        self.assertEqual(lines[4].index("3.10") + 4, lines[3].index("MEDIAN_US") + 9)
        self.assertEqual(lines[5].split(), ["rmsnorm", "hidden=8192,rows=64", "bf16", "VEC=8",
                                            "5.00", "cached"])
        self.assertRegex(lines[6], r"^softmax +cols=32000,rows=8 +fp32 +error: all 20 variants "
                                   r"rejected: 20 WRONG_RESULT$")
        self.assertIn("Changes against the cache", lines)
        change = lines[lines.index("Changes against the cache") + 2].split()
        self.assertEqual(change, ["rmsnorm", "hidden=4096,rows=64", "bf16", "2.99", "3.10",
                                  "0.964x", "NVRTC", "12.8", "->", "13.0", "REGRESSION"])
        self.assertIn("variants: OK 36 \u00b7 WRONG_RESULT 4 \u00b7 NEW_STATUS 1 (20 screened)",
                      lines)
        self.assertEqual(lines[-1], "time: compile 12 s \u00b7 screen 41 s \u00b7 serial 30 s "
                                    "\u00b7 total 1 min 29 s")
        self.assertNotIn("compile-only", text)
        self.assertFalse(any(line.endswith(" ") for line in lines))

    def test_a_compile_only_job_says_that_nothing_was_measured(self) -> None:
        job = pb.Job(id="job-8", state=pb.SUCCEEDED, arch="sm_90")
        job.spec.options.compile_only = True
        job.counts.CopyFrom(pb.JobCounts(problems=1, variants=21, compiled=21))
        report = job.reports.add(family="axpy")
        report.problem.CopyFrom(pb.Problem(dims={"n": 1024}, dtype=pb.FLOAT32))
        text = Client.report(job)
        self.assertEqual(
            text.splitlines()[0], "job job-8 SUCCEEDED: 1 problems, 21 variants: 21 compiled"
        )
        self.assertIn("compile-only for sm_90: 21 variants compiled, 0 found compiled before, "
                      "0 failed; nothing was measured", text)
        self.assertIn("lookups answer as before", text)
        self.assertNotIn("FAMILY", text)  # no problem failed: nothing per problem to show
        report.error = "variant BLOCK=64 did not compile"
        self.assertIn("axpy    n=1024  fp32", Client.report(job))


def fake_cli(directory: Path, stdout: str, stderr: str, exit_code: int) -> Path:
    """A program that records its arguments in args.txt beside it and says
    what `autotune check` would."""
    for name, text in (("out.txt", stdout), ("err.txt", stderr)):
        (directory / name).write_text(text)
    script = directory / "autotune"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{directory}/args.txt"\n'
        f'cat "{directory}/out.txt"\n'
        f'cat "{directory}/err.txt" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


class CheckTest(unittest.TestCase):
    def setUp(self) -> None:
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        self.dir = Path(temp.name)

    def test_a_family_that_passes(self) -> None:
        cli = fake_cli(
            self.dir,
            "f.textproto: the descriptor of axpy is valid\ncompiled for sm_80 with NVRTC 13.0\n",
            "autotune: check: warning: the family names no default_config\n",
            0,
        )
        result = Client.check("f.textproto", arch="sm_80", cli=cli)
        self.assertIn("compiled for sm_80", result.output)
        self.assertEqual(result.warnings, ("the family names no default_config",))
        self.assertEqual((self.dir / "args.txt").read_text().split(),
                         ["check", "f.textproto", "--arch", "sm_80"])
        with mock.patch.dict(os.environ, {"AUTOTUNE_CLI": str(cli)}):
            Client.check("g.textproto")
        self.assertEqual((self.dir / "args.txt").read_text().split(), ["check", "g.textproto"])

    def test_problems_are_raised_one_a_line(self) -> None:
        cli = fake_cli(
            self.dir,
            "",
            "autotune: check: warning: w\n"
            "autotune: check: INVALID_ARGUMENT: f.textproto:3: params[0]: empty\n"
            "  f.textproto (compiled for sm_90): reference (fp32): error: x undefined\n",
            1,
        )
        with self.assertRaises(InvalidArgument) as caught:
            Client.check("f.textproto", cli=cli)
        self.assertEqual(
            caught.exception.message.splitlines(),
            ["f.textproto:3: params[0]: empty",
             "f.textproto (compiled for sm_90): reference (fp32): error: x undefined"],
        )
        fake_cli(self.dir, "", "autotune: check: NOT_FOUND: cannot open 'f.textproto'\n", 1)
        with self.assertRaisesRegex(NotFound, "cannot open 'f.textproto'"):
            Client.check("f.textproto", cli=cli)

    def test_a_missing_cli_is_named(self) -> None:
        with self.assertRaisesRegex(FileNotFoundError, "autotune CLI is not found.*AUTOTUNE_CLI"):
            Client.check("f.textproto", cli=self.dir / "absent")
        with mock.patch.dict(os.environ, {"AUTOTUNE_CLI": "", "PATH": str(self.dir)}):
            with self.assertRaisesRegex(FileNotFoundError, "'autotune' on PATH"):
                Client.check("f.textproto")


Handler = Callable[[Any, grpc.ServicerContext], Any]


class FakeService:
    """autotune.v1.Autotune's tuning calls on a unix socket, answered by
    `handlers` (method name -> function of the request and context); each
    request is kept in `requests` with the deadline time it had left."""

    def __init__(self, socket_path: Path, handlers: dict[str, Handler]) -> None:
        self.requests: list[tuple[str, Any, float]] = []
        self.address = f"unix://{socket_path}"
        types: dict[str, tuple[Any, Any]] = {
            "RegisterKernel": (pb.RegisterKernelRequest, pb.RegisterKernelResponse),
            "SubmitJob": (pb.SubmitJobRequest, pb.JobProgress),
            "GetJob": (pb.GetJobRequest, pb.Job),
        }
        methods = {}
        for name, handler in handlers.items():
            request_type, response_type = types[name]
            recording = self._recording(name, handler)
            make = (
                grpc.unary_stream_rpc_method_handler
                if name == "SubmitJob"
                else grpc.unary_unary_rpc_method_handler
            )
            methods[name] = make(
                recording,
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("autotune.v1.Autotune", methods),)
        )
        self.server.add_insecure_port(self.address)
        self.server.start()

    def _recording(self, name: str, handler: Handler) -> Handler:
        def recorded(request: Any, context: grpc.ServicerContext) -> Any:
            self.requests.append((name, request, context.time_remaining() or 0.0))
            return handler(request, context)

        return recorded

    def stop(self) -> None:
        self.server.stop(grace=None)


def job(state: int, error: str = "") -> pb.Job:
    return pb.Job(id="job-1", state=state, error=error)  # type: ignore[arg-type]


class TuningCallsTest(unittest.TestCase):
    def setUp(self) -> None:
        temp = tempfile.TemporaryDirectory(prefix="autotune-py-")
        self.addCleanup(temp.cleanup)
        self.dir = Path(temp.name)
        self.services = 0

    def service(self, **handlers: Handler) -> Client:
        """A client of a new FakeService (self.fake) answering with `handlers`."""
        self.services += 1
        fake = FakeService(self.dir / f"fake{self.services}.sock", handlers)
        self.addCleanup(fake.stop)
        self.fake = fake
        client = Client(fake.address, timeout=5)
        self.addCleanup(client.close)
        return client

    def test_register_sends_the_family_and_surfaces_its_warnings(self) -> None:
        def register(request: pb.RegisterKernelRequest, _: Any) -> pb.RegisterKernelResponse:
            response = pb.RegisterKernelResponse(changed=True, warnings=["no default_config"])
            response.kernel.name = request.family.name
            return response

        client = self.service(RegisterKernel=register)
        good = copy_testdata("good", self.dir)
        with self.assertWarnsRegex(UserWarning, "register axpy: no default_config"):
            response = client.register(good / "axpy.textproto", replace=True)
        self.assertEqual(list(response.warnings), ["no default_config"])
        self.assertTrue(response.changed)
        _, request, time_left = self.fake.requests[0]
        self.assertEqual(request.family.source, (good / "axpy.cu").read_text())
        self.assertTrue(request.replace)
        # The daemon compiles the family first: minutes, not the client's 5 s.
        self.assertGreater(time_left, 250)
        message = pb.KernelFamily(name="made", source="x")
        with self.assertWarns(UserWarning):
            self.assertEqual(client.register(message).kernel.name, "made")

    def progress(self, *states: int, error: str = "") -> Handler:
        def submit(request: pb.SubmitJobRequest, _: Any) -> Iterator[pb.JobProgress]:
            for state in states:
                yield pb.JobProgress(job=job(state, error), message=f"now {state}")

        return submit

    def test_submit_follows_the_job_and_tune_raises_when_it_does_not_succeed(self) -> None:
        client = self.service(SubmitJob=self.progress(pb.QUEUED, pb.COMPILING, pb.SUCCEEDED))
        manifest = pb.Manifest(arch="sm_90", items=[pb.ManifestItem(family="axpy")])
        seen: list[pb.JobProgress] = []
        done = client.tune(manifest, compile_only=True, on_progress=seen.append)
        self.assertEqual(done.state, pb.SUCCEEDED)
        self.assertEqual([p.job.state for p in seen], [pb.QUEUED, pb.COMPILING, pb.SUCCEEDED])
        _, request, _ = self.fake.requests[0]
        self.assertTrue(request.spec.options.compile_only)
        self.assertEqual(request.spec.manifest, manifest)

        error = "variant BLOCK=64 did not compile"
        for state, code, why in (
            (pb.FAILED, "ABORTED", f"job job-1 failed: {error}"),
            (pb.CANCELLED, "CANCELLED", "job job-1 was cancelled"),
        ):
            client = self.service(SubmitJob=self.progress(pb.COMPILING, state, error=error))
            self.assertEqual(client.submit(manifest).state, state)
            with self.assertRaises(JobFailed) as caught:
                client.tune(manifest)
            self.assertEqual(caught.exception.code, code)
            self.assertEqual(caught.exception.message, why)
            self.assertEqual(caught.exception.job.state, state)

        client = self.service(SubmitJob=self.progress(pb.COMPILING))
        with self.assertRaisesRegex(AutotuneError, "ended while job job-1 was still COMPILING"):
            client.tune(manifest)
        client = self.service(SubmitJob=self.progress())
        with self.assertRaisesRegex(AutotuneError, "without reporting the job"):
            client.submit(manifest)

    def test_an_error_in_the_callback_stops_following_the_job(self) -> None:
        client = self.service(SubmitJob=self.progress(pb.QUEUED, pb.COMPILING, pb.SUCCEEDED))

        def fail(progress: pb.JobProgress) -> None:
            raise KeyError("from the callback")

        with self.assertRaisesRegex(KeyError, "from the callback"):
            client.submit(pb.Manifest(items=[pb.ManifestItem(family="axpy")]), on_progress=fail)

    def test_wait_polls_until_the_job_ends(self) -> None:
        states = iter([pb.QUEUED, pb.SCREENING, pb.FAILED])
        lock = threading.Lock()

        def get_job(request: pb.GetJobRequest, _: Any) -> pb.Job:
            with lock:
                return pb.Job(id=request.id, state=next(states))

        client = self.service(GetJob=get_job)
        self.assertEqual(client.wait("job-1", poll=0.01).state, pb.FAILED)
        self.assertEqual(len(self.fake.requests), 3)

        client = self.service(GetJob=lambda request, _: pb.Job(id=request.id, state=pb.QUEUED))
        start = time.monotonic()
        with self.assertRaises(AutotuneError) as caught:
            client.wait("job-2", poll=0.05, timeout=0.3)
        self.assertLess(time.monotonic() - start, 2)
        self.assertEqual(caught.exception.code, "DEADLINE_EXCEEDED")
        self.assertIn("job job-2 is still QUEUED after 0.3 s", caught.exception.message)
        self.assertNotIsInstance(caught.exception, ServiceUnavailable)


class ResultTest(unittest.TestCase):
    def test_a_miss_carries_the_default_config(self) -> None:
        response = pb.LookupResponse(
            match=pb.MISS,
            miss_kind=pb.MISS_NO_ENTRY,
            miss_reason="no entry",
            default_config=pb.Config(params={"BLOCK": 256, "ELEMS_PER_THREAD": 1}),
            default_launch=pb.LaunchDims(grid=[32], block=[256]),
        )
        result = LookupResult.from_response(response)
        self.assertEqual(result.match, Match.MISS)
        self.assertEqual(result.miss_kind, MissKind.NO_ENTRY)
        self.assertEqual(result.default_config, {"BLOCK": 256, "ELEMS_PER_THREAD": 1})
        self.assertEqual(result.default_launch, LaunchDims((32,), (256,), 0))
        self.assertEqual(result.default_launch, ((32,), (256,), 0))
        self.assertEqual(result.config, {})
        self.assertIsNone(result.launch)
        self.assertFalse(result.has_binary)

    def test_kinds_this_client_does_not_know(self) -> None:
        with self.assertRaisesRegex(AutotuneError, "match kind 7"):
            LookupResult.from_response(pb.LookupResponse(match=7))  # type: ignore[arg-type]
        newer = pb.LookupResponse(match=pb.MISS, miss_kind=42)  # type: ignore[arg-type]
        newer_miss = LookupResult.from_response(newer)
        self.assertEqual(newer_miss.miss_kind, MissKind.UNRECOGNIZED)


class ErrorTest(unittest.TestCase):
    def test_codes_pick_the_exception(self) -> None:
        for code, kind in (
            ("UNAVAILABLE", ServiceUnavailable),
            ("DEADLINE_EXCEEDED", ServiceUnavailable),
            ("NOT_FOUND", NotFound),
            ("INVALID_ARGUMENT", InvalidArgument),
            ("DATA_LOSS", DataLoss),
            ("PERMISSION_DENIED", PermissionDenied),
            ("UNAUTHENTICATED", Unauthenticated),
            ("ABORTED", AutotuneError),
        ):
            error = error_for_code(code, "why")
            self.assertIs(type(error), kind, code)
            self.assertEqual(error.code, code)
            self.assertEqual(error.message, "why")
            self.assertEqual(str(error), f"{code}: why")

    def test_a_daemon_that_is_not_there_fails_fast_naming_the_address(self) -> None:
        with tempfile.TemporaryDirectory(prefix="autotune-py-") as temp:
            address = f"unix://{temp}/absent.sock"
            with Client(address, timeout=5) as client:
                start = time.monotonic()
                with self.assertRaises(ServiceUnavailable) as caught:
                    client.lookup(Lookup("vector_scale", {"batch": 8, "n": 4096}, "bf16"))
                self.assertLess(time.monotonic() - start, 2)
        self.assertEqual(caught.exception.code, "UNAVAILABLE")
        self.assertIn(f"cannot reach autotuned at {address}", caught.exception.message)
        self.assertIn("is the daemon running?", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
