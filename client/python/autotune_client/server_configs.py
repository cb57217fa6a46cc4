"""A family's tuned configs as the JSON files inference servers read today:
the layout vLLM and SGLang use for their fused-MoE kernels, one file per
shape and device, keyed by the bucketed dimension. The same files, byte for
byte, as `autotune export-configs` writes (client/server_configs.h):

    heads=32,dim=128,device_name=NVIDIA_H200,dtype=bf16.json
    {
      "1": {"BLOCK_V": 16, "THREADS": 256, "UNROLL": 2, "VEC": 4},
      "8": {...}
    }

The file name holds the problem's dims other than the bucketed one in the
order the family declares them, then device_name= (spaces and "/" as "_") and dtype=. A reader does
what vLLM does: keys as integers, the nearest key to its batch size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence, Union

from autotune_client.client import Client
from autotune_client.errors import InvalidArgument, NotFound
from autotune_client.lookups import dtype_name
from autotune_client.local_cache import _write_atomically
from autotune_client.messages import pb


def server_config_files(
    family: pb.KernelSummary, entries: Sequence[pb.Entry], bucket: Optional[str] = None
) -> dict[str, str]:
    """File name -> JSON text for `entries` of `family`. InvalidArgument when
    the family has no bucketed dimension (or several, without `bucket`), when
    `bucket` is not one of its dims, or for an entry of another family."""
    if bucket is None:
        bucketed = [dim.name for dim in family.dims if dim.bucketed]
        if len(bucketed) != 1:
            listed = f" ({', '.join(bucketed)})" if bucketed else ""
            raise InvalidArgument(
                f"family {family.name} has {len(bucketed)} bucketed dimensions{listed}; "
                "name the one to key the files by (--bucket)"
            )
        bucket = bucketed[0]
    elif bucket not in {dim.name for dim in family.dims}:
        raise InvalidArgument(f"--bucket {bucket} is not a dimension of family {family.name}")
    files: dict[str, dict[int, pb.Entry]] = {}
    for entry in entries:
        if entry.family != family.name:
            raise InvalidArgument(
                f"an entry of family {entry.family} among those of {family.name}"
            )
        if bucket not in entry.problem.dims:
            continue
        # Dims in the family's order (N before K for a GEMM, as vLLM names its files).
        parts = [f"{dim.name}={entry.problem.dims[dim.name]}" for dim in family.dims
                 if dim.name != bucket and dim.name in entry.problem.dims]
        device = entry.device.name.replace(" ", "_").replace("/", "_")
        parts.append(f"device_name={device}")
        parts.append(f"dtype={dtype_name(entry.problem.dtype)}")
        by_key = files.setdefault(",".join(parts) + ".json", {})
        key = entry.problem.dims[bucket]
        # Several versions or NVRTCs of one problem: the newest tuning wins.
        if key not in by_key or entry.tuned_at > by_key[key].tuned_at:
            by_key[key] = entry
    out: dict[str, str] = {}
    for name in sorted(files):
        items = []
        for key, entry in sorted(files[name].items()):
            fields = ", ".join(f'"{param}": {value}'
                               for param, value in sorted(entry.config.params.items()))
            items.append(f'  "{key}": {{{fields}}}')
        out[name] = "{\n" + ",\n".join(items) + "\n}\n"
    return out


def export_server_configs(
    client: Client,
    family: str,
    out_dir: Union[str, os.PathLike[str]],
    device: str = "",
    bucket: Optional[str] = None,
    family_hash: str = "",
) -> dict[str, int]:
    """Writes the files for `family` (its current version unless
    `family_hash`) into `out_dir`; returns file name -> configs in it."""
    summaries = [kernel for kernel in client.list_kernels() if kernel.name == family]
    if not summaries:
        raise NotFound(f"unknown family '{family}'")
    summary = summaries[0]
    entry_filter = pb.EntryFilter(
        family=family, family_hash=family_hash or summary.content_hash, device=device
    )
    files = server_config_files(summary, client.list_entries(entry_filter), bucket)
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, int] = {}
    for name, text in files.items():
        _write_atomically(directory / name, text.encode(), "config file")
        written[name] = text.count('": {')
    return written
