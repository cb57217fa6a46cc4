"""The protobuf messages of autotune.v1 (proto/autotune.proto).

`pb` is the module protoc generates (autotune_pb2); the rest of the package
reaches the messages only through it. The module is built, never checked
in: by setup.py when the package is installed, or in a source checkout by
`python3 client/python/protogen.py`.
"""

try:
    from autotune_client import autotune_pb2 as pb
except ModuleNotFoundError as error:
    if error.name != "autotune_client.autotune_pb2":
        raise
    raise ImportError(
        "autotune_client.autotune_pb2 is missing: it is generated from proto/autotune.proto. "
        "Install the package (pip install client/python) or, in a source checkout, run "
        "python3 client/python/protogen.py"
    ) from error

__all__ = ["pb"]
