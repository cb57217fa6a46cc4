"""Launching tuned kernels on PyTorch tensors (or anything with a device pointer).

A server resolves its kernels once at start-up and then calls each one like a
function on its tensors, on PyTorch's current stream:

    answers = at.startup_lookup([at.Lookup("rmsnorm", {"rows": 64, "hidden": 4096}, "bf16")])
    rmsnorm = at.TunedKernel.load(answers[0].result, answers[0].result.cubin)
    rmsnorm(x, w, y)  # buffers in the descriptor's order; scalars come from the answer

What a call passes follows the daemon's spec of the answer, never an
expression evaluated here: one pointer per buffer, then one 128-byte tensor
map per LaunchDims.tensor_maps entry over its buffer's pointer, then each
scalar of LookupResponse.arguments at its dtype's size. The packed sizes are
checked once, at load, against LookupResponse.parameter_bytes (what the
C++ loader compares with the cubin). Each call checks every tensor against
LookupResponse.arguments: a CUDA tensor, the buffer's dtype, contiguous, the
buffer's element count (any shape with that count: a [B, H, D] tensor may
fill a [B*H, D] buffer), a 16-byte aligned pointer where a tensor map reads
it. A call then costs those checks and one cuLaunchKernel, and it may be
captured in a CUDA graph (the launch goes to the stream given).

The CUDA driver is reached through ctypes (libcuda.so.1): no other
dependency. Kernels load into the thread's current CUDA context, or where
there is none yet into the primary context of torch's current device, the
one torch's tensors live in (CudaDriver.ensure_context).

For torch.compile, `custom_op` registers a call as a PyTorch custom operator
that mutates the output buffers, which compiled graphs call as they are.

A MISS that names the family's default config is compiled here, as the C++
loader does: its recipe (startup_lookup(..., recipes=True)) through NVRTC
(libnvrtc, by ctypes) for the device's sm_<major><minor>, the source checked
against the recipe's sha256, then launched with the answer's default launch
and arguments.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

from autotune_client import autotune_pb2 as pb
from autotune_client.errors import AutotuneError
from autotune_client.lookups import LookupResult, Match, dtype_bytes

_POINTER_BYTES = 8
_TENSOR_MAP_BYTES = 128

# DType -> the torch dtype's str().
_TORCH_DTYPES: dict[int, str] = {
    pb.FLOAT32: "torch.float32",
    pb.FLOAT16: "torch.float16",
    pb.BFLOAT16: "torch.bfloat16",
    pb.FLOAT64: "torch.float64",
    pb.INT8: "torch.int8",
    pb.INT32: "torch.int32",
    pb.INT64: "torch.int64",
    pb.UINT8: "torch.uint8",
    pb.FLOAT8_E4M3: "torch.float8_e4m3fn",
    pb.FLOAT8_E5M2: "torch.float8_e5m2",
}

# CUtensorMapDataType for a DType (kernels/tensor_map.cc: int8, uint8 and
# the fp8 types travel as bytes).
_TENSOR_MAP_DATA_TYPE = {
    pb.UINT8: 0,
    pb.INT8: 0,
    pb.FLOAT8_E4M3: 0,
    pb.FLOAT8_E5M2: 0,
    pb.INT32: 3,
    pb.INT64: 5,
    pb.FLOAT16: 6,
    pb.FLOAT32: 7,
    pb.FLOAT64: 8,
    pb.BFLOAT16: 9,
}
_SWIZZLE_CODE = {pb.SWIZZLE_32B: 1, pb.SWIZZLE_64B: 2, pb.SWIZZLE_128B: 3}


class LaunchError(AutotuneError):
    """A kernel that cannot be loaded or a call that cannot be made, and why."""


def _element_bytes(dtype: int) -> int:
    size = dtype_bytes(dtype)
    if size == 0:
        raise LaunchError(f"dtype {dtype} is not one this launcher knows")
    return size


@dataclass(frozen=True)
class TensorMapArguments:
    """cuTensorMapEncodeTiled's arguments, innermost dim first, as
    kernels/tensor_map.h's TensorMapArgumentsOf makes them."""

    data_type: int
    rank: int
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, of dims 1..rank-1
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int


def tensor_map_arguments(layout: pb.TensorMapLayout, address: int) -> TensorMapArguments:
    """The encoder's arguments for `layout` over the buffer at `address`."""
    rank = len(layout.shape)
    if not 1 <= rank <= 5 or len(layout.box) != rank:
        raise LaunchError(f"a tensor map of {rank} dims and {len(layout.box)} box extents")
    if address % 16 != 0:
        raise LaunchError(f"address {address:#x} is not 16-byte aligned")
    if layout.dtype not in _TENSOR_MAP_DATA_TYPE:
        raise LaunchError(f"a tensor map over dtype {layout.dtype}")
    dims = tuple(int(layout.shape[rank - 1 - d]) for d in range(rank))
    box = tuple(int(layout.box[rank - 1 - d]) for d in range(rank))
    strides = []
    stride = _element_bytes(layout.dtype)
    for d in range(rank):
        if d > 0:
            strides.append(stride)
        stride *= dims[d]
    return TensorMapArguments(
        data_type=_TENSOR_MAP_DATA_TYPE[layout.dtype],
        rank=rank,
        address=address,
        dims=dims,
        strides=tuple(strides),
        box=box,
        element_strides=(1,) * rank,
        swizzle=_SWIZZLE_CODE.get(layout.swizzle, 0),
    )


def scalar_bytes(dtype: int, value: float) -> bytes:
    """A scalar as the kernel receives it: little-endian, at its dtype's size
    (bf16 rounded to nearest even from fp32)."""
    if dtype == pb.FLOAT32:
        return struct.pack("<f", value)
    if dtype == pb.FLOAT64:
        return struct.pack("<d", value)
    if dtype == pb.FLOAT16:
        return struct.pack("<e", value)
    if dtype == pb.BFLOAT16:
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)
        return struct.pack("<H", (bits >> 16) & 0xFFFF)
    integers = {pb.INT8: "<b", pb.UINT8: "<B", pb.INT32: "<i", pb.INT64: "<q"}
    if dtype in integers:
        if value != int(value):
            raise LaunchError(f"scalar value {value} is not an integer for dtype {dtype}")
        return struct.pack(integers[dtype], int(value))
    raise LaunchError(f"a scalar of dtype {dtype}")


class Driver(Protocol):
    """What TunedKernel needs of the CUDA driver (CudaDriver; tests pass a fake)."""

    def load_function(self, cubin: bytes, name: str, dynamic_shared_bytes: int) -> Any: ...

    def encode_tensor_map(self, args: TensorMapArguments) -> bytes: ...

    def arch(self) -> str: ...

    def prepare(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        pointers: int,
        tensor_maps: int,
        scalars: Sequence[bytes],
    ) -> Callable[[int, Sequence[int], Optional[Sequence[bytes]]], None]:
        """The launch of `function` with `pointers` device pointers, then
        `tensor_maps` 128-byte tensor maps, then `scalars` as parameters:
        a callable (stream, pointers, maps) that launches it once per call
        (maps None when tensor_maps is 0)."""
        ...


def _current_device_ordinal() -> int:
    """torch's current CUDA device when torch is loaded, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.cuda.current_device())
        except Exception:  # torch without CUDA: the driver will say what is wrong
            return 0
    return 0


class CudaDriver:
    """The CUDA driver API through ctypes, in the thread's current context.

    Where the thread has no current context (torch creates its context
    lazily, at the first tensor on the GPU, and per thread makes it current
    only when it works there), the driver makes the primary context of
    torch's current device current: the one torch itself uses, so modules
    loaded here and torch's tensors share one context. `cu` replaces the
    driver library (tests)."""

    _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    _CUDA_ERROR_INVALID_CONTEXT = 201

    def __init__(self, library: str = "libcuda.so.1", cu: Any = None) -> None:
        if cu is not None:
            self._cu = cu
        else:
            try:
                self._cu = ctypes.CDLL(library)
            except OSError as error:
                raise LaunchError(f"cannot load the CUDA driver ({library}): {error}") from None
        self._check(self._cu.cuInit(0), "cuInit")
        self._modules: list[ctypes.c_void_p] = []  # kept loaded while the driver lives
        if isinstance(self._cu, ctypes.CDLL):
            # Plain ints convert in C, not through a c_uint made per argument.
            launch = self._cu.cuLaunchKernel
            launch.argtypes = ([ctypes.c_void_p] + [ctypes.c_uint] * 7
                               + [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p])
            launch.restype = ctypes.c_int

    def ensure_context(self) -> None:
        """Makes the primary context of torch's current device (device 0
        without torch) current on this thread when none is."""
        context = ctypes.c_void_p()
        self._check(self._cu.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
        if context.value:
            return
        ordinal = _current_device_ordinal()
        device = ctypes.c_int()
        self._check(self._cu.cuDeviceGet(ctypes.byref(device), ordinal), f"cuDeviceGet({ordinal})")
        # Retained for the life of the process, as torch retains it.
        self._check(
            self._cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
            f"cuDevicePrimaryCtxRetain(device {ordinal})",
        )
        self._check(self._cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    def _check(self, result: int, what: str) -> None:
        if result == 0:
            return
        name = ctypes.c_char_p()
        self._cu.cuGetErrorName(result, ctypes.byref(name))
        raise LaunchError(f"{what}: {name.value.decode() if name.value else result}")

    def load_function(self, cubin: bytes, name: str, dynamic_shared_bytes: int) -> Any:
        self.ensure_context()
        image = ctypes.create_string_buffer(cubin, len(cubin))
        module = ctypes.c_void_p()
        self._check(self._cu.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        self._modules.append(module)
        function = ctypes.c_void_p()
        self._check(
            self._cu.cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
            f"cuModuleGetFunction({name})",
        )
        if dynamic_shared_bytes > 48 * 1024:
            self._check(
                self._cu.cuFuncSetAttribute(
                    function,
                    self._CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    ctypes.c_int(dynamic_shared_bytes),
                ),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            )
        return function

    def arch(self) -> str:
        """sm_<major><minor> of the current context's device."""
        self.ensure_context()
        device = ctypes.c_int()
        self._check(self._cu.cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self._cu.cuDeviceGetAttribute(ctypes.byref(major), 75, device), "cuDeviceGetAttribute")
        self._check(self._cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, device), "cuDeviceGetAttribute")
        return f"sm_{major.value}{minor.value}"

    def encode_tensor_map(self, args: TensorMapArguments) -> bytes:
        storage = (ctypes.c_ubyte * (_TENSOR_MAP_BYTES + 64))()
        aligned = (ctypes.addressof(storage) + 63) & ~63  # the driver wants 64-byte alignment
        u64 = ctypes.c_uint64 * args.rank
        u32 = ctypes.c_uint32 * args.rank
        strides = (ctypes.c_uint64 * max(1, args.rank - 1))(*args.strides)
        self._check(
            self._cu.cuTensorMapEncodeTiled(
                ctypes.c_void_p(aligned),
                ctypes.c_int(args.data_type),
                ctypes.c_uint32(args.rank),
                ctypes.c_void_p(args.address),
                u64(*args.dims),
                strides,
                u32(*args.box),
                u32(*args.element_strides),
                ctypes.c_int(0),  # no interleave
                ctypes.c_int(args.swizzle),
                ctypes.c_int(0),  # no L2 promotion
                ctypes.c_int(0),  # out-of-bound elements read as zero
            ),
            "cuTensorMapEncodeTiled",
        )
        return ctypes.string_at(aligned, _TENSOR_MAP_BYTES)

    def prepare(self, function, grid, block, shared_bytes, pointers, tensor_maps, scalars):
        return _PreparedLaunch(self, function, grid, block, shared_bytes, pointers, tensor_maps,
                               scalars)

    def launch_kernel(self, arguments: tuple, stream: int, parameters: Any) -> None:
        """cuLaunchKernel(*arguments, stream, parameters, None), in the
        thread's context (made current first when the thread has none)."""
        result = self._cu.cuLaunchKernel(*arguments, stream, parameters, None)
        if result == self._CUDA_ERROR_INVALID_CONTEXT:
            # A thread that has not touched CUDA yet: its context first
            # (checked here, not before every launch).
            self.ensure_context()
            result = self._cu.cuLaunchKernel(*arguments, stream, parameters, None)
        if result:
            self._check(result, "cuLaunchKernel")


class _PreparedLaunch:
    """One kernel's launch with its parameter block kept: each parameter at a
    64-byte aligned place of one buffer (a tensor map's alignment), the
    scalars written once, the pointers written in place on each call and the
    tensor maps when they change; then one cuLaunchKernel, which copies the
    parameters. A lock keeps two threads' calls from writing the block at
    once."""

    def __init__(self, driver, function, grid, block, shared_bytes, pointers, tensor_maps,
                 scalars) -> None:
        sizes = [_POINTER_BYTES] * pointers + [_TENSOR_MAP_BYTES] * tensor_maps
        sizes += [len(s) for s in scalars]
        offsets, total = [], 0
        for size in sizes:
            offsets.append(total)
            total += -(-size // 64) * 64
        self._storage = ctypes.create_string_buffer(total + 64)
        base = (ctypes.addressof(self._storage) + 63) & ~63
        self._parameters = (ctypes.c_void_p * max(1, len(sizes)))(*[base + o for o in offsets])
        self._pointer_slots = [ctypes.c_uint64.from_address(base + o) for o in offsets[:pointers]]
        self._map_places = [base + o for o in offsets[pointers:pointers + tensor_maps]]
        for scalar, offset in zip(scalars, offsets[pointers + tensor_maps:]):
            ctypes.memmove(base + offset, scalar, len(scalar))
        self._maps: Optional[Sequence[bytes]] = None  # what the map places hold
        self._driver = driver
        self._arguments = (function, *grid, *block, shared_bytes)
        self._lock = threading.Lock()

    def __call__(self, stream: int, pointers: Sequence[int],
                 maps: Optional[Sequence[bytes]] = None) -> None:
        with self._lock:
            for slot, pointer in zip(self._pointer_slots, pointers):
                slot.value = pointer
            if maps is not None and maps is not self._maps:
                for place, encoded in zip(self._map_places, maps):
                    ctypes.memmove(place, encoded, _TENSOR_MAP_BYTES)
                self._maps = maps
            self._driver.launch_kernel(self._arguments, stream, self._parameters)


def _load_nvrtc() -> ctypes.CDLL:
    names = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"]
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as error:
            errors.append(str(error))
    raise LaunchError(f"cannot load NVRTC to compile the default config: {'; '.join(errors)}")


def _toolkit_include_dir() -> str:
    """The CUDA toolkit's headers (cuda_fp16.h and the like) as
    kernels/gpu/compiler.cc finds them: $CUDA_HOME/include, beside the NVRTC
    library loaded, or /usr/local/cuda/include; "" when none has them."""
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "include"))
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1]
                if "libnvrtc.so" in os.path.basename(path):
                    library_dir = os.path.dirname(path)
                    candidates += [os.path.join(library_dir, "..", "include"),
                                   os.path.join(library_dir, "..", "..", "include")]  # fmt: skip
                    break
    except OSError:
        pass
    candidates.append("/usr/local/cuda/include")
    for directory in candidates:
        resolved = os.path.realpath(directory)
        if os.access(os.path.join(resolved, "cuda_fp16.h"), os.R_OK):
            return resolved
    return ""


def compile_recipe(recipe: pb.CompileRecipe, arch: str) -> tuple[bytes, str]:
    """The cubin and the lowered name of the recipe's kernel compiled for
    `arch` ("sm_90") by NVRTC, as kernels/gpu/compiler.h compiles it: the
    recipe's options and headers, the name expression added. Raises
    LaunchError with the compiler's log."""
    what = f"{recipe.program_name} ({recipe.name_expression})"
    if not recipe.source:
        raise LaunchError(f"{what}: the recipe carries no source (look up with recipes=True)")
    if hashlib.sha256(recipe.source.encode()).hexdigest() != recipe.source_sha256:
        raise LaunchError(f"{what}: the source does not match the recipe's sha256")
    nvrtc = _load_nvrtc()
    nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
    program = ctypes.c_void_p()
    headers = list(recipe.headers)
    texts = (ctypes.c_char_p * max(1, len(headers)))(*[h.text.encode() for h in headers])
    names = (ctypes.c_char_p * max(1, len(headers)))(*[h.name.encode() for h in headers])

    def check(result: int, step: str) -> None:
        if result != 0:
            raise LaunchError(f"{what}: {step}: {nvrtc.nvrtcGetErrorString(result).decode()}")

    check(
        nvrtc.nvrtcCreateProgram(
            ctypes.byref(program),
            recipe.source.encode(),
            recipe.program_name.encode(),
            len(headers),
            texts if headers else None,
            names if headers else None,
        ),
        "nvrtcCreateProgram",
    )
    try:
        check(nvrtc.nvrtcAddNameExpression(program, recipe.name_expression.encode()), "nvrtcAddNameExpression")
        # In kernels/gpu/compiler.cc's order; no search of the working
        # directory (a program made from memory has none of its own).
        options = [f"-arch={arch}".encode()] + [o.encode() for o in recipe.options]
        include_dir = _toolkit_include_dir()
        if include_dir:
            options.append(f"-I{include_dir}".encode())
        options.append(b"-no-source-include")
        compiled = nvrtc.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
        if compiled != 0:
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(program, log)
            raise LaunchError(f"{what} does not compile for {arch}: {log.value.decode(errors='replace')}")
        lowered = ctypes.c_char_p()
        check(
            nvrtc.nvrtcGetLoweredName(program, recipe.name_expression.encode(), ctypes.byref(lowered)),
            "nvrtcGetLoweredName",
        )
        name = lowered.value.decode()
        size = ctypes.c_size_t()
        check(nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        check(nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return cubin.raw, name
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))


def _three(values: Sequence[int]) -> tuple[int, int, int]:
    padded = list(values) + [1] * (3 - len(values))
    return (int(padded[0]), int(padded[1]), int(padded[2]))


_raw_stream: Optional[Callable[[], int]] = None


def _current_stream() -> int:
    """torch's current stream of its current device, as a CUstream."""
    global _raw_stream
    if _raw_stream is None:
        import torch  # only when a caller gives no stream

        # The raw handle without a Stream object made per call, where this
        # torch has it (as its own compiled code reads it).
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        current_device = torch.cuda.current_device
        if raw is not None:
            _raw_stream = lambda: raw(current_device())  # noqa: E731
        else:
            _raw_stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    return int(_raw_stream())


class TunedKernel:
    """One answer's kernel, loaded, called on tensors (module docstring)."""

    def __init__(
        self,
        result: LookupResult,
        cubin: Optional[bytes],
        driver: Optional[Driver] = None,
        label: str = "",
    ) -> None:
        response = result.response
        self.label = label or f"{response.entry.family or 'kernel'}"
        self._driver = driver if driver is not None else CudaDriver()
        # What to run: the entry's cubin; else the config the answer names
        # compiled here from its recipe: the entry's (no cubin at hand, or one
        # too new for the driver: its launch) or, on another MISS, the
        # default config (the default launch).
        compiled_name = ""
        launch = response.launch
        self.compiled_here = False
        entry_applies = result.match != Match.MISS or response.miss_kind == pb.MISS_DRIVER_TOO_OLD
        if result.match == Match.MISS or not cubin:
            why = result.miss_reason or "the answer has no cubin at hand"
            named = entry_applies or response.HasField("default_config")
            if not named or not response.HasField("recipe"):
                raise LaunchError(
                    f"{self.label}: nothing to load ({result.match.name}: {why}), and no "
                    f"{'config' if entry_applies else 'default config'} with a compile recipe to "
                    "build here (look up with recipes=True)"
                )
            cubin, compiled_name = compile_recipe(response.recipe, self._driver.arch())
            launch = response.launch if entry_applies else response.default_launch
            self.compiled_here = True
        if not response.HasField("arguments") or launch is None or not launch.grid:
            raise LaunchError(
                f"{self.label}: the answer carries no launch arguments (a daemon or local cache "
                "older than this client): look it up again"
            )
        self.launch_dims = launch
        self.buffers = list(response.arguments.buffers)
        self.scalars = [scalar_bytes(s.dtype, s.value) for s in response.arguments.scalars]
        self.tensor_maps = list(self.launch_dims.tensor_maps)
        for i, layout in enumerate(self.tensor_maps):
            if not 0 <= layout.buffer < len(self.buffers):
                raise LaunchError(f"{self.label}: a tensor map over buffer {layout.buffer}")
            if layout.argument != len(self.buffers) + i:
                raise LaunchError(
                    f"{self.label}: tensor map {i} is parameter {layout.argument}; this launcher "
                    f"passes it as parameter {len(self.buffers) + i} (after the buffers)"
                )
        sizes = (
            [_POINTER_BYTES] * len(self.buffers)
            + [_TENSOR_MAP_BYTES] * len(self.tensor_maps)
            + [len(s) for s in self.scalars]
        )
        if list(response.parameter_bytes) and sizes != list(response.parameter_bytes):
            raise LaunchError(
                f"{self.label}: the launch would pass parameters of {sizes} bytes; the "
                f"family declares {list(response.parameter_bytes)}"
            )
        self._grid = _three(self.launch_dims.grid)
        self._block = _three(self.launch_dims.block)
        self._shared = int(self.launch_dims.dynamic_shared_bytes)
        name = compiled_name or response.entry.function_name
        if not name:
            raise LaunchError(f"{self.label}: the entry names no function")
        self._function = self._driver.load_function(cubin, name, self._shared)
        self._launch = self._driver.prepare(self._function, self._grid, self._block, self._shared,
                                            len(self.buffers), len(self.tensor_maps), self.scalars)
        # Tensor maps by the addresses they were encoded over.
        self._maps: dict[tuple[int, ...], list[bytes]] = {}
        # Per buffer: the torch dtype's str() and the element count; and the
        # dtype object last seen to pass (a call compares identities).
        self._expected = [(_TORCH_DTYPES.get(b.dtype, "?"), math.prod(b.shape))
                          for b in self.buffers]
        self._passed_dtypes: list[Any] = [None] * len(self.buffers)

    @classmethod
    def load(cls, result: LookupResult, cubin: Optional[bytes] = None, **kwargs: Any) -> TunedKernel:
        return cls(result, cubin if cubin is not None else result.cubin, **kwargs)

    def _check(self, index: int, tensor: Any) -> int:
        expected_dtype, elements = self._expected[index]
        if not getattr(tensor, "is_cuda", False):
            raise self._refusal(index, "not a CUDA tensor")
        dtype = tensor.dtype
        if dtype is not self._passed_dtypes[index]:
            if str(dtype) != expected_dtype:
                raise self._refusal(index, f"dtype {dtype}, the kernel takes {expected_dtype}")
            self._passed_dtypes[index] = dtype
        if tensor.numel() != elements:
            shape = self.buffers[index].shape
            raise self._refusal(
                index,
                f"{tensor.numel()} elements (shape {tuple(tensor.shape)}), the kernel takes "
                f"{elements} ({' x '.join(str(e) for e in shape)})",
            )
        if not tensor.is_contiguous():
            raise self._refusal(index, "not contiguous (call .contiguous())")
        return int(tensor.data_ptr())

    def _refusal(self, index: int, what: str) -> LaunchError:
        return LaunchError(f"{self.label}: buffer {index} '{self.buffers[index].name}': {what}")

    def __call__(self, *tensors: Any, stream: Optional[int] = None) -> None:
        if len(tensors) != len(self.buffers):
            names = ", ".join(b.name for b in self.buffers)
            raise LaunchError(
                f"{self.label}: {len(tensors)} tensors given, the kernel takes "
                f"{len(self.buffers)} ({names})"
            )
        pointers = tuple([self._check(i, t) for i, t in enumerate(tensors)])
        maps = None
        if self.tensor_maps:
            maps = self._maps.get(pointers)
            if maps is None:
                maps = [
                    self._driver.encode_tensor_map(
                        tensor_map_arguments(layout, pointers[layout.buffer])
                    )
                    for layout in self.tensor_maps
                ]
                if len(self._maps) >= 64:
                    self._maps.clear()
                self._maps[pointers] = maps
        self._launch(_current_stream() if stream is None else stream, pointers, maps)

    def custom_op(self, name: str, outputs: Sequence[int]) -> Any:
        """Registers this kernel as the PyTorch custom operator `name`
        ("autotune::rmsnorm_64x4096") taking the buffers as one list of
        tensors and writing those at the indices `outputs`; returns the op
        (torch.ops.autotune.NAME). torch.compile keeps it as one call."""
        import torch
        from torch import library as operators

        for index in outputs:
            if not 0 <= index < len(self.buffers):
                raise LaunchError(f"{self.label}: output {index} is not one of its buffers")

        def run(tensors):
            self(*tensors)

        def fake(tensors):
            return None

        # Types, not the strings this module's annotations are (postponed
        # evaluation): torch infers the operator's schema from them, and
        # cannot resolve "torch" in this module's globals.
        for function in (run, fake):
            function.__annotations__ = {"tensors": list[torch.Tensor], "return": None}
        op = operators.custom_op(name, run, mutates_args=("tensors",))
        op.register_fake(fake)
        return op

