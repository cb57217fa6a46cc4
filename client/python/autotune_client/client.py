"""Python client of the autotune daemon (service autotune.v1.Autotune).

    with Client() as client:  # $AUTOTUNE_SERVER, else the daemon's default socket
        lookup = Lookup("gla_decode", {"batch": 8, "heads": 32, "dim": 128}, "bf16")
        result = client.lookup(lookup)
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

Tuning, the whole job from Python (a family, a check without a daemon, a
job with its progress, its report):

    descriptor = "kernels/testdata/good/axpy.textproto"
    Client.check(descriptor, arch="sm_90")  # the autotune CLI: NVRTC, no daemon
    with Client() as client:
        client.register(descriptor)  # the daemon compiles it before storing it
        job = client.tune("axpy.manifest", on_progress=print)  # JobFailed unless SUCCEEDED
        print(client.report(job))

Thread safety: a Client may be used from many threads at once; calls
multiplex over one channel. Create one per process and share it.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import grpc
from google.protobuf.message import Message

from autotune_client.errors import (
    AutotuneError,
    DataLoss,
    InvalidArgument,
    JobFailed,
    PermissionDenied,
    error_for_code,
)
from autotune_client.families import CheckResult, PathLike, check_family, read_family
from autotune_client.jobs import FINISHED_STATES, job_request, state_name
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
from autotune_client.report import job_report

_SERVICE = "/autotune.v1.Autotune"

# A BatchLookup with the cubins of a thousand kernels is tens of MB; gRPC's
# default limit (4 MiB) is far too small.
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 512 << 20

_CODE_NAMES: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}

# The least deadline of RegisterKernel, which compiles the family on the
# daemon first (client/client.h, kRegisterKernelTimeout).
REGISTER_KERNEL_TIMEOUT = 300.0

ProgressCallback = Callable[[pb.JobProgress], None]


def _serialized(request: Union[Message, bytes]) -> bytes:
    """A request's bytes: a message serialized, or bytes sent as they are (a
    start-up serializes its batch once, for the call and for its pack's
    key)."""
    if isinstance(request, bytes):
        return request
    serialized: bytes = request.SerializeToString()
    return serialized


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

        def unary(name: str, request: Any, response: Any, serializer: Any = None) -> Any:
            return self._channel.unary_unary(
                f"{_SERVICE}/{name}",
                request_serializer=serializer or request.SerializeToString,
                response_deserializer=response.FromString,
            )

        self._lookup = unary("Lookup", pb.LookupRequest, pb.LookupResponse)
        self._batch_lookup = unary(
            "BatchLookup", pb.BatchLookupRequest, pb.BatchLookupResponse, _serialized
        )
        self._get_binaries = unary("GetBinaries", pb.GetBinariesRequest, pb.GetBinariesResponse)
        self._list_kernels = unary("ListKernels", pb.ListKernelsRequest, pb.ListKernelsResponse)
        self._list_entries = unary("ListEntries", pb.ListEntriesRequest, pb.ListEntriesResponse)
        self._register_kernel = unary(
            "RegisterKernel", pb.RegisterKernelRequest, pb.RegisterKernelResponse
        )
        self._unregister_kernel = unary(
            "UnregisterKernel", pb.UnregisterKernelRequest, pb.UnregisterKernelResponse
        )
        self._submit_job = self._channel.unary_stream(
            f"{_SERVICE}/SubmitJob",
            request_serializer=pb.SubmitJobRequest.SerializeToString,
            response_deserializer=pb.JobProgress.FromString,
        )
        self._get_job = unary("GetJob", pb.GetJobRequest, pb.Job)
        self._list_jobs = unary("ListJobs", pb.ListJobsRequest, pb.ListJobsResponse)
        self._cancel_job = unary("CancelJob", pb.CancelJobRequest, pb.Job)
        self._create_login_link = unary(
            "CreateLoginLink", pb.CreateLoginLinkRequest, pb.CreateLoginLinkResponse
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
        response: pb.ListKernelsResponse = self._ask(
            self._list_kernels, pb.ListKernelsRequest(), timeout
        )
        return list(response.kernels)

    def list_entries(
        self, entry_filter: pb.EntryFilter, timeout: Optional[float] = None
    ) -> list[pb.Entry]:
        """Every cached entry `entry_filter` selects, page after page."""
        entries: list[pb.Entry] = []
        while True:
            request = pb.ListEntriesRequest(filter=entry_filter, limit=1000, offset=len(entries))
            page: pb.ListEntriesResponse = self._ask(self._list_entries, request, timeout)
            entries.extend(page.entries)
            if not page.entries or len(entries) >= page.total:
                return entries

    def register(
        self,
        family: Union[PathLike, pb.KernelFamily],
        replace: bool = False,
        timeout: Optional[float] = None,
    ) -> pb.RegisterKernelResponse:
        """Registers a kernel family, as `autotune register` does.

        `family`: a descriptor file (read by read_family: its source_file and
        header files are read beside it) or a KernelFamily. `replace` makes
        this version current when the family exists with other content;
        without it, that is refused (InvalidArgument naming replace). The
        daemon compiles a new version before storing it, so the deadline is
        at least REGISTER_KERNEL_TIMEOUT (300 s) whatever `timeout` says.

        Returns the response: `kernel` (name, content hash, config count),
        `changed`, and `warnings`, what was allowed but is worth saying (a
        family without default_config, a family stored unchecked because the
        daemon cannot compile now). Each warning is also emitted with
        warnings.warn (category UserWarning), so it is seen unless filtered.
        Raises what read_family raises, and InvalidArgument with every
        problem the daemon found (a variant that does not compile, a bad
        expression).
        """
        message = family if isinstance(family, pb.KernelFamily) else read_family(family)
        deadline = max(self._timeout if timeout is None else timeout, REGISTER_KERNEL_TIMEOUT)
        request = pb.RegisterKernelRequest(family=message, replace=replace)
        response: pb.RegisterKernelResponse = self._ask(self._register_kernel, request, deadline)
        for text in response.warnings:
            warnings.warn(f"register {response.kernel.name}: {text}", UserWarning, stacklevel=2)
        return response

    def unregister(
        self, name: str, invalidate: bool = False, timeout: Optional[float] = None
    ) -> pb.UnregisterKernelResponse:
        """Removes the family `name`, every version of it (admin). Refused
        (FAILED_PRECONDITION) while it has entries or measurements, unless
        `invalidate`: then they go with it. Returns how many versions,
        entries and measurements were removed (`autotune gc` frees their
        cubins). NotFound for a family the daemon does not know."""
        request = pb.UnregisterKernelRequest(name=name, invalidate=invalidate)
        response: pb.UnregisterKernelResponse = self._ask(self._unregister_kernel, request, timeout)
        return response

    def submit(
        self,
        manifest: Union[PathLike, pb.Manifest],
        *,
        on_progress: Optional[ProgressCallback] = None,
        timeout: Optional[float] = None,
        **options: Any,
    ) -> pb.Job:
        """Submits a tuning job and follows it until it ends, as `autotune
        warmup` does; returns the job as last reported, whatever its state
        (a job that FAILED is returned, not raised: see tune).

        `manifest`: a manifest file (autotune.v1.Manifest in text format) or
        a Manifest. `options`: the warmup's flags as keywords of
        jobs.job_request, one per flag: `compile_only` (compile every
        variant, measure nothing), `retune` (tune again problems that have
        entries), `search`, `budget` and `seed` ("exhaustive", "random" or
        "model"; a count (500 or "500"), a share ("5%") or a time ("90s",
        "5m", a timedelta); the seed), `shard`, `compile_timeout`,
        `variant_timeout`, `force`, `quiet_wait`, `candidates`,
        `candidate_band`, `serial_noise` and `serial_max`. A value out of
        range, or one that says how to measure with `compile_only`, is
        refused (InvalidArgument) before anything is sent; an unknown
        keyword is a TypeError. `on_progress` is called with each
        JobProgress message on the caller's thread. `timeout`: seconds the
        whole job may take; None = no limit (a job lasts as long as it
        does).

        If on_progress raises, the stream is dropped and the exception
        propagates; the job goes on in the daemon (cancel_job stops it).
        Raises AutotuneError (UNKNOWN) when the stream ends without
        reporting the job.
        """
        request = job_request(manifest, **options)
        stream = self._submit_job(request, timeout=timeout, metadata=self._metadata)
        job: Optional[pb.Job] = None
        try:
            for progress in stream:
                job = progress.job
                if on_progress is not None:
                    on_progress(progress)
        except grpc.RpcError as error:
            raise error_from_rpc(error, self._address) from None
        finally:
            stream.cancel()  # a no-op once the stream has ended
        if job is None:
            raise AutotuneError("the server ended the job stream without reporting the job")
        return job

    def tune(
        self,
        manifest: Union[PathLike, pb.Manifest],
        *,
        on_progress: Optional[ProgressCallback] = None,
        timeout: Optional[float] = None,
        **options: Any,
    ) -> pb.Job:
        """submit, then the job's end as an error: returns the job when it
        SUCCEEDED; raises JobFailed carrying it when it ended FAILED (code
        ABORTED: the daemon fails a job in which a variant did not compile or
        a problem got no valid config; job.error says why) or CANCELLED (code
        CANCELLED), and AutotuneError (UNKNOWN) when the stream ended before
        the job did (wait(job_id) follows it)."""
        job = self.submit(manifest, on_progress=on_progress, timeout=timeout, **options)
        if job.state == pb.SUCCEEDED:
            return job
        if job.state == pb.FAILED:
            raise JobFailed(job, f"job {job.id} failed" + (f": {job.error}" if job.error else ""))
        if job.state == pb.CANCELLED:
            raise JobFailed(job, f"job {job.id} was cancelled", "CANCELLED")
        raise AutotuneError(
            f"the progress stream ended while job {job.id} was still "
            f"{state_name(job.state)}; wait({job.id!r}) follows it"
        )

    def get_job(self, job_id: str, timeout: Optional[float] = None) -> pb.Job:
        """The job `job_id` as it stands. NotFound for an id the daemon does
        not know."""
        job: pb.Job = self._ask(self._get_job, pb.GetJobRequest(id=job_id), timeout)
        return job

    def list_jobs(self, limit: int = 0, timeout: Optional[float] = None) -> list[pb.Job]:
        """Recent jobs, newest first; at most `limit` (0 = the daemon's
        default)."""
        request = pb.ListJobsRequest(limit=limit)
        response: pb.ListJobsResponse = self._ask(self._list_jobs, request, timeout)
        return list(response.jobs)

    def cancel_job(self, job_id: str, timeout: Optional[float] = None) -> pb.Job:
        """Cancels the job `job_id`; returns it. A tuner may cancel only its
        own jobs (PermissionDenied otherwise)."""
        job: pb.Job = self._ask(self._cancel_job, pb.CancelJobRequest(id=job_id), timeout)
        return job

    def admin_url(self, timeout: Optional[float] = None) -> pb.CreateLoginLinkResponse:
        """A link into the daemon's admin page that signs its holder in with
        this caller's role (`url`, "http://HOST:PORT/admin#login=...", good
        once, exchanged by the page for a session cookie), and
        when it expires (`expires_at`, RFC 3339; an hour on). Only for a
        caller on the daemon's Unix socket (PermissionDenied otherwise);
        FAILED_PRECONDITION when the daemon serves no admin page (no
        --http-listen). The link holds a token: keep it as a password."""
        response: pb.CreateLoginLinkResponse = self._ask(
            self._create_login_link, pb.CreateLoginLinkRequest(), timeout
        )
        return response

    def wait(self, job_id: str, poll: float = 1.0, timeout: Optional[float] = None) -> pb.Job:
        """Asks for the job every `poll` seconds until it is SUCCEEDED, FAILED
        or CANCELLED; returns it then, whatever that state. `timeout`:
        seconds to wait at most, None = no limit; past it, raises
        AutotuneError (DEADLINE_EXCEEDED) naming the job's state. Errors of
        GetJob are raised as they come (NotFound for an unknown id)."""
        if poll <= 0:
            raise InvalidArgument(f"poll must be positive, got {poll}")
        give_up = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job.state in FINISHED_STATES:
                return job
            if give_up is not None and time.monotonic() + poll > give_up:
                raise AutotuneError(
                    f"job {job_id} is still {state_name(job.state)} after {timeout} s",
                    "DEADLINE_EXCEEDED",
                )
            time.sleep(poll)

    @staticmethod
    def report(job: pb.Job) -> str:
        """The plain-text report of a finished job (report.py): its state,
        counts and error, then per problem the chosen config, median time,
        TFLOP/s, GB/s, speedup over the default config and flags; for a
        compile-only job, what it compiled for which architecture and that
        lookups answer as before. Needs no daemon."""
        return job_report(job)

    @staticmethod
    def check(
        path: PathLike, arch: Optional[str] = None, cli: Optional[PathLike] = None
    ) -> CheckResult:
        """Checks a descriptor with `autotune check PATH [--arch ARCH]`, which
        validates it and compiles its reference and default config with
        NVRTC, without a daemon (families.py, check_family). `cli`: the
        autotune CLI; None = $AUTOTUNE_CLI, else `autotune` on PATH.

        Returns a CheckResult (`output`, `warnings`) when the family is fine;
        raises InvalidArgument holding the problems, one a line,
        FileNotFoundError when there is no CLI to run.
        """
        return check_family(path, arch=arch, cli=cli)

    def _ask(self, method: Any, request: Union[Message, bytes], timeout: Optional[float]) -> Any:
        """A unary call with this client's token and its timeout unless
        `timeout`; a failure raised as the AutotuneError for it."""
        try:
            return method(
                request,
                timeout=self._timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as error:
            raise error_from_rpc(error, self._address) from None

    def raw_lookup(
        self, request: pb.LookupRequest, timeout: Optional[float] = None
    ) -> pb.LookupResponse:
        """The Lookup RPC on messages, as the service answers it (the cubin is
        not checked here)."""
        response: pb.LookupResponse = self._ask(self._lookup, request, timeout)
        return response

    def raw_batch_lookup(
        self,
        request: pb.BatchLookupRequest,
        timeout: Optional[float] = None,
        serialized: Optional[bytes] = None,
    ) -> pb.BatchLookupResponse:
        """The BatchLookup RPC on messages; `serialized`, when given, is
        `request` serialized already, sent as it is. Raises AutotuneError
        (INTERNAL) when the service answers a different number of items than
        were asked."""
        sent = request if serialized is None else serialized
        response: pb.BatchLookupResponse = self._ask(self._batch_lookup, sent, timeout)
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
        response: pb.GetBinariesResponse = self._ask(self._get_binaries, request, timeout)
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
