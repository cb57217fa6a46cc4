"""Python client of autotune, the runtime autotuning service for CUDA kernels.

    import autotune_client as at

    with at.Client() as client:
        result = client.lookup(at.Lookup("vector_scale", {"batch": 8, "n": 4096}, "bf16"),
                               include_cubin=True)

    # At an inference server's start: one deadline, the local cache as fallback.
    answers = at.startup_lookup(lookups, deadline=2.0, device="NVIDIA H200")

Modules: client (Client), lookups (Lookup, LookupResult, the enums),
local_cache (LocalCache, the on-disk format shared with the C++ client),
startup (startup_lookup, StartupLookup), server_configs (the JSON files
vLLM and SGLang read, as `autotune export-configs` writes them), errors
(the exceptions), paths (default locations).
"""

from autotune_client.client import Client, read_token_file
from autotune_client.errors import (
    AutotuneError,
    DataLoss,
    InvalidArgument,
    LocalCacheCorrupt,
    LocalCacheError,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
    Unauthenticated,
)
from autotune_client.local_cache import LocalCache, answer_key
from autotune_client.lookups import (
    BatchAnswer,
    DimDistance,
    Device,
    DType,
    LaunchDims,
    Lookup,
    LookupResult,
    Match,
    MissKind,
    format_dims,
    parse_dtype,
)
from autotune_client.messages import pb
from autotune_client.paths import (
    client_server_address,
    default_local_cache_directory,
    default_server_address,
)
from autotune_client.server_configs import export_server_configs, server_config_files
from autotune_client.startup import (
    NO_LOCAL_CACHE,
    SOURCE_LOCAL_CACHE,
    SOURCE_SERVICE,
    StartupAnswer,
    StartupLookup,
    startup_lookup,
)

__all__ = [
    "AutotuneError",
    "BatchAnswer",
    "Client",
    "DType",
    "DataLoss",
    "Device",
    "DimDistance",
    "InvalidArgument",
    "LaunchDims",
    "LocalCache",
    "LocalCacheCorrupt",
    "LocalCacheError",
    "Lookup",
    "LookupResult",
    "Match",
    "MissKind",
    "NO_LOCAL_CACHE",
    "NotFound",
    "PermissionDenied",
    "SOURCE_LOCAL_CACHE",
    "SOURCE_SERVICE",
    "ServiceUnavailable",
    "StartupAnswer",
    "StartupLookup",
    "Unauthenticated",
    "answer_key",
    "client_server_address",
    "default_local_cache_directory",
    "default_server_address",
    "export_server_configs",
    "format_dims",
    "parse_dtype",
    "read_token_file",
    "pb",
    "server_config_files",
    "startup_lookup",
]
