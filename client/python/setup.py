"""Builds autotune_client with its protobuf messages.

The metadata is in pyproject.toml. This file adds one build step: after
the package's sources are copied into the build tree, autotune_pb2.py is
generated there from the checkout's proto/autotune.proto with the system
protoc (protogen.py), so the installed package carries messages that match
the proto it was built from.
"""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The build backend runs this file with the project directory as the current
# directory, but does not put it on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import protogen  # noqa: E402


class BuildPyWithMessages(build_py):
    """build_py, then autotune_pb2.py generated into the built package."""

    def run(self) -> None:
        super().run()
        if not self.dry_run:
            written = protogen.generate(Path(self.build_lib) / "autotune_client")
            self.announce(f"generated {written}", level=2)


setup(cmdclass={"build_py": BuildPyWithMessages})
