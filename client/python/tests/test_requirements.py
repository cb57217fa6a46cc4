"""The ImportError's advice names the case it is: another Python than
Debian's (its venvs included), a venv of Debian's without system packages,
or Debian's Python without the packages."""

import os
import tempfile
import unittest

from autotune_client.requirements import missing_dependency_message, venv_sees_system_packages

MISSING = ModuleNotFoundError("No module named 'grpc'")


class MissingDependencyMessageTest(unittest.TestCase):
    def test_a_venv_over_another_python_is_told_debians_packages_are_not_for_it(self) -> None:
        message = missing_dependency_message(
            MISSING,
            executable="/home/u/venv/bin/python",
            prefix="/home/u/venv",
            base_prefix="/home/u/.pyenv/versions/3.12.1",
            version="3.12",
            system_packages=True,
        )
        self.assertIn("/home/u/venv/bin/python (Python 3.12) cannot import (No module named 'grpc')", message)
        self.assertIn("a venv whose Python is /home/u/.pyenv/versions/3.12.1", message)
        self.assertIn("even through a venv made with --system-site-packages", message)
        self.assertIn("/usr/bin/python3 -m venv --system-site-packages DIR", message)
        # Not the advice the user already followed, alone.
        self.assertNotIn("or a venv made with --system-site-packages)", message)

    def test_another_python_outside_a_venv(self) -> None:
        message = missing_dependency_message(
            MISSING, executable="/opt/py/bin/python3", prefix="/opt/py", base_prefix="/opt/py", version="3.13"
        )
        self.assertIn("the Python of /opt/py, not Debian's /usr/bin/python3", message)
        self.assertIn("/opt/py/bin/python3 -m pip install grpcio protobuf", message)

    def test_a_venv_of_debians_python_without_system_packages(self) -> None:
        message = missing_dependency_message(
            MISSING, executable="/v/bin/python3", prefix="/v", base_prefix="/usr", version="3.11", system_packages=False
        )
        self.assertIn("without --system-site-packages", message)
        self.assertIn("make it again with /usr/bin/python3 -m venv --system-site-packages DIR", message)

    def test_debians_python_without_the_packages(self) -> None:
        message = missing_dependency_message(
            MISSING, executable="/usr/bin/python3", prefix="/usr", base_prefix="/usr", version="3.11"
        )
        self.assertIn("apt-get install python3-grpcio python3-protobuf", message)
        self.assertNotIn("venv", message)


class VenvConfigTest(unittest.TestCase):
    def test_reads_include_system_site_packages(self) -> None:
        with tempfile.TemporaryDirectory() as venv:
            self.assertIsNone(venv_sees_system_packages(venv))
            with open(os.path.join(venv, "pyvenv.cfg"), "w", encoding="utf-8") as config:
                config.write("home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.11.2\n")
            self.assertTrue(venv_sees_system_packages(venv))
            with open(os.path.join(venv, "pyvenv.cfg"), "w", encoding="utf-8") as config:
                config.write("home = /usr/bin\ninclude-system-site-packages = false\n")
            self.assertFalse(venv_sees_system_packages(venv))


if __name__ == "__main__":
    unittest.main()
