"""Test support: the package straight from the source tree, and a real daemon.

Importing this module puts client/python on sys.path and generates
autotune_client/autotune_pb2.py from proto/autotune.proto when it is
missing or older than the proto, so the tests run without pip.

Daemon starts build/service/autotuned on a socket and database of its own
(AUTOTUNED overrides the binary; AUTOTUNE_CLI the autotune CLI used to
wait for it and to import; AUTOTUNE_MAKE_SAMPLE the sample bundle writer).
AUTOTUNE_LOCAL_PACK names build/client/autotune-local-pack, the C++
client's local cache packs from the command line.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PYTHON_DIR.parents[1]

if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

import protogen  # noqa: E402

try:
    import google.protobuf  # noqa: F401
    import grpc  # noqa: F401
except ImportError as error:
    raise ImportError(
        f"the autotune_client tests need grpcio and protobuf importable by {sys.executable} "
        f"({error}): apt-get install python3-grpcio python3-protobuf, and run the tests with "
        "Debian's /usr/bin/python3"
    ) from error

protogen.ensure(protogen.PACKAGE_DIR)


def binary(variable: str, default: Path) -> Path:
    """The path in $variable, else `default`."""
    value = os.environ.get(variable, "")
    return Path(value) if value else default


AUTOTUNED = binary("AUTOTUNED", REPO_ROOT / "build" / "service" / "autotuned")
AUTOTUNE_CLI = binary("AUTOTUNE_CLI", REPO_ROOT / "build" / "client" / "autotune")
MAKE_SAMPLE = binary(
    "AUTOTUNE_MAKE_SAMPLE", REPO_ROOT / "build" / "tests" / "autotune-make-sample"
)
# The C++ client's local cache packs from the command line
# (client/testing/local_pack_tool_main.cc).
LOCAL_PACK = binary("AUTOTUNE_LOCAL_PACK", REPO_ROOT / "build" / "client" / "autotune-local-pack")


def missing_binaries() -> list[Path]:
    """The daemon-side binaries the end-to-end tests need and cannot run."""
    needed = (AUTOTUNED, AUTOTUNE_CLI, MAKE_SAMPLE)
    return [path for path in needed if not os.access(path, os.X_OK)]


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def run_local_pack(*args: str) -> subprocess.CompletedProcess[str]:
    """autotune-local-pack with `args`: "key REQUESTS", "write DIR REQUESTS" or
    "read DIR REQUESTS", REQUESTS a serialized BatchLookupRequest."""
    return run([str(LOCAL_PACK), *args])


def fake_cubin(size: int = 4096) -> bytes:
    """Bytes that pass for a cubin where nothing loads it: the ELF magic that
    autotune-make-sample checks, then deterministic filler."""
    data = b"\x7fELF"
    block = b"vector_scale sample"
    while len(data) < size:
        block = hashlib.sha256(block).digest()
        data += block
    return data[:size]


class Daemon:
    """One autotuned with a socket and a database in `directory`.

    start() returns once `autotune stats` answers; stop() ends it (SIGTERM,
    then SIGKILL of its process group after 10 s) and may be called more
    than once, so a test registers it with addCleanup right away.
    """

    def __init__(self, directory: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.extra_args = list(extra_args)
        self.socket_path = directory / "s.sock"
        self.address = f"unix://{self.socket_path}"
        self.log_path = directory / "autotuned.log"
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._exit_code: Optional[int] = None

    def start(self, timeout: float = 30) -> None:
        argv = [
            str(AUTOTUNED),
            "--db", str(self.directory / "c.db"),
            "--listen", self.address,
            "--kernels", "none",
            "--gpus", "none",
            *self.extra_args,
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        give_up = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"autotuned exited with {self._process.returncode} before answering: "
                    f"{self.log_tail()}"
                )
            stats = run([str(AUTOTUNE_CLI), "--server", self.address, "stats"], timeout=10)
            # Refused is answered too: roles may leave this uid out.
            if stats.returncode == 0 or "needs the reader role" in stats.stderr:
                return
            if time.monotonic() > give_up:
                raise RuntimeError(
                    f"autotuned did not answer within {timeout} s: {self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self) -> Optional[int]:
        """Ends the daemon; its exit code (None if it was never started)."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._process = None
        self._exit_code = process.returncode
        return self._exit_code

    def import_sample(self, cubin: bytes) -> bytes:
        """Imports the quick start's sample (vector_scale bf16 n=4096 at batch
        1, 8 and 64 on an NVIDIA H200, BLOCK=256 ELEMS_PER_THREAD=2) around
        `cubin`, and returns the cubin the daemon serves for it: its own
        compile of the entries' config, never the bundle's bytes."""
        cubin_path = self.directory / "vector_scale.cubin"
        bundle_path = self.directory / "sample.json"
        cubin_path.write_bytes(cubin)
        made = run([str(MAKE_SAMPLE), "--cubin", str(cubin_path), "--out", str(bundle_path)])
        if made.returncode != 0:
            raise RuntimeError(f"autotune-make-sample failed: {made.stderr}")
        imported = run(
            [str(AUTOTUNE_CLI), "--server", self.address, "import", str(bundle_path)]
        )
        if imported.returncode != 0:
            raise RuntimeError(f"autotune import failed: {imported.stderr}")
        exported_path = self.directory / "served.json"
        exported = run(
            [str(AUTOTUNE_CLI), "--server", self.address, "export", "--out", str(exported_path)]
        )
        if exported.returncode != 0:
            raise RuntimeError(f"autotune export failed: {exported.stderr}")
        binaries = json.loads(exported_path.read_text())["binaries"]
        if len(binaries) != 1:
            raise RuntimeError(f"the sample exported {len(binaries)} binaries, not 1")
        return base64.b64decode(binaries[0]["cubin"])

    def log_tail(self, size: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError as error:
            return f"(no log: {error})"
