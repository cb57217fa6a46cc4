"""The client's pieces that need no daemon: default addresses, the problem
vocabulary, results, and how errors are reported."""

from __future__ import annotations

import os
import tempfile
import time
import unittest
from typing import Union
from unittest import mock

import support  # noqa: F401  (puts the package on sys.path)

from autotune_client import (
    AutotuneError,
    Client,
    DataLoss,
    Device,
    DType,
    InvalidArgument,
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
)
from autotune_client.errors import error_for_code


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
