"""The SDK's own logic under the host's CPython, against componentize-py's generated bindings
(whose host calls are not reachable here): element types, input parsing, typed scalars, launch
configurations, errors and the exported `run`; and what bursts, graphs, streams, rings and
persistent launches hand the host,
against a fake session that records its calls. The examples run the rest on the emulator
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


class FakeRaw:
    """A generated resource's stand-in: each method call is recorded as (name, args) and answers
    what `answers` says (a value, or an exception to raise)."""

    def __init__(self, **answers):
        self.calls = []
        self.answers = answers

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            answer = self.answers.get(name)
            if isinstance(answer, BaseException):
                raise answer
            return answer() if callable(answer) else answer

        return call


def fake_session():
    """A session over a fake raw session whose new graphs, streams and events are fakes too."""
    raw = FakeRaw(launch_burst=7, new_graph=lambda: FakeRaw(launch=0, copy=1, fill=2, scalar=3),
                  new_stream=lambda: FakeRaw(launch=9, mem_read=b"\x02\0\0\0"), new_event=FakeRaw,
                  new_ring=lambda: FakeRaw(capacity=4, send=1, recv=b""), launch_persistent=FakeRaw)
    return gpu.Session(None, raw)


def fake_kernel(session, name="k"):
    return gpu.Kernel(gpu.Module(session, None), FakeRaw(name=name))


def buffer_arg(buf, offset=0):
    return sessions.KernelArg_Buffer(sessions.BufferArg(buf.raw, offset))


class CopiesBetweenSessions(unittest.TestCase):
    def test_the_destinations_session_asks_the_host_for_the_whole_source(self):
        a, b = fake_session(), fake_session()
        src = gpu.DeviceBuffer(a, "src", "u32", 4)
        dst = gpu.DeviceBuffer(b, "dst", "u32", 6)
        b.copy_from(dst, src)
        self.assertEqual(b.raw.calls, [("mem_copy_from", ("dst", 0, a.raw, "src", 0, 16))])
        self.assertEqual(a.raw.calls, [])

    def test_a_foreign_destination_or_a_mismatch_is_refused_before_the_host_is_called(self):
        a, b = fake_session(), fake_session()
        src = gpu.DeviceBuffer(a, "src", "u32", 4)
        with self.assertRaises(gpu.InvalidArgument):
            b.copy_from(gpu.DeviceBuffer(a, "dst", "u32", 4), src)
        with self.assertRaises(gpu.InvalidInput):
            b.copy_from(gpu.DeviceBuffer(b, "dst", "f32", 4), src)
        with self.assertRaises(gpu.InvalidInput):
            b.copy_from(gpu.DeviceBuffer(b, "dst", "u32", 3), src)
        self.assertEqual(b.raw.calls, [])


class Bursts(unittest.TestCase):
    def test_one_host_call_with_the_shared_args_and_each_launchs_changes(self):
        session = fake_session()
        kernel = fake_kernel(session, "axpy_row")
        m = gpu.DeviceBuffer(session, "m", "f32", 64)
        burst = session.burst(kernel).config(gpu.LaunchConfig.for_num_elems(16)).args(m, gpu.f32(1.0), gpu.u32(16))
        for row in range(3):
            burst.launch({0: m.at(row * 16), 1: gpu.f32(row)})
        burst.launch([(2, gpu.u32(8))]).repeat(2)
        self.assertEqual(len(burst), 6)
        self.assertEqual(burst.run(), 7)
        [(name, (raw_kernel, config, args, launches))] = session.raw.calls
        self.assertEqual((name, raw_kernel, config.grid), ("launch_burst", kernel.raw, (1, 1, 1)))
        self.assertEqual(args, [buffer_arg(m), sessions.KernelArg_F32(1.0), sessions.KernelArg_U32(16)])
        self.assertEqual(launches[1], [
            sessions.BurstArg(0, buffer_arg(m, 64)), sessions.BurstArg(1, sessions.KernelArg_F32(1.0)),
        ])
        self.assertEqual(launches[3:], [[sessions.BurstArg(2, sessions.KernelArg_U32(8))], [], []])

    def test_mistakes_are_refused_before_the_host_is_called(self):
        session, other = fake_session(), fake_session()
        kernel = fake_kernel(session)
        with self.assertRaises(gpu.InvalidArgument) as e:
            session.burst(fake_kernel(other))
        self.assertIn("the kernel's module belongs to another session", e.exception.message)
        foreign = gpu.DeviceBuffer(other, "x", "u32", 4)
        with self.assertRaises(gpu.InvalidArgument) as e:
            session.burst(kernel).launch({}).launch({0: foreign})
        self.assertEqual(e.exception.message, 'burst of "k": launch 1\'s argument 0 is a buffer of another session')
        with self.assertRaises(gpu.InvalidInput):
            session.burst(kernel).launch({0: 3})
        with self.assertRaises(gpu.InvalidInput):
            session.burst(kernel).launch({-1: gpu.u32(3)})
        with self.assertRaises(gpu.InvalidInput) as e:
            session.burst(kernel).arg(gpu.u32(1)).repeat(1).run()
        self.assertIn("has no LaunchConfig", e.exception.message)
        self.assertEqual(session.raw.calls, [])

    def test_a_refused_launch_fails_the_whole_burst_as_its_exception(self):
        session = fake_session()
        session.raw.answers["launch_burst"] = Err(types.GpuError_InvalidArgument("launch 3 of the burst: ..."))
        burst = session.burst(fake_kernel(session)).config(gpu.LaunchConfig()).repeat(4)
        with self.assertRaises(gpu.InvalidArgument) as e:
            burst.run()
        self.assertTrue(e.exception.message.startswith("launch 3 of the burst"))
        self.assertEqual(gpu.MAX_BURST_LAUNCHES, 4096)


class Graphs(unittest.TestCase):
    def test_launches_take_device_scalars_among_their_arguments(self):
        session = fake_session()
        graph = session.graph()
        a, b = gpu.DeviceBuffer(session, "a", "f32", 8), gpu.DeviceBuffer(session, "b", "f32", 8)
        step = graph.scalar(5)
        self.assertEqual(step.index, 3)
        node = graph.launch(fake_kernel(session), gpu.LaunchConfig(), a, b, gpu.u32(8), step)
        self.assertEqual(node, gpu.Node(0))
        graph.set_scalar(step, 2**64 - 1)
        graph.set_args(node, b, a, gpu.u32(8), step)
        graph.replay()
        graph.replay(3)
        calls = graph.raw.calls
        self.assertEqual(calls[0], ("scalar", (5,)))
        self.assertEqual(calls[1][1][2], [
            sessions.GraphArg_Arg(buffer_arg(a)), sessions.GraphArg_Arg(buffer_arg(b)),
            sessions.GraphArg_Arg(sessions.KernelArg_U32(8)), sessions.GraphArg_Scalar(3),
        ])
        self.assertEqual(calls[2], ("set_scalar", (3, 2**64 - 1)))
        self.assertEqual(calls[3][0:2], ("set_args", (0, [
            sessions.GraphArg_Arg(buffer_arg(b)), sessions.GraphArg_Arg(buffer_arg(a)),
            sessions.GraphArg_Arg(sessions.KernelArg_U32(8)), sessions.GraphArg_Scalar(3),
        ])))
        self.assertEqual(calls[4:], [("replay", (1,)), ("replay", (3,))])

    def test_copies_and_fills_cover_whole_buffers(self):
        session = fake_session()
        graph = session.graph()
        a, b = gpu.DeviceBuffer(session, "a", "u32", 8), gpu.DeviceBuffer(session, "b", "u32", 4)
        self.assertEqual(graph.copy(a, b), gpu.Node(1))
        self.assertEqual(graph.fill(b, 0xFFFFFFFF), gpu.Node(2))
        self.assertEqual(graph.raw.calls, [("copy", ("a", 0, "b", 0, 16)), ("fill", ("b", 0, 16, 0xFFFFFFFF))])
        with self.assertRaises(gpu.OutOfBounds):
            graph.copy(b, a)
        with self.assertRaises(gpu.InvalidInput):
            graph.copy(a, gpu.DeviceBuffer(session, "c", "f32", 4))
        with self.assertRaises(gpu.InvalidInput):
            graph.fill(b, 1 << 32)

    def test_scalars_values_and_ownership_are_checked(self):
        session = fake_session()
        graph, other = session.graph(), session.graph()
        theirs = other.scalar()
        for bad in (lambda: graph.scalar(-1), lambda: graph.scalar(2**64), lambda: graph.scalar(1.5),
                    lambda: graph.replay(0.5)):
            with self.assertRaises(gpu.InvalidInput):
                bad()
        with self.assertRaises(gpu.InvalidArgument):
            graph.set_scalar(theirs, 1)
        with self.assertRaises(gpu.InvalidArgument) as e:
            graph.launch(fake_kernel(session), gpu.LaunchConfig(), theirs)
        self.assertEqual(e.exception.message, "argument 0 is a device scalar of another graph")
        with self.assertRaises(gpu.InvalidArgument):
            graph.launch(fake_kernel(fake_session()), gpu.LaunchConfig())
        self.assertEqual(graph.raw.calls, [])


class Streams(unittest.TestCase):
    def test_work_goes_to_the_streams_queue_in_bytes(self):
        session = fake_session()
        stream, event = session.stream(), session.event()
        x = gpu.DeviceBuffer(session, "x", "u32", 4)
        stream.write(x, [1, 2], offset=1)
        stream.copy(x, x, dst_offset=2, start=0, stop=1)
        self.assertEqual(list(stream.read(x, 1, 2)), [2])
        self.assertEqual(list(stream.read(x, 2, 2)), [])
        stream.record(event)
        stream.wait(event)
        kernel = fake_kernel(session)
        self.assertEqual(session.launch(kernel).on(stream).config(gpu.LaunchConfig()).arg(x).run(), 9)
        self.assertEqual([c[0] for c in stream.raw.calls],
                         ["mem_write", "mem_copy", "mem_read", "record", "wait", "launch"])
        self.assertEqual(stream.raw.calls[0][1], ("x", 4, b"\x01\0\0\0\x02\0\0\0"))
        self.assertEqual(stream.raw.calls[1][1], ("x", 8, "x", 0, 4))
        self.assertEqual(stream.raw.calls[2][1], ("x", 4, 4))
        self.assertEqual(session.raw.calls[-1:], [("new_event", ())])

    def test_foreign_events_buffers_and_spans_are_refused(self):
        session, other = fake_session(), fake_session()
        stream = session.stream()
        with self.assertRaises(gpu.InvalidArgument):
            stream.record(other.event())
        with self.assertRaises(gpu.InvalidArgument):
            session.event().elapsed_ns_since(other.event())
        with self.assertRaises(gpu.InvalidArgument):
            stream.read(gpu.DeviceBuffer(other, "y", "u32", 1))
        with self.assertRaises(gpu.InvalidArgument):
            session.launch(fake_kernel(session)).on(other.stream())
        with self.assertRaises(gpu.InvalidInput):
            stream.write(gpu.DeviceBuffer(session, "z", "u32", 1), [1, 2])
        self.assertEqual(stream.raw.calls, [])


def raw_status(**fields):
    status = dict(is_active=True, should_terminate=False, has_terminated=False, errors_encountered=0,
                  messages_processed=0, failure=None)
    status.update(fields)
    return sessions.ActorStatus(**status)


class Rings(unittest.TestCase):
    def test_rings_carry_whole_messages_of_an_element_type(self):
        session = fake_session()
        inbox = session.ring_to_device("f32", 2, 4)
        outbox = session.ring_from_device("u16", 2, 8)
        self.assertEqual(session.raw.calls, [("new_ring", (sessions.RingDirection.TO_DEVICE, 8, 4)),
                                             ("new_ring", (sessions.RingDirection.FROM_DEVICE, 4, 8))])
        self.assertEqual((inbox.message_size, inbox.capacity), (8, 4))
        self.assertEqual(inbox.send([1.0, 2.0, 3.0, 4.0]), 1)
        self.assertEqual(inbox.send([]), 0)
        self.assertEqual(inbox.raw.calls[-1], ("send", (array("f", [1, 2, 3, 4]).tobytes(),)))
        session.ring_from_device("f32", 1, 2, sequenced=True)
        self.assertEqual(session.raw.calls[-1], ("new_sequenced_ring", (sessions.RingDirection.FROM_DEVICE, 4, 2)))
        outbox.raw.answers["recv"] = b"\x01\0\x02\0\x03\0\x04\0"
        self.assertEqual([list(m) for m in outbox.recv(5, timeout=0.25)], [[1, 2], [3, 4]])
        self.assertEqual(outbox.try_recv(1)[0].typecode, "H")
        self.assertEqual(outbox.raw.calls, [("recv", (5, 250_000)), ("recv", (1, 0))])

    def test_mistakes_are_refused_before_the_host_is_called(self):
        session = fake_session()
        for bad in (lambda: session.ring_to_device("u8", 3, 4), lambda: session.ring_to_device("f32", 0, 4),
                    lambda: session.ring_from_device("f32", 1.5, 4), lambda: session.ring_to_device("u33", 1, 4),
                    lambda: session.ring_to_device("f32", 1, -1), lambda: session.ring_to_device("f32", 1, 2**32)):
            with self.assertRaises(gpu.InvalidInput):
                bad()
        self.assertEqual(session.raw.calls, [])
        ring = session.ring_to_device("f32", 2, 4)
        with self.assertRaises(gpu.InvalidInput) as e:
            ring.send([1.0, 2.0, 3.0])
        self.assertEqual(e.exception.message, "12 bytes are not whole messages of 2 f32 (8 bytes)")
        for bad in (lambda: ring.recv(1, -1), lambda: ring.recv(1, "1"), lambda: ring.recv(-1), lambda: ring.recv(2**32)):
            with self.assertRaises(gpu.InvalidInput):
                bad()
        self.assertEqual(ring.raw.calls, [])

    def test_the_hosts_refusals_are_raised_as_their_exceptions(self):
        session = fake_session()
        session.raw.answers["new_ring"] = Err(types.GpuError_Unauthorized("the tasklet lacks the `persistent` right"))
        with self.assertRaises(gpu.Unauthorized):
            session.ring_to_device("f32", 64, 256)


class Actors(unittest.TestCase):
    def test_a_persistent_launch_hands_rings_the_control_block_and_args_in_order(self):
        session = fake_session()
        kernel = fake_kernel(session, "actor_scale")
        inbox, outbox = session.ring_to_device("f32", 64, 256), session.ring_from_device("f32", 64, 256)
        x = gpu.DeviceBuffer(session, "x", "f32", 4)
        actor = (session.launch_persistent(kernel, gpu.LaunchConfig.linear(1, 64))
                 .ring(inbox).ring(outbox).control().arg(gpu.f32(2.0)).args(x).start())
        name, (raw_kernel, config, args) = session.raw.calls[-1]
        self.assertEqual((name, raw_kernel, config.grid, config.block), ("launch_persistent", kernel.raw, (1, 1, 1), (64, 1, 1)))
        self.assertEqual(args, [sessions.ActorArg_Ring(inbox.raw), sessions.ActorArg_Ring(outbox.raw),
                                sessions.ActorArg_Control(), sessions.ActorArg_Arg(sessions.KernelArg_F32(2.0)),
                                sessions.ActorArg_Arg(buffer_arg(x))])
        self.assertIsInstance(actor, gpu.Actor)
        actor.raw.answers.update(status=raw_status(messages_processed=2**40),
                                 stop=raw_status(is_active=False, should_terminate=True, has_terminated=True))
        self.assertEqual(actor.status().messages_processed, 2**40)
        stopped = actor.stop(0.5)
        self.assertEqual(stopped, gpu.ActorStatus(False, True, True, 0, 0, None))
        actor.stop(3600)
        actor.stop(float("inf"))
        self.assertEqual(actor.raw.calls, [("status", ()), ("stop", (500,)), ("stop", (3_600_000,)), ("stop", (2**32 - 1,))])

    def test_another_sessions_rings_kernels_and_buffers_are_refused_before_the_host_is_called(self):
        session, other = fake_session(), fake_session()
        theirs = other.ring_to_device("f32", 1, 4)
        kernel = fake_kernel(session, "serve")
        with self.assertRaises(gpu.InvalidArgument) as e:
            session.launch_persistent(kernel).control().ring(theirs)
        self.assertEqual(e.exception.message, 'persistent launch of "serve": argument 1 is a ring of another session')
        with self.assertRaises(gpu.InvalidArgument) as e:
            session.launch_persistent(kernel).arg(gpu.DeviceBuffer(other, "y", "u32", 1))
        self.assertEqual(e.exception.message, 'persistent launch of "serve": argument 0 is a buffer of another session')
        with self.assertRaises(gpu.InvalidArgument):
            session.launch_persistent(fake_kernel(other))
        with self.assertRaises(gpu.InvalidInput):
            session.launch_persistent(kernel).ring(gpu.DeviceBuffer(session, "z", "u32", 1))
        with self.assertRaises(gpu.InvalidInput) as e:
            session.launch_persistent(kernel).control().start()
        self.assertIn("has no LaunchConfig", e.exception.message)
        actor = session.launch_persistent(kernel, gpu.LaunchConfig()).start()
        with self.assertRaises(gpu.InvalidInput):
            actor.stop(-1)
        self.assertEqual([c[0] for c in session.raw.calls], ["launch_persistent"])
        self.assertEqual(actor.raw.calls, [])


if __name__ == "__main__":
    unittest.main()
