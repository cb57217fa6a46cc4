"""The launcher's packing and checks, with a fake driver and fake tensors
(the GPU run, tests/gpu, launches on real ones)."""

import struct
import unittest

from autotune_client import autotune_pb2 as pb
from autotune_client.launch import (
    CudaDriver,
    LaunchError,
    TunedKernel,
    scalar_bytes,
    tensor_map_arguments,
)
from autotune_client.lookups import LookupResult


class FakeDriver:
    def __init__(self, arch: str = "sm_90") -> None:
        self.device_arch = arch
        self.loaded = []
        self.maps = []
        self.launches = []

    def load_function(self, cubin, name, dynamic_shared_bytes):
        self.loaded.append((cubin, name, dynamic_shared_bytes))
        return "function"

    def arch(self):
        return self.device_arch

    def encode_tensor_map(self, args):
        self.maps.append(args)
        return bytes([len(self.maps)]) * 128

    def prepare(self, function, grid, block, shared_bytes, pointers, tensor_maps, scalars):
        def launch(stream, pointer_values, maps=None):
            assert len(pointer_values) == pointers and len(maps or []) == tensor_maps
            parameters = [struct.pack("<Q", p) for p in pointer_values] + list(maps or [])
            self.launches.append(
                (function, grid, block, shared_bytes, stream, parameters + list(scalars)))

        return launch


class FakeTensor:
    def __init__(self, pointer, numel, dtype="torch.bfloat16", cuda=True, contiguous=True):
        self.pointer, self.count, self.dtype = pointer, numel, dtype
        self.is_cuda, self.contiguous, self.shape = cuda, contiguous, (numel,)

    def numel(self):
        return self.count

    def is_contiguous(self):
        return self.contiguous

    def data_ptr(self):
        return self.pointer


def answer(tensor_map: bool = False) -> LookupResult:
    """An EXACT answer for a kernel of x [64, 4096] and y [64, 4096] bf16,
    scalars eps (fp32 1e-6) and rows (int32 64), a tensor map over x."""
    response = pb.LookupResponse(match=pb.EXACT)
    response.entry.family = "rmsnorm"
    response.entry.function_name = "rmsnorm"
    response.launch.grid.extend([64])
    response.launch.block.extend([128])
    response.launch.dynamic_shared_bytes = 1024
    for name, role in (("x", pb.IN), ("y", pb.OUT)):
        buffer = response.arguments.buffers.add(name=name, dtype=pb.BFLOAT16, role=role)
        buffer.shape.extend([64, 4096])
    response.arguments.scalars.add(name="eps", dtype=pb.FLOAT32, value=1e-6)
    response.arguments.scalars.add(name="rows", dtype=pb.INT32, value=64)
    sizes = [8, 8]
    if tensor_map:
        layout = response.launch.tensor_maps.add(buffer=0, dtype=pb.BFLOAT16, swizzle=pb.SWIZZLE_128B, argument=2)
        layout.shape.extend([64, 4096])
        layout.box.extend([64, 64])
        sizes.append(128)
    response.parameter_bytes.extend(sizes + [4, 4])
    return LookupResult.from_response(response, cubin=b"cubin")


class TunedKernelTest(unittest.TestCase):
    def test_a_call_passes_pointers_then_scalars_on_the_stream_given(self) -> None:
        driver = FakeDriver()
        kernel = TunedKernel.load(answer(), driver=driver)
        self.assertEqual(driver.loaded, [(b"cubin", "rmsnorm", 1024)])
        kernel(FakeTensor(0x1000, 64 * 4096), FakeTensor(0x2000, 64 * 4096), stream=7)
        function, grid, block, shared, stream, parameters = driver.launches[0]
        self.assertEqual((grid, block, shared, stream), ((64, 1, 1), (128, 1, 1), 1024, 7))
        self.assertEqual(
            parameters,
            [struct.pack("<Q", 0x1000), struct.pack("<Q", 0x2000), struct.pack("<f", 1e-6), struct.pack("<i", 64)],
        )

    def test_tensor_maps_go_after_the_buffers_and_are_encoded_once_per_pointers(self) -> None:
        driver = FakeDriver()
        kernel = TunedKernel.load(answer(tensor_map=True), driver=driver)
        x, y = FakeTensor(0x1000, 64 * 4096), FakeTensor(0x2000, 64 * 4096)
        kernel(x, y, stream=0)
        kernel(x, y, stream=0)
        self.assertEqual(len(driver.maps), 1)
        self.assertEqual(driver.maps[0].address, 0x1000)
        parameters = driver.launches[1][5]
        self.assertEqual([len(p) for p in parameters], [8, 8, 128, 4, 4])
        kernel(FakeTensor(0x3000, 64 * 4096), y, stream=0)
        self.assertEqual(len(driver.maps), 2)

    def test_each_tensor_is_checked_against_the_answer(self) -> None:
        kernel = TunedKernel.load(answer(), driver=FakeDriver())
        good = FakeTensor(0x1000, 64 * 4096)
        cases = [
            ((good,), "1 tensors given, the kernel takes 2 (x, y)"),
            ((good, FakeTensor(0x2000, 64 * 4096, cuda=False)), "buffer 1 'y': not a CUDA tensor"),
            ((good, FakeTensor(0x2000, 64 * 4096, dtype="torch.float32")), "dtype torch.float32, the kernel takes torch.bfloat16"),
            ((good, FakeTensor(0x2000, 64 * 4095)), "262080 elements (shape (262080,)), the kernel takes 262144 (64 x 4096)"),
            ((good, FakeTensor(0x2000, 64 * 4096, contiguous=False)), "not contiguous"),
        ]
        for tensors, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(LaunchError, message.replace("(", r"\(").replace(")", r"\)")):
                    kernel(*tensors, stream=0)

    def test_answers_that_cannot_be_launched_are_refused_with_why(self) -> None:
        miss = pb.LookupResponse(match=pb.MISS, miss_reason="no entry for rmsnorm")
        with self.assertRaisesRegex(LaunchError, "nothing to load \\(MISS: no entry for rmsnorm\\), and no default config with a compile recipe"):
            TunedKernel.load(LookupResult.from_response(miss), driver=FakeDriver())
        old = answer()
        old.response.ClearField("arguments")
        with self.assertRaisesRegex(LaunchError, "carries no launch arguments"):
            TunedKernel.load(old, driver=FakeDriver())
        drifted = answer()
        drifted.response.parameter_bytes[2] = 8
        with self.assertRaisesRegex(LaunchError, r"parameters of \[8, 8, 4, 4\] bytes; the family declares \[8, 8, 8, 4\]"):
            TunedKernel.load(drifted, driver=FakeDriver())


class PackingTest(unittest.TestCase):
    def test_tensor_map_arguments_match_the_cpp_loaders(self) -> None:
        # kernels/tensor_map_test.cc, TheEncodersArgumentsAreInnermostFirstWithByteStrides.
        layout = pb.TensorMapLayout(dtype=pb.BFLOAT16, swizzle=pb.SWIZZLE_128B)
        layout.shape.extend([300, 1024])
        layout.box.extend([128, 64])
        args = tensor_map_arguments(layout, 0x7F0000001000)
        self.assertEqual((args.rank, args.data_type, args.swizzle), (2, 9, 3))
        self.assertEqual(args.dims, (1024, 300))
        self.assertEqual(args.strides, (2048,))
        self.assertEqual(args.box, (64, 128))
        self.assertEqual(args.element_strides, (1, 1))
        with self.assertRaisesRegex(LaunchError, "address 0x1008 is not 16-byte aligned"):
            tensor_map_arguments(layout, 0x1008)

    def test_scalars_at_their_dtypes_size(self) -> None:
        self.assertEqual(scalar_bytes(pb.FLOAT16, 1.0), b"\x00\x3c")
        self.assertEqual(scalar_bytes(pb.BFLOAT16, 1.0), b"\x80\x3f")
        self.assertEqual(scalar_bytes(pb.INT64, 4096), struct.pack("<q", 4096))
        with self.assertRaisesRegex(LaunchError, "not an integer"):
            scalar_bytes(pb.INT32, 1e-5)


if __name__ == "__main__":
    unittest.main()


class FakeCudaLibrary:
    """The CUDA driver calls CudaDriver makes, over a thread that has no
    current context until one is set; records the calls."""

    PRIMARY = 0x1000

    def __init__(self, current=0, invalid_context_launches=0):
        self.current = current
        self.calls = []
        self.invalid_context_launches = invalid_context_launches

    def cuInit(self, flags):
        return 0

    def cuGetErrorName(self, result, name):
        return 0

    def cuCtxGetCurrent(self, context):
        self.calls.append("cuCtxGetCurrent")
        context._obj.value = self.current or None
        return 0

    def cuDeviceGet(self, device, ordinal):
        self.calls.append(f"cuDeviceGet({ordinal})")
        device._obj.value = ordinal
        return 0

    def cuDevicePrimaryCtxRetain(self, context, device):
        self.calls.append(f"cuDevicePrimaryCtxRetain({device.value})")
        context._obj.value = self.PRIMARY
        return 0

    def cuCtxSetCurrent(self, context):
        self.calls.append("cuCtxSetCurrent")
        self.current = context.value
        return 0

    def cuModuleLoadData(self, module, image):
        self.calls.append("cuModuleLoadData")
        return 0 if self.current else 201

    def cuModuleGetFunction(self, function, module, name):
        function._obj.value = 0x2000
        return 0

    def cuLaunchKernel(self, *args):
        self.calls.append("cuLaunchKernel")
        self.launched = args
        if self.invalid_context_launches:
            self.invalid_context_launches -= 1
            return 201
        return 0


class CudaDriverContextTest(unittest.TestCase):
    def test_without_a_current_context_the_primary_one_is_made_current(self):
        cu = FakeCudaLibrary()
        driver = CudaDriver(cu=cu)
        driver.load_function(b"cubin", "k", 0)
        self.assertEqual(cu.current, FakeCudaLibrary.PRIMARY)
        self.assertEqual(
            cu.calls,
            ["cuCtxGetCurrent", "cuDeviceGet(0)", "cuDevicePrimaryCtxRetain(0)",
             "cuCtxSetCurrent", "cuModuleLoadData"],
        )

    def test_a_current_context_is_kept(self):
        cu = FakeCudaLibrary(current=0x3000)
        CudaDriver(cu=cu).load_function(b"cubin", "k", 0)
        self.assertEqual(cu.current, 0x3000)
        self.assertEqual(cu.calls, ["cuCtxGetCurrent", "cuModuleLoadData"])

    def test_a_launch_on_a_thread_without_a_context_sets_it_and_launches_once_more(self):
        cu = FakeCudaLibrary(invalid_context_launches=1)
        CudaDriver(cu=cu).prepare(0x2000, (1, 1, 1), (32, 1, 1), 0, 1, 0, [])(0, [0x7000])
        self.assertEqual(
            cu.calls,
            ["cuLaunchKernel", "cuCtxGetCurrent", "cuDeviceGet(0)", "cuDevicePrimaryCtxRetain(0)",
             "cuCtxSetCurrent", "cuLaunchKernel"],
        )

    def test_a_launch_that_still_fails_is_an_error(self):
        cu = FakeCudaLibrary(current=0x3000, invalid_context_launches=2)
        with self.assertRaisesRegex(LaunchError, "cuLaunchKernel"):
            CudaDriver(cu=cu).prepare(0x2000, (1, 1, 1), (32, 1, 1), 0, 1, 0, [])(0, [0x7000])


class PreparedLaunchTest(unittest.TestCase):
    def test_each_call_passes_its_pointers_and_maps_and_the_scalars_at_aligned_places(self):
        import ctypes

        cu = FakeCudaLibrary(current=0x3000)
        launch = CudaDriver(cu=cu).prepare(
            0x2000, (4, 2, 1), (128, 1, 1), 512, 2, 1, [struct.pack("<f", 0.5), b"\x07\0\0\0"])

        def passed():
            function, *dims, stream, parameters, extra = cu.launched
            places = [parameters[i] for i in range(5)]
            self.assertTrue(all(place % 64 == 0 for place in places), places)
            values = [ctypes.string_at(place, size) for place, size in zip(places, [8, 8, 128, 4, 4])]
            return function, dims, stream, values, extra

        map_a, map_b = b"\xaa" * 128, b"\xbb" * 128
        launch(11, [0x1000, 0x2000], [map_a])
        function, dims, stream, values, extra = passed()
        self.assertEqual((function, dims, stream, extra), (0x2000, [4, 2, 1, 128, 1, 1, 512], 11, None))
        self.assertEqual(values, [struct.pack("<Q", 0x1000), struct.pack("<Q", 0x2000), map_a,
                                  struct.pack("<f", 0.5), b"\x07\0\0\0"])
        # New pointers and another map: written in place for this call.
        launch(12, [0x3000, 0x4000], [map_b])
        self.assertEqual(passed()[3][:3], [struct.pack("<Q", 0x3000), struct.pack("<Q", 0x4000),
                                          map_b])
        launch(13, [0x1000, 0x2000], [map_a])
        self.assertEqual(passed()[3][2], map_a)
