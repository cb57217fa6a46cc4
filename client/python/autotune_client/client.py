"""Python client of the autotune daemon (service autotune.v1.Autotune).

    with Client() as client:  # $AUTOTUNE_SERVER, else the daemon's default socket
        result = client.lookup(Lookup("vector_scale", {"batch": 8, "n": 4096}, "bf16"))
        if result.match == Match.MISS:
            config = result.default_config  # run untuned
        else:
            config = result.config

Errors: every call raises an AutotuneError subclass carrying the service's
status code and message: NotFound for an unknown family, InvalidArgument
for a bad problem, ServiceUnavailable when the daemon cannot be reached
("cannot reach autotuned at ADDRESS: ...; is the daemon running?") or does
not answer within the timeout. Calls fail fast rather than wait for a
daemon that is not there, so a start-up path never blocks on it longer
than one connection attempt or the timeout.

Thread safety: a Client may be used from many threads at once; calls
multiplex over one channel. Create one per process and share it.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import grpc

from autotune_client.errors import (
    AutotuneError,
    DataLoss,
    InvalidArgument,
    PermissionDenied,
    error_for_code,
)
from autotune_client.lookups import (
    BatchAnswer,
    Lookup,
    LookupResult,
    describe_request,
    sha256_hex,
)
from autotune_client.messages import pb
from autotune_client.paths import (
    client_server_address,
    socket_owner_from_environment,
    socket_owner_problem,
)

_SERVICE = "/autotune.v1.Autotune"

# A BatchLookup with the cubins of a thousand kernels is tens of MB; gRPC's
# default limit (4 MiB) is far too small.
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 512 << 20

_CODE_NAMES: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}


def error_from_rpc(error: grpc.RpcError, address: str) -> AutotuneError:
    """The AutotuneError for a failed call, as the C++ client words it
    (client/grpc_status.cc)."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (error.details() if isinstance(error, grpc.Call) else "") or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        details = details or "connection failed"
        message = f"cannot reach autotuned at {address}: {details}; is the daemon running?"
    else:
        message = details
    return error_for_code(code.name, message)


def error_from_code_number(code: int, message: str) -> AutotuneError:
    """The AutotuneError for a google.rpc.Code number, as BatchLookup reports one
    item's failure."""
    return error_for_code(_CODE_NAMES.get(code, "UNKNOWN"), message)


class Client:
    """A connection to autotuned. Does not dial on creation: the first call
    connects, and an unreachable daemon is reported by that call."""

    def __init__(
        self,
        address: Optional[str] = None,
        timeout: float = 10.0,
        credentials: Optional[grpc.ChannelCredentials] = None,
        max_receive_message_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
        token: Optional[str] = None,
    ) -> None:
        """`address`: "unix:///path/to.sock" or "host:port"; None = $AUTOTUNE_SERVER,
        else the daemon's default socket. `timeout`: seconds each call may
        take unless it is given its own. `credentials`: TLS
        (grpc.ssl_channel_credentials); None = plaintext, what a unix socket
        or a loopback daemon started with --insecure expects. `token`: a
        bearer token (read_token_file), sent with every call; None = none
        (the owner of a unix socket needs none).

        Raises InvalidArgument for an empty address or a timeout that is not
        positive, PermissionDenied for a unix socket that belongs to another
        user than you, root or AUTOTUNE_SOCKET_OWNER (another user may be
        listening there: nothing is sent to it).
        """
        self._address = client_server_address() if address is None else address
        if not self._address:
            raise InvalidArgument("empty server address")
        if timeout <= 0:
            raise InvalidArgument(f"the timeout must be positive, got {timeout}")
        if max_receive_message_bytes <= 0:
            raise InvalidArgument("max_receive_message_bytes must be positive")
        if self._address.startswith("unix://"):
            try:
                owner = socket_owner_from_environment()
            except ValueError as error:
                raise InvalidArgument(str(error)) from None
            problem = socket_owner_problem(self._address[len("unix://") :], owner)
            if problem is not None:
                raise PermissionDenied(problem)
        self._timeout = timeout
        if token is not None and (not token or any(c.isspace() for c in token)):
            raise InvalidArgument("the token is empty or holds white space")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        options = [
            ("grpc.max_receive_message_length", max_receive_message_bytes),
            ("grpc.primary_user_agent", "autotune-client-python"),
        ]
        if credentials is None:
            self._channel = grpc.insecure_channel(self._address, options=options)
        else:
            self._channel = grpc.secure_channel(self._address, credentials, options=options)
        self._lookup = self._channel.unary_unary(
            f"{_SERVICE}/Lookup",
            request_serializer=pb.LookupRequest.SerializeToString,
            response_deserializer=pb.LookupResponse.FromString,
        )
        self._batch_lookup = self._channel.unary_unary(
            f"{_SERVICE}/BatchLookup",
            request_serializer=pb.BatchLookupRequest.SerializeToString,
            response_deserializer=pb.BatchLookupResponse.FromString,
        )
        self._get_binaries = self._channel.unary_unary(
            f"{_SERVICE}/GetBinaries",
            request_serializer=pb.GetBinariesRequest.SerializeToString,
            response_deserializer=pb.GetBinariesResponse.FromString,
        )
        self._list_kernels = self._channel.unary_unary(
            f"{_SERVICE}/ListKernels",
            request_serializer=pb.ListKernelsRequest.SerializeToString,
            response_deserializer=pb.ListKernelsResponse.FromString,
        )
        self._list_entries = self._channel.unary_unary(
            f"{_SERVICE}/ListEntries",
            request_serializer=pb.ListEntriesRequest.SerializeToString,
            response_deserializer=pb.ListEntriesResponse.FromString,
        )

    @property
    def address(self) -> str:
        return self._address

    @property
    def timeout(self) -> float:
        return self._timeout

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def lookup(
        self, lookup: Lookup, include_cubin: bool = False, timeout: Optional[float] = None
    ) -> LookupResult:
        """The tuned config for one problem: EXACT, NEAREST or MISS (a MISS is
        an answer, not an error). With `include_cubin`, the entry's binary,
        checked against its sha256: a mismatch raises DataLoss."""
        request = lookup.to_request(include_cubin=include_cubin)
        response = self.raw_lookup(request, timeout)
        cubin: Optional[bytes] = None
        if response.cubin:
            cubin = _checked_cubin(request, response.entry.binary_sha256, response.cubin)
        return LookupResult.from_response(response, cubin)

    def batch_lookup(
        self,
        lookups: Sequence[Lookup],
        include_cubin: bool = False,
        timeout: Optional[float] = None,
    ) -> list[BatchAnswer]:
        """One answer per lookup, in order, in one call. An error for one item
        (unknown family, bad dims) is that item's `error`; the call as a
        whole raises only when the service cannot answer it. Each distinct
        cubin is sent once and checked against its sha256 (DataLoss for
        the items whose cubin fails)."""
        batch = pb.BatchLookupRequest(include_cubin=include_cubin)
        for lookup in lookups:
            batch.lookups.append(lookup.to_request())
        response = self.raw_batch_lookup(batch, timeout)
        answers: list[BatchAnswer] = []
        for request, item in zip(batch.lookups, response.results):
            if item.error_code != 0:
                error = error_from_code_number(item.error_code, item.error_message)
                answers.append(BatchAnswer(request, None, error))
                continue
            try:
                cubin = _batch_cubin(request, item.response, response.binaries, include_cubin)
                answers.append(
                    BatchAnswer(request, LookupResult.from_response(item.response, cubin), None)
                )
            except AutotuneError as error:
                answers.append(BatchAnswer(request, None, error))
        return answers

    def list_kernels(self, timeout: Optional[float] = None) -> list[pb.KernelSummary]:
        """The kernel families the daemon knows, current versions."""
        response: pb.ListKernelsResponse = _call(
            self._list_kernels,
            pb.ListKernelsRequest(),
            self._timeout if timeout is None else timeout,
            self._address,
            self._metadata,
        )
        return list(response.kernels)

    def list_entries(
        self, entry_filter: pb.EntryFilter, timeout: Optional[float] = None
    ) -> list[pb.Entry]:
        """Every cached entry `entry_filter` selects, page after page."""
        entries: list[pb.Entry] = []
        while True:
            request = pb.ListEntriesRequest(filter=entry_filter, limit=1000, offset=len(entries))
            page: pb.ListEntriesResponse = _call(
                self._list_entries,
                request,
                self._timeout if timeout is None else timeout,
                self._address,
                self._metadata,
            )
            entries.extend(page.entries)
            if not page.entries or len(entries) >= page.total:
                return entries

    def raw_lookup(
        self, request: pb.LookupRequest, timeout: Optional[float] = None
    ) -> pb.LookupResponse:
        """The Lookup RPC on messages, as the service answers it (the cubin is
        not checked here)."""
        try:
            response: pb.LookupResponse = self._lookup(
                request,
                timeout=self._timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as error:
            raise error_from_rpc(error, self._address) from None
        return response

    def raw_batch_lookup(
        self, request: pb.BatchLookupRequest, timeout: Optional[float] = None
    ) -> pb.BatchLookupResponse:
        """The BatchLookup RPC on messages. Raises AutotuneError (INTERNAL) when
        the service answers a different number of items than were asked."""
        try:
            response: pb.BatchLookupResponse = self._batch_lookup(
                request,
                timeout=self._timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as error:
            raise error_from_rpc(error, self._address) from None
        if len(response.results) != len(request.lookups):
            raise AutotuneError(
                f"the service answered {len(response.results)} of {len(request.lookups)} "
                "lookups",
                "INTERNAL",
            )
        return response

    def raw_get_binaries(
        self, request: pb.GetBinariesRequest, timeout: Optional[float] = None
    ) -> pb.GetBinariesResponse:
        """The GetBinaries RPC on messages: stored cubins by sha256 (the caller
        checks each against its digest)."""
        try:
            response: pb.GetBinariesResponse = self._get_binaries(
                request,
                timeout=self._timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as error:
            raise error_from_rpc(error, self._address) from None
        return response


def read_token_file(path: str) -> str:
    """The token a token file holds (`autotune token new --out`), surrounding
    white space dropped. Raises InvalidArgument for an empty file or one
    holding more than one word, OSError when it cannot be read."""
    with open(path, encoding="utf-8") as file:
        token = file.read().strip()
    if not token or any(c.isspace() for c in token):
        raise InvalidArgument(f"token file {path} should hold one token")
    return token


def _call(method, request, timeout, address, metadata=None):  # type: ignore[no-untyped-def]
    try:
        return method(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as error:
        raise error_from_rpc(error, address) from None


def _checked_cubin(request: pb.LookupRequest, sha256: str, cubin: bytes) -> bytes:
    if sha256_hex(cubin) != sha256:
        raise DataLoss(
            f"{describe_request(request)}: the cubin the service sent does not match its "
            f"sha256 {sha256}; refused"
        )
    return cubin


def _batch_cubin(
    request: pb.LookupRequest,
    response: pb.LookupResponse,
    binaries: Mapping[str, bytes],
    include_cubin: bool,
) -> Optional[bytes]:
    """The checked cubin of one batch item; None when none was asked for or
    the answer has no binary."""
    if not include_cubin or response.match == pb.MISS or not response.entry.binary_sha256:
        return None
    sha256 = response.entry.binary_sha256
    if sha256 not in binaries:
        return None
    return _checked_cubin(request, sha256, binaries[sha256])
