"""Why this Python cannot import grpcio or protobuf, and what to do about it.

Debian's python3-grpcio and python3-protobuf are built for Debian's own
Python (/usr/bin/python3) and installed into its dist-packages: another
Python (pyenv, conda, a python.org build) cannot use them, not even from a
venv made with --system-site-packages (that venv sees its own base Python's
site-packages, not Debian's). The message names the case this is.

Pure Python: imported before grpc, by the package's __init__.
"""

from __future__ import annotations

import os
import sys

# Where Debian's interpreter lives: sys.base_prefix of /usr/bin/python3 and
# of every venv made from it.
DEBIAN_PREFIX = "/usr"


def venv_sees_system_packages(prefix: str) -> bool | None:
    """Whether the venv at `prefix` was made with --system-site-packages
    (its pyvenv.cfg says so); None when there is no pyvenv.cfg to read."""
    try:
        with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8") as config:
            for line in config:
                key, _, value = line.partition("=")
                if key.strip() == "include-system-site-packages":
                    return value.strip().lower() == "true"
    except OSError:
        return None
    return False


def missing_dependency_message(
    missing: BaseException,
    executable: str | None = None,
    prefix: str | None = None,
    base_prefix: str | None = None,
    version: str | None = None,
    system_packages: bool | None = None,
) -> str:
    """The ImportError's text when grpc or google.protobuf cannot be
    imported; the interpreter's facts default to this one's (tests pass
    their own)."""
    executable = executable or sys.executable
    prefix = prefix if prefix is not None else sys.prefix
    base_prefix = base_prefix if base_prefix is not None else sys.base_prefix
    version = version or f"{sys.version_info.major}.{sys.version_info.minor}"
    in_venv = prefix != base_prefix
    if in_venv and system_packages is None:
        system_packages = venv_sees_system_packages(prefix)
    head = f"autotune_client needs grpcio and protobuf, which {executable} (Python {version}) cannot import ({missing})"
    if base_prefix != DEBIAN_PREFIX:
        where = f"a venv whose Python is {base_prefix}" if in_venv else f"the Python of {base_prefix}"
        return (
            f"{head}. This is {where}, not Debian's /usr/bin/python3: Debian's python3-grpcio and "
            "python3-protobuf serve only Debian's own Python, even through a venv made with "
            "--system-site-packages. Either make the venv from Debian's Python "
            "(/usr/bin/python3 -m venv --system-site-packages DIR, after apt-get install "
            f"python3-grpcio python3-protobuf), or install them into this Python: {executable} -m "
            "pip install grpcio protobuf (needs the package index)"
        )
    if in_venv and not system_packages:
        return (
            f"{head}. This venv was made from Debian's Python without --system-site-packages, so it "
            "cannot see python3-grpcio and python3-protobuf: make it again with "
            "/usr/bin/python3 -m venv --system-site-packages DIR, or pip install grpcio protobuf "
            "into it (needs the package index)"
        )
    return (
        f"{head}. On Debian: apt-get install python3-grpcio python3-protobuf (this Python, "
        f"{'a venv with system site packages over ' if in_venv else ''}Debian's, then sees them)"
    )
