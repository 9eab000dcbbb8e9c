//! The cuda backend's persistent kernels and memory mapped for kernels, against the fake
//! `libcuda` (see `fake_cuda`): mapping bookkeeping, the co-residency check, a persistent kernel
//! running beside the session (on a stream of its own, with no deadline) until its control block
//! asks it to end, its end and its fault written to the control block. The fake's `actor`
//! kernels run on a thread of the fake until the control block's `should_terminate` is set. What
//! the real driver does with them (a kernel polling mapped memory, a fault under it, what waits
//! for it) is for a GPU: `on_a_gpu_a_persistent_kernel_polls_mapped_memory_until_asked_to_end`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fake_cuda::{counting_worker, counts, fake_command, fake_worker, launch, since};
use crate::support::*;
use tasklet_worker::contract::actor::{ControlBlock, Exit, CONTROL_BYTES};
use tasklet_worker::guest_memory::SharedMemory;
use tasklet_worker::host::mapped::MappedArea;
use tasklet_worker::{BackendKind, ErrorKind, Launch, LoadedModule, Worker, WorkerCommand};

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");

/// Two persistent kernels for the fake, each taking its control block's device address.
const ACTOR_PTX: &str = "
.version 8.0
.target sm_80
.address_size 64

.visible .entry actor(
	.param .u64 actor_param_0
)
{
	ret;
}

.visible .entry actor_faults(
	.param .u64 actor_faults_param_0
)
{
	ret;
}
";

/// The fake's occupancy: 8 blocks of 256 threads per multiprocessor, 132 of them.
const FITS: u32 = 8 * 132;

/// A persistent launch of `kernel` over `grid` blocks of 256 threads, its argument the control
/// block's device address, with a deadline it outlives by far.
fn persistent<'a>(m: &LoadedModule, kernel: &str, grid: u32, args: &'a [u8]) -> Launch<'a> {
    Launch {
        grid: [grid, 1, 1],
        ..launch(m, kernel, 256, args, Duration::from_millis(5))
    }
}

/// A mapped area of one page with a control block cut from it (at offset 0), mapped for kernels
/// when `map`: the area, the block's device address, and the host's view of it.
fn mapped_area(w: &mut Worker, map: bool) -> (Arc<MappedArea>, u64, ControlBlock) {
    let area = Arc::new(MappedArea::create(4096).unwrap());
    let at = area.take(CONTROL_BYTES).unwrap();
    assert_eq!(at, 0);
    let dev = if map {
        w.map_device(&area.whole()).unwrap()
    } else {
        // Where the host sees it: no address a kernel can reach.
        area.host_ptr(0) as u64
    };
    // SAFETY: the block lies in the area, which the tests keep until they no longer use the view.
    let control = unsafe { ControlBlock::at(area.host_ptr(0)) };
    (area, dev, control)
}

/// Asks the kernel to end and waits (boundedly) until the worker says it has.
#[track_caller]
fn stop(control: &ControlBlock) -> Exit {
    control.ask_to_terminate();
    assert!(
        eventually(Duration::from_secs(5), || control.ended()),
        "the persistent kernel's end never showed in its control block"
    );
    control.snapshot().exit
}

#[test]
fn memory_is_mapped_for_kernels_once_and_unmapped() {
    let Some(mut w) = fake_worker() else { return };
    let mem = SharedMemory::create(64 * 1024, 64 * 1024, 0).unwrap();
    let a = w.map_device(&span(&mem, 0, 4096)).unwrap();
    // Registered by whole pages, answered at the byte asked for.
    let b = w.map_device(&span(&mem, 8192 + 256, 512)).unwrap();
    assert_eq!((a % 4096, b % 4096), (0, 256));
    // Pages the driver has registered already: refused with the reason, not the driver's code.
    let (kind, message) = op_error(w.map_device(&span(&mem, 100, 8)));
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(message.contains("share pages"), "{message}");
    assert_eq!(
        op_kind(w.map_device(&span(&mem, 8192, 16))),
        ErrorKind::InvalidArgument
    );
    let (kind, message) = op_error(w.map_device(&span(&mem, 0, 0)));
    assert_eq!(kind, ErrorKind::InvalidArgument, "{message}");
    w.unmap_device(a).unwrap();
    let (kind, message) = op_error(w.unmap_device(a));
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(message.contains("not mapped for kernels"), "{message}");
    // Unregistered: the same pages map again (the fake refuses a second registration).
    let again = w.map_device(&span(&mem, 0, 4096)).unwrap();
    w.unmap_device(again).unwrap();
    w.unmap_device(b).unwrap();
    // A reset unmaps what is left, and the worker stays usable.
    w.map_device(&span(&mem, 0, 64 * 1024)).unwrap();
    w.reset().unwrap();
    w.map_device(&span(&mem, 0, 64 * 1024)).unwrap();
    assert!(!w.is_poisoned());
}

#[test]
fn memory_page_locked_for_copies_is_not_mapped_for_kernels_too() {
    let Some(mut w) = fake_worker() else { return };
    let dev = w.alloc(4096).unwrap();
    // Copies through a guest memory page-lock it (in chunks): no mapping for kernels over it.
    let copied = SharedMemory::create(64 * 1024, 64 * 1024, 0).unwrap();
    w.write_from(dev, &span(&copied, 0, 4096)).unwrap();
    let (kind, message) = op_error(w.map_device(&span(&copied, 8192, 4096)));
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(message.contains("page-locked for copies"), "{message}");
    // The other way round: a copy inside memory mapped for kernels is pinned already (the fake
    // refuses copies from memory that is not), and registers nothing over it.
    let mapped = SharedMemory::create(64 * 1024, 64 * 1024, 0).unwrap();
    let addr = w.map_device(&span(&mapped, 0, 64 * 1024)).unwrap();
    bytes(&mapped, 100, 4).copy_from_slice(&[1, 2, 3, 4]);
    w.write_from(dev, &span(&mapped, 100, 4)).unwrap();
    let mut back = [0u8; 4];
    w.read(dev, &mut back).unwrap();
    assert_eq!(back, [1, 2, 3, 4]);
    w.unmap_device(addr).unwrap();
    assert!(!w.is_poisoned());
}

#[test]
fn a_persistent_grid_larger_than_fits_at_once_is_refused_naming_the_limit() {
    let Some(mut w) = fake_worker() else { return };
    let (area, dev, control) = mapped_area(&mut w, true);
    let m = w.load_module(ACTOR_PTX).unwrap();
    let args = dev.to_le_bytes();
    let (kind, message) =
        op_error(w.launch_persistent(&persistent(&m, "actor", FITS + 1, &args), &area, 0));
    assert_eq!(kind, ErrorKind::LaunchFailed);
    assert!(
        message.contains(&format!("all its {} blocks", FITS + 1))
            && message.contains(&format!("at most {FITS} blocks of 256 threads")),
        "{message}"
    );
    // Refused at once: the control block was left alone, nothing runs.
    let s = control.snapshot();
    assert!(!s.is_active && s.exit == Exit::Running, "{s:?}");
    // The usual launch checks come first: a wrong argument block.
    let (kind, message) =
        op_error(w.launch_persistent(&persistent(&m, "actor", 1, &args[..4]), &area, 0));
    assert_eq!(kind, ErrorKind::LaunchFailed, "{message}");
    // The largest grid that fits runs.
    w.launch_persistent(&persistent(&m, "actor", FITS, &args), &area, 0)
        .unwrap();
    assert_eq!(stop(&control), Exit::Returned);
    drop(area);
}

#[test]
fn a_persistent_kernel_runs_beside_the_session_until_asked_to_end() {
    let Some(mut w) = fake_worker() else { return };
    let (area, dev, control) = mapped_area(&mut w, true);
    let actors = w.load_module(ACTOR_PTX).unwrap();
    let iota = w.load_module(IOTA_PTX).unwrap();
    let args = dev.to_le_bytes();
    let started = Instant::now();
    w.launch_persistent(&persistent(&actors, "actor", 4, &args), &area, 0)
        .unwrap();
    // Marked started before the answer.
    let s = control.snapshot();
    assert!(
        s.is_active && !s.has_terminated && s.exit == Exit::Running,
        "{s:?}"
    );
    // Past its 5 ms deadline and the watchdog's grace: it has none, and the worker lives on.
    std::thread::sleep(Duration::from_millis(400));
    // The session's own work and syncs do not wait for it (the fake's `actor` would hold any
    // event recorded behind it on its stream).
    let out = w.alloc(4096).unwrap();
    let iota_args: Vec<u8> = out
        .to_le_bytes()
        .into_iter()
        .chain(64u32.to_le_bytes())
        .collect();
    let t = Instant::now();
    w.launch(&launch(
        &iota,
        "iota",
        64,
        &iota_args,
        Duration::from_secs(1),
    ))
    .unwrap();
    w.sync().unwrap();
    let mut back = vec![0u8; 256];
    w.read(out, &mut back).unwrap();
    assert_eq!(&back[..8], &[1, 0, 0, 0, 2, 0, 0, 0]);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // Nor do a free, a copy from guest memory, or an unload, each of which a GPU's driver (and
    // this fake) makes wait for every running kernel when done the plain way (`cuMemFree`,
    // `cuMemHostRegister`, `cuModuleUnload`): the stream-ordered allocator, a pageable copy and
    // an unload put off until the kernel has ended. A module load cannot be done any other way,
    // so it is refused at once.
    // A group lease's shareable memory (`cuMemAlloc`'s, whose free waits too) is freed off the
    // books at once and given back to the device once the kernel has ended; nor is it shared
    // with another worker meanwhile (the host stages such a copy instead).
    let shareable = w.alloc_shareable(4096).unwrap();
    let kept = w.alloc_shareable(4096).unwrap();
    let t = Instant::now();
    w.free(shareable).unwrap();
    let (kind, message) = op_error(w.export(kept));
    assert_eq!(kind, ErrorKind::Unsupported);
    assert!(message.contains("persistent kernel runs"), "{message}");
    w.free(kept).unwrap();
    w.free(out).unwrap();
    let guest = SharedMemory::create(1 << 20, 1 << 20, 0).unwrap();
    let buf = w.alloc(256).unwrap();
    w.write_from(buf, &span(&guest, 0, 256)).unwrap();
    w.unload_module(iota.id).unwrap();
    let (kind, message) = op_error(w.load_module(&format!("{IOTA_PTX}\n// beside\n")));
    assert_eq!(kind, ErrorKind::LoadFailed);
    assert!(
        message.contains("while a persistent kernel runs"),
        "{message}"
    );
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // Charged as it goes: wall time since its launch.
    w.ping().unwrap();
    assert!(
        w.gpu_time() >= Duration::from_millis(400),
        "{:?}",
        w.gpu_time()
    );
    // What it may be using stays: its mapping, its module (an unload waits for its end); and
    // one runs at a time.
    let (kind, message) = op_error(w.unmap_device(dev));
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(message.contains("persistent kernel runs"), "{message}");
    w.unload_module(actors.id).unwrap();
    let (kind, message) =
        op_error(w.launch_persistent(&persistent(&actors, "actor", 1, &args), &area, 0));
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(
        message.contains("one persistent kernel at a time"),
        "{message}"
    );
    assert!(!w.is_poisoned());
    // Asked to end, it returns, and the worker says so.
    assert_eq!(stop(&control), Exit::Returned);
    let s = control.snapshot();
    assert!(!s.is_active && s.has_terminated, "{s:?}");
    let ran = started.elapsed();
    // Its time stops at its end.
    w.ping().unwrap();
    let charged = w.gpu_time();
    assert!(charged <= ran + Duration::from_millis(100), "{charged:?}");
    std::thread::sleep(Duration::from_millis(100));
    w.ping().unwrap();
    assert!(
        w.gpu_time() < charged + Duration::from_millis(50),
        "{:?} then {charged:?}",
        w.gpu_time()
    );
    // Now everything it held may go (its module and iota, put off, go at the next load), and
    // the worker is reusable.
    w.unmap_device(dev).unwrap();
    w.load_module(&format!("{IOTA_PTX}\n// after\n")).unwrap();
    w.reset().unwrap();
    // And a second one may start, with its control block fresh.
    let (area2, dev2, control2) = mapped_area(&mut w, true);
    let actors = w.load_module(ACTOR_PTX).unwrap();
    let args = dev2.to_le_bytes();
    w.launch_persistent(&persistent(&actors, "actor", 1, &args), &area2, 0)
        .unwrap();
    assert!(!control2.snapshot().should_terminate);
    assert_eq!(stop(&control2), Exit::Returned);
    drop((area, area2));
}

#[test]
fn a_fault_under_a_persistent_kernel_shows_in_its_control_block_and_poisons_the_worker() {
    let Some(mut w) = fake_worker() else { return };
    let (area, dev, control) = mapped_area(&mut w, true);
    let m = w.load_module(ACTOR_PTX).unwrap();
    let args = dev.to_le_bytes();
    w.launch_persistent(&persistent(&m, "actor_faults", 1, &args), &area, 0)
        .unwrap();
    match stop(&control) {
        Exit::Faulted(m) => assert!(
            m.contains("persistent kernel `actor_faults`") && m.contains("illegal memory access"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    // The next op reports it, naming the persistent kernel; the worker is done.
    let (kind, message) = op_error(w.sync());
    assert_eq!(kind, ErrorKind::KernelFault);
    assert!(message.contains("actor_faults"), "{message}");
    assert!(w.is_poisoned());
    drop(area);
}

#[test]
fn a_control_block_kernels_cannot_reach_is_a_fault_of_the_kernel() {
    let Some(mut w) = fake_worker() else { return };
    // Attached, but never mapped for kernels: the address given is the host's, which a kernel
    // cannot reach (the fake faults as a GPU would).
    let (area, dev, control) = mapped_area(&mut w, false);
    let m = w.load_module(ACTOR_PTX).unwrap();
    let args = dev.to_le_bytes();
    w.launch_persistent(&persistent(&m, "actor", 1, &args), &area, 0)
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || control.ended()),
        "the fault never showed in the control block"
    );
    assert!(matches!(control.snapshot().exit, Exit::Faulted(_)));
    assert_eq!(op_kind(w.sync()), ErrorKind::KernelFault);
    drop(area);
}

/// A kernel the fake runs as `out[0] = a, out[1..3] = b, out[3] = c`: parameters of two sizes,
/// with padding before `b` (offsets 0, 8, 16, 24).
const ECHO_PTX: &str = "
.version 8.0
.target sm_80
.address_size 64

.visible .entry echo(
	.param .u64 echo_param_0,
	.param .u32 echo_param_1,
	.param .u64 echo_param_2,
	.param .u32 echo_param_3
)
{
	ret;
}
";

/// The argument block of `kernel` of `m` with `values` at its parameters' offsets.
fn packed(m: &LoadedModule, kernel: &str, values: &[&[u8]]) -> Vec<u8> {
    let (offsets, size) = m.kernels[kernel_index(m, kernel) as usize].param_layout();
    let mut args = vec![0u8; size as usize];
    for (at, v) in offsets.iter().zip(values) {
        args[*at as usize..][..v.len()].copy_from_slice(v);
    }
    args
}

#[test]
fn persistent_kernels_are_cooperative_launches_given_a_pointer_per_parameter() {
    let Some(mut w) = fake_worker() else { return };
    // The fake refuses its actor kernels through cuLaunchKernel (they sync grid-wide), so every
    // persistent launch of the tests above went through cuLaunchCooperativeKernel; here, the
    // pointers it was given: the fake runs the kernel on what each points to, and refuses any
    // not at its parameter's offset from the first.
    let (area, _, control) = mapped_area(&mut w, true);
    let m = w.load_module(ECHO_PTX).unwrap();
    let out = w.alloc(16).unwrap();
    let (a, b, c) = (0x1122_3344u32, 0x0102_0304_0506_0708u64, 0xdead_beefu32);
    let args = packed(
        &m,
        "echo",
        &[
            &out.to_le_bytes(),
            &a.to_le_bytes(),
            &b.to_le_bytes(),
            &c.to_le_bytes(),
        ],
    );
    assert_eq!(args.len(), 28);
    w.launch_persistent(&persistent(&m, "echo", 1, &args), &area, 0)
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || control.ended()));
    assert_eq!(control.snapshot().exit, Exit::Returned);
    let mut back = [0u8; 16];
    w.read(out, &mut back).unwrap();
    let words: Vec<u32> = back
        .chunks_exact(4)
        .map(|x| u32::from_le_bytes(x.try_into().unwrap()))
        .collect();
    assert_eq!(words, vec![a, b as u32, (b >> 32) as u32, c]);
    // iota's two parameters, and what it wrote with them.
    let iota = w.load_module(IOTA_PTX).unwrap();
    let (area2, _, control2) = mapped_area(&mut w, true);
    let buf = w.alloc(400).unwrap();
    let args = packed(&iota, "iota", &[&buf.to_le_bytes(), &100u32.to_le_bytes()]);
    w.launch_persistent(&persistent(&iota, "iota", 1, &args), &area2, 0)
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || control2.ended()));
    assert_eq!(control2.snapshot().exit, Exit::Returned);
    let mut back = vec![0u8; 400];
    w.read(buf, &mut back).unwrap();
    assert_eq!(&back[396..], &100u32.to_le_bytes());
    assert!(!w.is_poisoned());
    drop((area, area2));
}

#[test]
fn a_device_without_cooperative_launch_refuses_persistent_kernels_and_serves_the_rest() {
    let Some(mut cmd) = fake_command() else {
        return;
    };
    cmd.args.insert(0, "FAKE_CUDA_NO_COOPERATIVE=1".into());
    let mut w = Worker::spawn(&cmd, BackendKind::Cuda, u64::MAX, Duration::from_secs(10))
        .expect("a worker on the fake driver");
    let (area, dev, control) = mapped_area(&mut w, true);
    let m = w.load_module(ACTOR_PTX).unwrap();
    let args = dev.to_le_bytes();
    let (kind, message) =
        op_error(w.launch_persistent(&persistent(&m, "actor", 4, &args), &area, 0));
    assert_eq!(kind, ErrorKind::LaunchFailed);
    assert!(
        message.contains("persistent kernel `actor`")
            && message.contains("cannot launch cooperative kernels")
            && message.contains("CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH is 0"),
        "{message}"
    );
    // The co-residency check comes first, naming its numbers.
    let (kind, message) =
        op_error(w.launch_persistent(&persistent(&m, "actor", FITS + 1, &args), &area, 0));
    assert_eq!(kind, ErrorKind::LaunchFailed);
    assert!(
        message.contains(&format!("at most {FITS} blocks")),
        "{message}"
    );
    // Refused at once: the control block was left alone; the worker serves the rest.
    let s = control.snapshot();
    assert!(!s.is_active && s.exit == Exit::Running, "{s:?}");
    let iota = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(64).unwrap();
    let args = packed(&iota, "iota", &[&out.to_le_bytes(), &16u32.to_le_bytes()]);
    w.launch(&launch(&iota, "iota", 16, &args, Duration::from_secs(1)))
        .unwrap();
    w.sync().unwrap();
    let mut back = [0u8; 4];
    w.read(out + 60, &mut back).unwrap();
    assert_eq!(back, 16u32.to_le_bytes());
    assert!(!w.is_poisoned());
    drop(area);
}

/// A persistent kernel that spins on `should_terminate` through mapped memory (volatile loads:
/// the host writes it), then sets `has_terminated` itself and returns.
const GPU_ACTOR_PTX: &str = "
.version 7.0
.target sm_70
.address_size 64

.visible .entry actor(
	.param .u64 actor_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<2>;

	ld.param.u64 	%rd1, [actor_param_0];
$L_spin:
	ld.volatile.global.u32 	%r1, [%rd1+4];
	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L_spin;
	mov.u32 	%r2, 1;
	st.volatile.global.u32 	[%rd1+8], %r2;
	ret;
}
";

#[test]
fn on_a_gpu_a_persistent_kernel_polls_mapped_memory_until_asked_to_end() {
    let cmd = WorkerCommand {
        program: env!("CARGO_BIN_EXE_tasklet-worker").into(),
        args: vec![],
    };
    if tasklet_worker::probe_cuda(&cmd).is_err() {
        eprintln!("skipped: no CUDA device");
        return;
    }
    let mut w = Worker::spawn(&cmd, BackendKind::Cuda, 1 << 30, Duration::from_secs(10))
        .expect("a cuda worker");
    let (area, dev, control) = mapped_area(&mut w, true);
    let m = w.load_module(GPU_ACTOR_PTX).unwrap();
    // Loaded before the persistent kernel starts: a load beside it is refused (below).
    let iota = w.load_module(IOTA_PTX).unwrap();
    let args = dev.to_le_bytes();
    let l = Launch {
        grid: [1, 1, 1],
        block: [32, 1, 1],
        ..launch(&m, "actor", 32, &args, Duration::from_millis(5))
    };
    w.launch_persistent(&l, &area, 0).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // Still running past its deadline and the watchdog's grace.
    assert!(control.snapshot().is_active && !control.ended());
    // Nothing the session does waits for it. Each op is timed: the driver waits for every
    // running kernel of the context to free memory, page-lock host memory and load or unload
    // code (benches/probes/beside_persistent.rs), which would hold them until the kernel ends.
    let quick = |what: &str, t: Instant| {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{what} took {:?} beside a persistent kernel",
            t.elapsed()
        )
    };
    let t = Instant::now();
    w.sync().unwrap();
    quick("sync", t);
    let t = Instant::now();
    let refused = w
        .load_module(&format!("{IOTA_PTX}\n// another\n"))
        .unwrap_err();
    quick("a refused module load", t);
    assert!(
        refused
            .to_string()
            .contains("while a persistent kernel runs"),
        "{refused}"
    );
    let t = Instant::now();
    let out = w.alloc(4096).unwrap();
    quick("an allocation", t);
    let t = Instant::now();
    let iota_args: Vec<u8> = out
        .to_le_bytes()
        .into_iter()
        .chain(64u32.to_le_bytes())
        .collect();
    w.launch(&launch(
        &iota,
        "iota",
        64,
        &iota_args,
        Duration::from_secs(1),
    ))
    .unwrap();
    w.sync().unwrap();
    quick("a launch and its sync", t);
    let t = Instant::now();
    let guest = SharedMemory::create(1 << 20, 1 << 20, 0).unwrap();
    w.write_from(out, &span(&guest, 0, 256)).unwrap();
    quick("a copy from guest memory (not page-locked beside it)", t);
    let t = Instant::now();
    let mut back = vec![0u8; 256];
    w.read(out, &mut back).unwrap();
    w.free(out).unwrap();
    quick("a read and a free", t);
    let t = Instant::now();
    w.unload_module(iota.id).unwrap();
    quick("an unload (put off until the kernel ends)", t);
    assert!(control.snapshot().is_active);
    assert_eq!(stop(&control), Exit::Returned);
    // Its own handshake: the kernel set `has_terminated` before it returned.
    assert!(control.snapshot().has_terminated);
    // Once it has ended, modules load again (and the put-off unload is done first).
    w.load_module(&format!("{IOTA_PTX}\n// after\n")).unwrap();
    w.unmap_device(dev).unwrap();
    w.reset().unwrap();
    drop(area);
}

/// A persistent kernel does not follow the worker's stream, and the tenant may tell it through a
/// ring to read what it has just written: while one runs, even a small write is answered only
/// once its copy is done (one wait for the worker's stream), not once it is staged.
#[test]
fn a_small_write_beside_a_persistent_kernel_is_on_the_device_when_answered() {
    let Some((mut w, file)) = counting_worker(&[]) else {
        return;
    };
    let (area, dev, control) = mapped_area(&mut w, true);
    let m = w.load_module(ACTOR_PTX).unwrap();
    let buf = w.alloc(64).unwrap();
    // Staged (the staging memory is made now, while nothing runs).
    w.write(buf, &[1; 64]).unwrap();
    w.sync().unwrap();
    let before = counts(&file);
    w.write(buf, &[2; 64]).unwrap();
    assert_eq!(since(before, counts(&file)).work_syncs, 0, "not staged");
    let args = dev.to_le_bytes();
    w.launch_persistent(&persistent(&m, "actor", 1, &args), &area, 0)
        .unwrap();
    let before = counts(&file);
    w.write(buf, &[3; 64]).unwrap();
    assert_eq!(
        since(before, counts(&file)).work_syncs,
        1,
        "a write beside a persistent kernel was answered before its copy ran"
    );
    assert_eq!(stop(&control), Exit::Returned);
    let mut back = [0u8; 64];
    w.read(buf, &mut back).unwrap();
    assert_eq!(back, [3; 64]);
    drop(area);
}

/// While a persistent kernel may be running, a sync after a read that waited for everything
/// still asks the worker: only its answer reports a fault under that kernel.
#[test]
fn a_sync_beside_a_persistent_kernel_asks_the_worker() {
    let Some(mut w) = fake_worker() else { return };
    let (area, dev, control) = mapped_area(&mut w, true);
    let m = w.load_module(ACTOR_PTX).unwrap();
    let buf = w.alloc(64).unwrap();
    let args = dev.to_le_bytes();
    w.launch_persistent(&persistent(&m, "actor", 1, &args), &area, 0)
        .unwrap();
    let mut back = [0u8; 64];
    w.read(buf, &mut back).unwrap();
    w.signal_for_test(libc::SIGSTOP);
    w.set_wait_limit(Some(Instant::now() + Duration::from_millis(300)));
    assert!(
        w.sync().is_err(),
        "a sync beside a persistent kernel was answered without the worker"
    );
    drop((control, area));
}

/// A persistent kernel seen ended by the host (its fault shows in its status first) makes the
/// next sync go to the worker, which reports the fault, even right after a read.
#[test]
fn a_persistent_kernel_seen_ended_makes_the_next_sync_ask_the_worker() {
    let Some(mut w) = fake_worker() else { return };
    let (area, dev, control) = mapped_area(&mut w, true);
    let m = w.load_module(ACTOR_PTX).unwrap();
    let args = dev.to_le_bytes();
    w.launch_persistent(&persistent(&m, "actor", 1, &args), &area, 0)
        .unwrap();
    assert_eq!(stop(&control), Exit::Returned);
    let buf = w.alloc(64).unwrap();
    let mut back = [0u8; 64];
    w.read(buf, &mut back).unwrap();
    assert!(eventually(Duration::from_secs(5), || w
        .persistent_running()
        == 0));
    w.signal_for_test(libc::SIGSTOP);
    w.set_wait_limit(Some(Instant::now() + Duration::from_millis(300)));
    assert!(
        w.sync().is_err(),
        "a sync after a persistent kernel ended was answered without the worker"
    );
    drop(area);
}
