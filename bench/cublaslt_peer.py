"""cuBLASLt through ctypes: the bf16 GEMM of gemm_vs_cublas.py with any of
the algorithms cublasLtMatmulAlgoGetHeuristic proposes.

    lt = CublasLt.open()          # raises LtError when no libcublasLt loads
    matmul = Matmul(lt, m, n, k, alpha, workspace_address, workspace_bytes)
    for result in matmul.heuristics(16):
        matmul.run(result.algo, a.data_ptr(), b.data_ptr(), d.data_ptr(), stream)
    matmul.close()

Matmul computes D = alpha * A B^T for row-major bf16 A [M, K], B [N, K] and
D [M, N], with fp32 accumulation and an fp32 alpha (beta 0), on the stream
it is given (torch's current stream: a torch CUDA graph capture records
it). torch must have initialised CUDA first: the handle uses the context
current on the thread.

The library is the copy this process has already loaded (torch's) when
there is one, else the first that loads of: the nvidia wheels' lib folders
under sys.path (nvidia/*/lib), the dynamic loader's libcublasLt
(ctypes.util.find_library), /usr/local/cuda/lib64.

The constants and the two structures below are those of cublasLt.h,
cublas_api.h and library_types.h (unchanged from CUDA 11.4 to 13.0).
"""
import ctypes
import ctypes.util
import glob
import os
import sys

CUBLAS_COMPUTE_32F = 68
CUDA_R_32F = 0
CUDA_R_16BF = 14
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
MATMUL_DESC_TRANSA = 3  # CUBLASLT_MATMUL_DESC_TRANSA, an int32_t cublasOperation_t
MATMUL_DESC_TRANSB = 4  # CUBLASLT_MATMUL_DESC_TRANSB, likewise
PREF_MAX_WORKSPACE_BYTES = 1  # CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, a uint64_t


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: 8 opaque uint64_t."""
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t (96 bytes)."""
    _fields_ = [("algo", Algo), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


assert ctypes.sizeof(Algo) == 64 and ctypes.sizeof(HeuristicResult) == 96


class LtError(RuntimeError):
    """libcublasLt could not be loaded, or one of its calls did not return CUBLAS_STATUS_SUCCESS."""


def loaded_copies():
    """The libcublasLt files mapped into this process (torch's, once torch has loaded it)."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if os.path.basename(path).startswith("libcublasLt.so"):
                    paths.append(path)
    except OSError:
        pass
    return paths


def library_paths():
    """Where libcublasLt may be, in the order they are tried (see the module's docstring)."""
    paths = loaded_copies()
    for entry in sys.path:
        pattern = os.path.join(entry or ".", "nvidia", "*", "lib", "libcublasLt.so*")
        paths += sorted(glob.glob(pattern))
    found = ctypes.util.find_library("cublasLt")
    if found:
        paths.append(found)
    paths += sorted(glob.glob("/usr/local/cuda/lib64/libcublasLt.so*"))
    return list(dict.fromkeys(paths))


def declare(lib):
    """Argument and result types of the functions used, as cublasLt.h declares them."""
    p = ctypes.c_void_p
    status = ctypes.c_int
    signatures = {
        "cublasLtCreate": [ctypes.POINTER(p)],
        "cublasLtDestroy": [p],
        "cublasLtMatmulDescCreate": [ctypes.POINTER(p), ctypes.c_int, ctypes.c_int],
        "cublasLtMatmulDescDestroy": [p],
        "cublasLtMatmulDescSetAttribute": [p, ctypes.c_int, p, ctypes.c_size_t],
        "cublasLtMatrixLayoutCreate": [ctypes.POINTER(p), ctypes.c_int, ctypes.c_uint64,
                                       ctypes.c_uint64, ctypes.c_int64],
        "cublasLtMatrixLayoutDestroy": [p],
        "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(p)],
        "cublasLtMatmulPreferenceDestroy": [p],
        "cublasLtMatmulPreferenceSetAttribute": [p, ctypes.c_int, p, ctypes.c_size_t],
        "cublasLtMatmulAlgoGetHeuristic": [p, p, p, p, p, p, p, ctypes.c_int,
                                           ctypes.POINTER(HeuristicResult),
                                           ctypes.POINTER(ctypes.c_int)],
        # handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
        # workspace bytes, stream
        "cublasLtMatmul": [p, p, p, p, p, p, p, p, p, p, p, p, ctypes.POINTER(Algo), p,
                           ctypes.c_size_t, p],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = status
    lib.cublasLtGetVersion.argtypes = []
    lib.cublasLtGetVersion.restype = ctypes.c_size_t
    lib.cublasLtGetStatusName.argtypes = [status]
    lib.cublasLtGetStatusName.restype = ctypes.c_char_p


class CublasLt:
    """A loaded libcublasLt and one handle."""

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        declare(self.lib)
        self.version = int(self.lib.cublasLtGetVersion())
        self.handle = ctypes.c_void_p()
        self.check(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")

    @classmethod
    def open(cls):
        """The first library of library_paths() that loads and gives a handle."""
        failures = []
        for path in library_paths():
            try:
                return cls(path)
            except (OSError, AttributeError, LtError) as error:
                failures.append(f"{path}: {error}")
        raise LtError("no usable libcublasLt" + (" (" + "; ".join(failures) + ")" if failures
                                                 else " found"))

    def check(self, status, what):
        if status != 0:
            name = self.lib.cublasLtGetStatusName(status)
            raise LtError(f"{what} returned {name.decode() if name else status}")


def _set(lt, setter, obj, attribute, value, what):
    lt.check(setter(obj, attribute, ctypes.addressof(value), ctypes.sizeof(value)), what)


class Matmul:
    """D [M, N] = alpha * A [M, K] B [N, K]^T, all row-major bf16, for one shape.

    cuBLASLt's matrices are column-major, and a row-major [R, C] matrix is
    the column-major [C, R] matrix with leading dimension C. So the product
    is computed as D^T [N, M] = B [N, K] A^T [K, M]: cuBLASLt's A is our B,
    a column-major [K, N] (ld K) used transposed (TRANSA = T); its B is our
    A, a column-major [K, M] (ld K) used as it is (TRANSB = N); its C and D
    are our D, a column-major [N, M] (ld N). Compute type CUBLAS_COMPUTE_32F,
    scale type CUDA_R_32F; alpha and beta (0) are host values.
    """

    def __init__(self, lt, m, n, k, alpha, workspace, workspace_bytes):
        self.lt = lt
        self.workspace = workspace
        self.workspace_bytes = workspace_bytes
        self.alpha = ctypes.c_float(alpha)
        self.beta = ctypes.c_float(0.0)
        self.desc = ctypes.c_void_p()
        self.layouts = []
        lib = lt.lib
        lt.check(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), CUBLAS_COMPUTE_32F,
                                              CUDA_R_32F), "cublasLtMatmulDescCreate")
        _set(lt, lib.cublasLtMatmulDescSetAttribute, self.desc, MATMUL_DESC_TRANSA,
             ctypes.c_int32(CUBLAS_OP_T), "setting TRANSA")
        _set(lt, lib.cublasLtMatmulDescSetAttribute, self.desc, MATMUL_DESC_TRANSB,
             ctypes.c_int32(CUBLAS_OP_N), "setting TRANSB")
        self.a_layout = self._layout(k, n, k)  # our B
        self.b_layout = self._layout(k, m, k)  # our A
        self.d_layout = self._layout(n, m, n)  # our D

    def _layout(self, rows, cols, ld):
        layout = ctypes.c_void_p()
        create = self.lt.lib.cublasLtMatrixLayoutCreate
        self.lt.check(create(ctypes.byref(layout), CUDA_R_16BF, rows, cols, ld),
                      "cublasLtMatrixLayoutCreate")
        self.layouts.append(layout)
        return layout

    def heuristics(self, count):
        """The algorithms proposed for the shape (HeuristicResult, state SUCCESS), best guess
        first."""
        lib = self.lt.lib
        preference = ctypes.c_void_p()
        self.lt.check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)),
                      "cublasLtMatmulPreferenceCreate")
        try:
            _set(self.lt, lib.cublasLtMatmulPreferenceSetAttribute, preference,
                 PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(self.workspace_bytes),
                 "setting MAX_WORKSPACE_BYTES")
            results = (HeuristicResult * count)()
            returned = ctypes.c_int(0)
            self.lt.check(lib.cublasLtMatmulAlgoGetHeuristic(
                self.lt.handle, self.desc, self.a_layout, self.b_layout, self.d_layout,
                self.d_layout, preference, count, results, ctypes.byref(returned)),
                "cublasLtMatmulAlgoGetHeuristic")
        finally:
            lib.cublasLtMatmulPreferenceDestroy(preference)
        return [HeuristicResult.from_buffer_copy(results[i]) for i in range(returned.value)
                if results[i].state == 0]

    def run(self, algo, a, b, d, stream):
        """Enqueues D = alpha A B^T with `algo` on `stream`; a, b, d and stream are addresses."""
        self.lt.check(self.lt.lib.cublasLtMatmul(
            self.lt.handle, self.desc, ctypes.addressof(self.alpha), b, self.a_layout, a,
            self.b_layout, ctypes.addressof(self.beta), d, self.d_layout, d, self.d_layout,
            ctypes.byref(algo), self.workspace, self.workspace_bytes, stream), "cublasLtMatmul")

    def close(self):
        for layout in self.layouts:
            self.lt.lib.cublasLtMatrixLayoutDestroy(layout)
        self.layouts = []
        if self.desc:
            self.lt.lib.cublasLtMatmulDescDestroy(self.desc)
            self.desc = ctypes.c_void_p()
