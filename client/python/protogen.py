"""Generates the protobuf messages of proto/autotune.proto for Python.

The package's messages (autotune_client/autotune_pb2.py) are never checked
in: they are written by the system protoc (Debian's protobuf-compiler) from
the checkout's proto/autotune.proto, so they cannot disagree with the C++
side. Two callers:

- setup.py, when the package is built (pip install client/python), writes
  the module into the build tree beside the package's sources;
- a source checkout, so that `import autotune_client` works without pip:

      python3 client/python/protogen.py

  writes client/python/autotune_client/autotune_pb2.py and its stub
  autotune_pb2.pyi (both ignored by git).
  The tests do the same before they import the package.

Environment: AUTOTUNE_PROTO names another autotune.proto, PROTOC another
protoc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = PYTHON_DIR / "autotune_client"
DEFAULT_PROTO = PYTHON_DIR.parent.parent / "proto" / "autotune.proto"
MODULE_NAME = "autotune_pb2.py"
STUB_NAME = "autotune_pb2.pyi"  # its types, for type checkers


def proto_file() -> Path:
    """The autotune.proto to compile: $AUTOTUNE_PROTO, else the checkout's."""
    override = os.environ.get("AUTOTUNE_PROTO", "")
    return Path(override) if override else DEFAULT_PROTO


def generate(output_dir: Path, proto: Path | None = None) -> Path:
    """Writes autotune_pb2.py and its stub (.pyi) into `output_dir`; returns the
    module's path.

    The module is generated in a scratch directory and renamed into place,
    so a process importing it at the same time sees the old file or the new
    one, never part of one. Raises FileNotFoundError when the proto or
    protoc cannot be found, RuntimeError when protoc fails (with its
    output).
    """
    proto = proto if proto is not None else proto_file()
    if not proto.is_file():
        raise FileNotFoundError(
            f"{proto}: no such file; the Python client is built from a checkout of autotune "
            "(client/python beside proto/), or set AUTOTUNE_PROTO to the autotune.proto to use"
        )
    protoc = shutil.which(os.environ.get("PROTOC", "protoc"))
    if protoc is None:
        raise FileNotFoundError(
            "protoc not found: install it (apt-get install protobuf-compiler) or set PROTOC"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output_dir, prefix=".protogen.") as scratch:
        command = [
            protoc,
            f"--proto_path={proto.parent}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            str(proto),
        ]
        finished = subprocess.run(command, capture_output=True, text=True, check=False)
        if finished.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} failed (exit {finished.returncode}): "
                f"{finished.stderr.strip() or finished.stdout.strip()}"
            )
        # The stub first: a reader that finds the new module finds its stub.
        os.replace(Path(scratch) / STUB_NAME, output_dir / STUB_NAME)
        target = output_dir / MODULE_NAME
        os.replace(Path(scratch) / MODULE_NAME, target)
    return target


def ensure(output_dir: Path, proto: Path | None = None) -> Path:
    """generate() unless `output_dir` already holds a module at least as new
    as the proto; returns the module's path."""
    proto = proto if proto is not None else proto_file()
    target = output_dir / MODULE_NAME
    stub = output_dir / STUB_NAME
    if (
        target.is_file()
        and stub.is_file()
        and proto.is_file()
        and target.stat().st_mtime >= proto.stat().st_mtime
    ):
        return target
    return generate(output_dir, proto)


def main() -> int:
    try:
        written = generate(PACKAGE_DIR)
    except (OSError, RuntimeError) as error:
        print(f"protogen: {error}", file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
