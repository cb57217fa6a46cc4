"""Loads cubins and launches their kernels through the CUDA driver (ctypes).

The GEMM benchmarks launch the tuned kernels this way, beside torch, on
torch's current stream (so a torch CUDA graph capture records them), and
build the kernels' tensor maps as the worker and the C++ kernel loader do
(kernels/tensor_map.h): element strides 1, no interleave, no L2 promotion,
zeros past the edges.

    driver = Driver()
    function = driver.load(cubin_bytes, "gemm_bf16", shared_bytes)
    map_a = driver.tensor_map_2d(a.data_ptr(), rows, cols, box_rows, box_cols)
    driver.launch(function, grid, block, shared_bytes, stream,
                  [ctypes.c_uint64(a.data_ptr()), ..., map_a, ..., ctypes.c_float(alpha)])

torch must have initialised CUDA first: the calls use the context current
on the thread (the device's primary context, which torch uses).
"""
import ctypes

_BFLOAT16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
_SWIZZLE_128B = 3
_SHARED_OPT_IN = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class TensorMap(ctypes.Structure):
    """A CUtensorMap: 128 opaque bytes (placed 64-byte aligned by new_tensor_map)."""
    _fields_ = [("words", ctypes.c_uint64 * 16)]


def new_tensor_map():
    """A TensorMap at a 64-byte aligned address, as the driver wants it."""
    raw = (ctypes.c_uint8 * (128 + 64))()
    return TensorMap.from_buffer(raw, -ctypes.addressof(raw) % 64)  # keeps `raw` alive


class Driver:
    def __init__(self, path="libcuda.so.1"):
        self.lib = ctypes.CDLL(path)
        self.modules = []

    def check(self, rc, what):
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else rc}")

    def load(self, cubin, name, shared_bytes=0):
        """The CUfunction `name` of `cubin` (bytes), opted in to `shared_bytes`."""
        module = ctypes.c_void_p()
        image = ctypes.create_string_buffer(cubin)
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        self.modules.append(module)
        function = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
                   f"cuModuleGetFunction({name})")
        if shared_bytes > 48 * 1024:
            self.check(self.lib.cuFuncSetAttribute(function, _SHARED_OPT_IN, shared_bytes),
                       "cuFuncSetAttribute")
        return function

    def tensor_map_2d(self, address, rows, cols, box_rows, box_cols):
        """A bf16 [rows, cols] row-major tensor in [box_rows, box_cols] boxes, 128-byte swizzle."""
        tensor_map = new_tensor_map()
        dims = (ctypes.c_uint64 * 2)(cols, rows)
        strides = (ctypes.c_uint64 * 1)(cols * 2)
        box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
        element_strides = (ctypes.c_uint32 * 2)(1, 1)
        self.check(self.lib.cuTensorMapEncodeTiled(
            ctypes.byref(tensor_map), _BFLOAT16, 2, ctypes.c_void_p(address), dims, strides, box,
            element_strides, 0, _SWIZZLE_128B, 0, 0), "cuTensorMapEncodeTiled")
        return tensor_map

    def launch(self, function, grid, block, shared_bytes, stream, args):
        """cuLaunchKernel with `args` (ctypes values, in parameter order) on `stream` (a handle)."""
        params = (ctypes.c_void_p * len(args))(
            *[ctypes.cast(ctypes.byref(arg), ctypes.c_void_p) for arg in args])
        self.check(self.lib.cuLaunchKernel(
            function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
            ctypes.c_void_p(stream), params, None), "cuLaunchKernel")
