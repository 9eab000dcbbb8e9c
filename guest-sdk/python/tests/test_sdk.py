"""The SDK's own logic under the host's CPython, against componentize-py's generated bindings
(whose host calls are not reachable here): element types, input parsing, typed scalars, launch
configurations, errors and the exported `run`. The examples run the rest on the emulator
(tests/tests/suite/guest_languages.rs).

    componentize-py -d wit -w tasklet bindings BINDINGS
    PYTHONPATH=BINDINGS:guest-sdk/python python3 -m unittest discover -s guest-sdk/python/tests
"""

import unittest
from array import array

from componentize_py_types import Err
from wit_world.imports import sessions, types

import tasklet_gpu as gpu
from tasklet_gpu import elements, errors
from tasklet_gpu.lease import round_vram


class Elements(unittest.TestCase):
    def test_every_type_has_a_typecode_of_its_size(self):
        for name, code in elements.TYPECODE.items():
            self.assertEqual(array(code).itemsize, elements.size_of(name), name)
            self.assertEqual(elements.name_of(array(code)), name)

    def test_bytes_round_trip_little_endian(self):
        data = elements.to_bytes([1, 2, 0xFFFFFFFF], "u32")
        self.assertEqual(data, b"\x01\0\0\0\x02\0\0\0\xff\xff\xff\xff")
        self.assertEqual(list(elements.from_bytes(data, "u32")), [1, 2, 0xFFFFFFFF])
        self.assertEqual(elements.to_bytes(b"\x01\x02", "u8"), b"\x01\x02")
        self.assertEqual(elements.name_of(b"xy"), "u8")

    def test_bad_types_and_values_are_invalid_input(self):
        with self.assertRaises(gpu.InvalidInput):
            elements.check("u33")
        with self.assertRaises(gpu.InvalidInput):
            elements.to_bytes([-1], "u32")


class Input(unittest.TestCase):
    def test_counts_as_the_rust_sdk_reads_them(self):
        self.assertEqual(gpu.input.count_or(b" 12\n", 256), 12)
        self.assertEqual(gpu.input.count_or(b"  ", 256), 256)
        with self.assertRaises(gpu.InvalidInput) as e:
            gpu.input.count_or(b"ten", 256)
        self.assertEqual(str(e.exception), 'invalid-input: "ten" is not an element count from 0 to 4294967295')
        with self.assertRaises(gpu.InvalidInput):
            gpu.input.count_or(b"4294967296", 256)
        self.assertEqual(gpu.input.numbers(b"2 1.5 -3"), [2.0, 1.5, -3.0])


class Arguments(unittest.TestCase):
    def test_scalars_are_range_checked_and_typed(self):
        self.assertEqual(gpu.u32(5).session_arg(), sessions.KernelArg_U32(5))
        self.assertEqual(gpu.f32(2).session_arg(), sessions.KernelArg_F32(2.0))
        for bad in (lambda: gpu.u32(-1), lambda: gpu.i32(2**31), lambda: gpu.u64(1.5)):
            with self.assertRaises(gpu.InvalidInput):
                bad()

    def test_a_bare_number_is_refused_saying_how_to_type_it(self):
        launch = gpu.Launch(None, None, "k")
        with self.assertRaises(gpu.InvalidInput) as e:
            launch.arg(7)
        self.assertIn("u32(...)", e.exception.message)

    def test_launch_configs_and_lease_sizes(self):
        self.assertEqual(gpu.LaunchConfig.for_num_elems(0).grid, (1, 1, 1))
        self.assertEqual(gpu.LaunchConfig.for_num_elems(257).grid, (2, 1, 1))
        self.assertEqual(round_vram(1), 1 << 20)
        self.assertEqual(round_vram((1 << 20) + 1), 2 << 20)
        self.assertEqual(gpu.Lease.builder().min_vram_for("f64", 1 << 20).request().min_vram, 8 << 20)

    def test_device_requirements_are_asked_for_only_when_set(self):
        self.assertIsNone(gpu.Lease.builder().device(1).requirements())
        r = (
            gpu.Lease.builder()
            .uuid("GPU-1234")
            .model("H100")
            .min_compute_capability(9, 0)
            .min_total_memory(40 << 30)
            .requirements()
        )
        self.assertEqual(
            (r.uuid, r.model, r.min_compute_capability, r.min_total_memory),
            ("GPU-1234", "H100", (9, 0), 40 << 30),
        )
        self.assertIsNone(gpu.Lease.builder().model("A100").requirements().uuid)


class Errors(unittest.TestCase):
    def test_each_gpu_error_case_is_its_own_exception(self):
        raised = errors.from_raw(types.GpuError_QuotaExceeded("over max-vram"))
        self.assertIsInstance(raised, gpu.QuotaExceeded)
        self.assertIsInstance(raised, gpu.GpuError)
        self.assertEqual((raised.kind, raised.message), ("quota-exceeded", "over max-vram"))
        self.assertEqual(str(raised), "quota-exceeded: over max-vram")

    def test_a_binding_error_is_raised_as_the_exception(self):
        def refused():
            raise Err(types.GpuError_Unauthorized("no `launch` right"))

        with self.assertRaises(gpu.Unauthorized):
            errors.host(refused)

    def test_run_turns_a_gpu_error_into_the_tasklets_error_and_text_into_bytes(self):
        def failing(_):
            raise gpu.LoadFailed("line 3")

        with self.assertRaises(Err) as e:
            gpu.export(failing)().run(b"")
        self.assertEqual(e.exception.value, "load-failed: line 3")
        self.assertEqual(gpu.export(lambda data: data.decode() + "!")().run(b"hi"), b"hi!")
        with self.assertRaises(ZeroDivisionError):
            gpu.export(lambda _: 1 // 0)().run(b"")


if __name__ == "__main__":
    unittest.main()
