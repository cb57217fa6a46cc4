"""Python client of autotune, the runtime autotuning service for CUDA kernels.

    import autotune_client as at

    with at.Client() as client:
        lookup = at.Lookup("gla_decode", {"batch": 8, "heads": 32, "dim": 128}, "bf16")
        result = client.lookup(lookup, include_cubin=True)

    # At an inference server's start: one deadline, the local cache as fallback.
    answers = at.startup_lookup(lookups, deadline=2.0, device="NVIDIA H200")

    # Tuning: register a family, tune a manifest, read the report.
    with at.Client() as client:
        client.register("kernels/testdata/good/axpy.textproto")
        job = client.tune("axpy.manifest", on_progress=print)
        print(client.report(job))

Modules: client (Client), lookups (Lookup, LookupResult, the enums),
local_cache (LocalCache, the on-disk format shared with the C++ client),
startup (startup_lookup, StartupLookup), server_configs (the JSON files
vLLM and SGLang read, as `autotune export-configs` writes them), families
(descriptors, and `autotune check` behind Client.check), jobs (manifests and
search options as the CLI reads them), report (a finished job as text,
behind Client.report), errors (the exceptions), paths (default locations).
"""

try:
    import google.protobuf  # noqa: F401
    import grpc  # noqa: F401
except ImportError as _missing:
    from autotune_client.requirements import missing_dependency_message as _message

    raise ImportError(_message(_missing)) from _missing

from autotune_client.client import Client, read_token_file
from autotune_client.launch import CudaDriver, LaunchError, TunedKernel
from autotune_client.errors import (
    AutotuneError,
    DataLoss,
    InvalidArgument,
    JobFailed,
    LocalCacheCorrupt,
    LocalCacheError,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
    Unauthenticated,
)
from autotune_client.families import CheckResult, read_family
from autotune_client.jobs import JobState, read_manifest, search_options
from autotune_client.local_cache import LocalCache, answer_key, pack_key
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
    NamedIntEnum,
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
    "CheckResult",
    "Client",
    "CudaDriver",
    "DType",
    "DataLoss",
    "Device",
    "DimDistance",
    "InvalidArgument",
    "JobFailed",
    "JobState",
    "LaunchDims",
    "LocalCache",
    "LocalCacheCorrupt",
    "LocalCacheError",
    "Lookup",
    "LookupResult",
    "Match",
    "MissKind",
    "NO_LOCAL_CACHE",
    "NamedIntEnum",
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
    "pack_key",
    "pb",
    "read_family",
    "read_manifest",
    "read_token_file",
    "search_options",
    "server_config_files",
    "startup_lookup",
    "LaunchError",
    "TunedKernel",
]
