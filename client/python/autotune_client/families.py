"""Kernel family descriptors: reading one as the daemon's loader does, and
checking one with the `autotune` CLI before it is registered.

    family = read_family("kernels/testdata/good/axpy.textproto")  # source read in
    result = check_family("kernels/testdata/good/axpy.textproto", arch="sm_90")
    result.output     # what the CLI compiled, for people
    result.warnings   # what is allowed but worth saying (no default_config...)

A descriptor is autotune.v1.KernelFamily in protobuf text format. Its
`source_file` and each `headers[i].file` name files beside it or below it,
as kernels/family_loader.cc reads them: not absolute, no "..", and not a
link that leads out of the descriptor's folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from google.protobuf import text_format

from autotune_client.errors import AutotuneError, InvalidArgument, error_for_code, file_error
from autotune_client.messages import pb

PathLike = Union[str, "os.PathLike[str]"]


def outside_descriptor_folder(name: str) -> Optional[str]:
    """Why the file `name`, as a descriptor names it, is not beside the
    descriptor or below it; None when it is (kernels/family_loader.cc's
    OutsideDescriptorFolder)."""
    if name.startswith("/"):
        return f"'{name}' is absolute; name a file beside the descriptor or below it"
    if ".." in name.split("/"):
        return f"'{name}' goes up a folder (..); name a file beside the descriptor or below it"
    return None


def read_beside_descriptor(descriptor: Path, name: str) -> str:
    """The text of the file `name` that the descriptor at `descriptor` names.

    Raises InvalidArgument for a name outside the descriptor's folder,
    including through a link; NotFound (or the code of the failure) naming
    the path for a file that cannot be read.
    """
    why = outside_descriptor_folder(name)
    if why is not None:
        raise InvalidArgument(why)
    folder = descriptor.parent
    named = folder / name
    try:
        real_folder = folder.resolve(strict=True)
        real_file = named.resolve(strict=True)
        if real_file != real_folder and real_folder not in real_file.parents:
            raise InvalidArgument(
                f"'{name}' leads to '{real_file}' (through a link), outside the descriptor's "
                "folder"
            )
        return real_file.read_text(encoding="utf-8")
    except OSError as error:
        raise file_error(str(named), error) from None
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"{named}: not UTF-8 text ({error.reason})") from None


def read_family(path: PathLike) -> pb.KernelFamily:
    """The KernelFamily a descriptor file holds, with `source` read from its
    `source_file` and each header's `text` from its `file`, as `autotune
    register` sends it.

    Raises NotFound (or the code of the failure) for a file that cannot be
    read, InvalidArgument naming the descriptor for text that does not
    parse, a source or header file outside the descriptor's folder, both
    `source` and `source_file` set (or a header's `text` and `file`), or an
    empty source file. The rest of the descriptor is checked by the daemon
    when it is registered, or beforehand by check_family.
    """
    descriptor = Path(path)
    try:
        text = descriptor.read_text(encoding="utf-8")
    except OSError as error:
        raise file_error(f"descriptor {descriptor}", error) from None
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"descriptor {descriptor}: not UTF-8 text ({error.reason})") from None
    family = pb.KernelFamily()
    try:
        text_format.Parse(text, family)
    except text_format.ParseError as error:
        raise InvalidArgument(f"descriptor {descriptor}:{error}") from None
    problems: list[str] = []
    if family.source_file:
        if family.source:
            problems.append("source_file: set source or source_file, not both")
        else:
            try:
                family.source = read_beside_descriptor(descriptor, family.source_file)
            except AutotuneError as error:
                problems.append(f"source_file: {error.message}")
            else:
                if not family.source:
                    problems.append(f"source_file: '{family.source_file}' is empty")
    for index, header in enumerate(family.headers):
        if not header.file:
            continue
        field = f"headers[{index}].file"
        if header.text:
            problems.append(f"{field}: set text or file, not both")
            continue
        try:
            header.text = read_beside_descriptor(descriptor, header.file)
        except AutotuneError as error:
            problems.append(f"{field}: {error.message}")
    if problems:
        raise InvalidArgument(f"descriptor {descriptor}: " + "; ".join(problems))
    return family


@dataclass(frozen=True)
class CheckResult:
    """What `autotune check` said of a family it found fine: `output`, for
    people, names what it compiled and with which NVRTC; `warnings` are what
    is allowed but worth saying (a family without default_config), one a
    line, without the CLI's prefix."""

    output: str
    warnings: tuple[str, ...]


_CHECK_PREFIX = "autotune: check: "
_WARNING_PREFIX = _CHECK_PREFIX + "warning: "
_CODE = re.compile(r"([A-Z][A-Z_]+): (.*)", re.DOTALL)


def find_cli(cli: Optional[PathLike] = None) -> str:
    """The `autotune` CLI to run: `cli`, else $AUTOTUNE_CLI, else `autotune` on
    PATH. Raises FileNotFoundError saying where it looked."""
    named = os.fspath(cli) if cli is not None else os.environ.get("AUTOTUNE_CLI", "")
    where = "the cli argument" if cli is not None else "AUTOTUNE_CLI"
    found = shutil.which(named) if named else shutil.which("autotune")
    if found is None:
        looked = f"{named!r} (from {where})" if named else "'autotune' on PATH"
        raise FileNotFoundError(
            f"the autotune CLI is not found: {looked} is no program this process can run; "
            "build it (build/client/autotune) or install it, and name it with cli= or "
            "AUTOTUNE_CLI"
        )
    return found


def check_family(
    path: PathLike,
    arch: Optional[str] = None,
    cli: Optional[PathLike] = None,
    timeout: Optional[float] = None,
) -> CheckResult:
    """Runs `autotune check PATH [--arch ARCH]`: the descriptor's checks, then
    NVRTC compiles its reference and default config in each dtype, with no
    daemon and no GPU. `arch` defaults to the CLI's ("sm_90"); `cli` as
    find_cli; `timeout` in seconds, None = none.

    Returns a CheckResult when the family is fine. Raises InvalidArgument
    whose message holds the problems, one a line (or the error the CLI
    reported with its own code, e.g. NotFound for a missing descriptor),
    FileNotFoundError when there is no CLI to run, and AutotuneError
    (DEADLINE_EXCEEDED) when it runs past `timeout`.
    """
    argv = [find_cli(cli), "check", os.fspath(path)]
    if arch is not None:
        argv += ["--arch", arch]
    try:
        finished = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise error_for_code(
            "DEADLINE_EXCEEDED", f"{' '.join(argv)} ran past {timeout} s"
        ) from None
    warnings: list[str] = []
    errors: list[str] = []
    for line in finished.stderr.splitlines():
        if line.startswith(_WARNING_PREFIX):
            warnings.append(line[len(_WARNING_PREFIX) :])
        elif line.startswith(_CHECK_PREFIX):
            errors.append(line[len(_CHECK_PREFIX) :])
        elif line.startswith("  ") and errors:
            errors.append(line.strip())  # a problem after the first, indented by the CLI
        elif line.strip():
            errors.append(line.strip())
    if finished.returncode == 0:
        return CheckResult(output=finished.stdout, warnings=tuple(warnings))
    code = "INVALID_ARGUMENT"
    if errors:
        first = _CODE.fullmatch(errors[0])
        if first is not None:
            code, errors[0] = first.group(1), first.group(2)
    else:
        errors.append(f"{' '.join(argv)} exited with {finished.returncode} and said nothing")
    raise error_for_code(code, "\n".join(errors))
