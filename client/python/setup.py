"""Builds autotune_client with its protobuf messages.

The metadata is in pyproject.toml. This file adds what pyproject cannot say:

- after the package's sources are copied into the build tree,
  autotune_pb2.py is generated there from the checkout's
  proto/autotune.proto with the system protoc (protogen.py), so the
  installed package carries messages that match the proto it was built
  from;
- the build tree and the egg-info go to a temporary folder of this run,
  removed when it ends, so `pip install client/python` (which builds in
  place) leaves the checkout as it was;
- what the build lacks (protoc, the proto, the wheel package) is said in
  one line with how to get it, not as a traceback.
"""

import atexit
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The build backend runs this file with the project directory as the current
# directory, but does not put it on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import protogen  # noqa: E402

# pip runs each build step (metadata, wheel) in a process of its own, which
# runs this file: each gets its own folder.
SCRATCH = tempfile.mkdtemp(prefix="autotune-client-build.")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)


def require_wheel() -> None:
    """Exits naming the wheel package when a wheel is to be built without it
    (pip --no-build-isolation uses the setuptools and wheel already
    installed; Debian's python3 has both, other Pythons often lack wheel)."""
    needs_wheel = {"bdist_wheel", "dist_info", "editable_wheel"}  # dist_info: pip's metadata step
    if needs_wheel.intersection(sys.argv) and importlib.util.find_spec("wheel") is None:
        sys.exit(
            f"autotune-client: building a wheel needs the 'wheel' package, which {sys.executable} "
            "lacks: install it (apt-get install python3-wheel for Debian's python3, else "
            f"{sys.executable} -m pip install wheel), or build with Debian's /usr/bin/python3"
        )


class BuildPyWithMessages(build_py):
    """build_py, then autotune_pb2.py generated into the built package."""

    def run(self) -> None:
        super().run()
        if self.dry_run:
            return
        try:
            written = protogen.generate(Path(self.build_lib) / "autotune_client")
        except (OSError, RuntimeError) as error:
            sys.exit(f"autotune-client: cannot generate the protobuf messages: {error}")
        self.announce(f"generated {written}", level=2)


require_wheel()
setup(
    cmdclass={"build_py": BuildPyWithMessages},
    options={
        "build": {"build_base": str(Path(SCRATCH) / "build")},
        "egg_info": {"egg_base": SCRATCH},
    },
)
