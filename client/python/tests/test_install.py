"""`pip install client/python` builds the package with its messages and
leaves the checkout as it was (pip builds in place: setup.py sends the
build tree and the egg-info to a temporary folder)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import support


def files_under(root: Path) -> set[str]:
    """Every file and folder below `root`, relative to it."""
    found: set[str] = set()
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


class InstallTest(unittest.TestCase):
    def test_pip_install_builds_the_messages_and_writes_nothing_into_the_checkout(self) -> None:
        has_pip = subprocess.run(
            [sys.executable, "-m", "pip", "--version"], capture_output=True, check=False
        )
        if has_pip.returncode != 0:
            self.skipTest(f"{sys.executable} has no pip (apt-get install python3-pip)")
        before = files_under(support.PYTHON_DIR)
        with tempfile.TemporaryDirectory(prefix="autotune-py-") as temp:
            target = Path(temp) / "site"
            # Offline: the setuptools and wheel already installed build it.
            installed = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                 "--no-index", "--disable-pip-version-check", "--target", str(target),
                 str(support.PYTHON_DIR)],
                capture_output=True, text=True, timeout=300, check=False,
                env={**os.environ, "PIP_NO_CACHE_DIR": "1"},
            )  # fmt: skip
            self.assertEqual(installed.returncode, 0, installed.stdout + installed.stderr)
            self.assertEqual(files_under(support.PYTHON_DIR) - before, set())
            package = target / "autotune_client"
            self.assertTrue((package / "autotune_pb2.py").is_file())
            self.assertTrue((package / "autotune_pb2.pyi").is_file())
            self.assertTrue((package / "py.typed").is_file())
            # The installed copy imports on its own, with this proto's messages.
            imported = subprocess.run(
                [sys.executable, "-c",
                 "import autotune_client as at; print(at.__file__); "
                 "print(at.pb.RegisterKernelResponse.DESCRIPTOR.fields_by_name['warnings'].name)"],
                capture_output=True, text=True, timeout=60, check=False,
                cwd=temp, env={**os.environ, "PYTHONPATH": str(target)},
            )  # fmt: skip
            self.assertEqual(imported.returncode, 0, imported.stderr)
            self.assertEqual(
                imported.stdout.split(), [str(package / "__init__.py"), "warnings"]
            )


if __name__ == "__main__":
    unittest.main()
