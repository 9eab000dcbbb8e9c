//! The native reference: cudarc's driver API in this process, the same PTX, the same rings.
//! `actor_scale` runs as a persistent kernel over rings and a control block in pinned host
//! memory mapped for the device (`cuMemHostAlloc` with `DEVICEMAP`), which this thread reads and
//! writes directly through `tasklet_worker::contract::actor`'s views (what the host runtime
//! uses), polling without sleeping; then as a normal kernel over one message in device memory.

use std::ffi::{c_void, CString};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys, CudaContext, DriverError};
use tasklet_worker::contract::actor::{ring_bytes, ControlBlock, Ring, RingLayout, CONTROL_BYTES};

use crate::messages::{
    all_answer, answers, handler_control, handler_rings, message, persistent_kernel, ACTOR_PTX,
    ANSWER_AT, ANSWER_WAIT, CONTROL_AT, FACTOR, HANDLER_BYTES, IN_AT, KERNEL, MESSAGE_BYTES,
    OUT_AT, SLOTS, STOP_GRACE, THREADS, WARMUP,
};
use crate::stats::{lines, ring_lines, Lines};
use crate::Params;

/// Polls between clock reads while waiting for answers.
const POLLS_PER_CLOCK_READ: u32 = 256;

fn cuda(what: &str) -> impl Fn(DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

struct Native {
    stream: sys::CUstream,
    module: sys::CUmodule,
    function: sys::CUfunction,
    /// The rings and control blocks: host memory the device sees. Freed only once no kernel
    /// can use it (a kernel that did not stop leaves it allocated).
    mapped: Vec<*mut u8>,
    _ctx: Arc<CudaContext>,
}

pub fn measure(p: &Params) -> Result<Lines, String> {
    let ctx = CudaContext::new(0).map_err(cuda("context"))?;
    let stream =
        result::stream::create(result::stream::StreamKind::NonBlocking).map_err(cuda("stream"))?;
    let ptx = CString::new(ACTOR_PTX).expect("PTX has no NUL");
    let module = unsafe { result::module::load_data(ptx.as_ptr() as *const c_void) }
        .map_err(cuda("loading actor.ptx"))?;
    let function = unsafe { result::module::get_function(module, CString::new(KERNEL).unwrap()) }
        .map_err(cuda("actor_scale"))?;
    let mut n = Native {
        stream,
        module,
        function,
        mapped: Vec::new(),
        _ctx: ctx,
    };
    let (rtt, batches) = n.persistent(p, RingLayout::Plain)?;
    let (seq_rtt, seq_batches) = n.persistent(p, RingLayout::Sequenced)?;
    let (launch_sync, handler_rtt) = n.handler(p)?;
    let mut out = lines(rtt, batches, p.batch, launch_sync, handler_rtt);
    out.extend(ring_lines("seq_", seq_rtt, seq_batches, p.batch));
    Ok(out)
}

impl Native {
    fn launch(
        &self,
        function: sys::CUfunction,
        args: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        unsafe {
            sys::cuLaunchKernel(
                function,
                1,
                1,
                1,
                THREADS,
                1,
                1,
                0,
                self.stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
            .result()
        }
    }

    fn persistent(
        &mut self,
        p: &Params,
        layout: RingLayout,
    ) -> Result<(Vec<u64>, Vec<u64>), String> {
        let ring = ring_bytes(layout, SLOTS, MESSAGE_BYTES).expect("a small ring");
        let bytes = 2 * ring + CONTROL_BYTES;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        let host = unsafe { result::malloc_host(bytes, flags) }.map_err(cuda("cuMemHostAlloc"))?
            as *mut u8;
        let mut device = 0;
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) }.result();
        self.mapped.push(host);
        r.map_err(cuda("cuMemHostGetDevicePointer"))?;
        // SAFETY: page-aligned, `bytes` long, kept until after the kernel has returned (Drop);
        // ring geometry as checked by `ring_bytes`.
        let (inbox, outbox, control) = unsafe {
            (
                Ring::create(host, layout, SLOTS, MESSAGE_BYTES),
                Ring::create(host.add(ring), layout, SLOTS, MESSAGE_BYTES),
                ControlBlock::at(host.add(2 * ring)),
            )
        };
        control.start();
        let (mut a, mut b, mut c, mut f) = (
            device,
            device + ring as u64,
            device + 2 * ring as u64,
            FACTOR,
        );
        let mut args: [*mut c_void; 4] = [
            (&mut a as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
            (&mut c as *mut u64).cast(),
            (&mut f as *mut f32).cast(),
        ];
        let name = persistent_kernel(layout);
        let function = unsafe {
            result::module::get_function(self.module, CString::new(name).expect("a name"))
        }
        .map_err(cuda(name))?;
        self.launch(function, &mut args)
            .map_err(cuda("persistent launch"))?;
        let r = exchange(p, &inbox, &outbox);
        control.ask_to_terminate();
        self.wait_for_stream(STOP_GRACE)
            .map_err(|e| format!("stopping the persistent kernel: {e}"))?;
        r
    }

    /// Waits up to `limit` for the stream's work to end.
    fn wait_for_stream(&self, limit: Duration) -> Result<(), String> {
        let until = Instant::now() + limit;
        loop {
            match unsafe { sys::cuStreamQuery(self.stream) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(()),
                sys::CUresult::CUDA_ERROR_NOT_READY if Instant::now() < until => {
                    std::thread::sleep(Duration::from_micros(100))
                }
                sys::CUresult::CUDA_ERROR_NOT_READY => {
                    return Err(format!("the kernel did not return within {limit:?}"))
                }
                e => return Err(format!("{e:?}")),
            }
        }
    }

    /// The kernel as a normal kernel over device memory: launch + sync with the message put
    /// untimed, then write + launch + read from and into pinned memory.
    fn handler(&mut self, p: &Params) -> Result<(Vec<u64>, Vec<u64>), String> {
        let s = self.stream;
        let buf = unsafe { result::malloc_sync(HANDLER_BYTES as usize) }.map_err(cuda("alloc"))?;
        let r = self.handler_on(p, buf);
        unsafe {
            let _ = result::stream::synchronize(s);
            let _ = result::free_sync(buf);
        }
        r
    }

    fn handler_on(
        &mut self,
        p: &Params,
        buf: sys::CUdeviceptr,
    ) -> Result<(Vec<u64>, Vec<u64>), String> {
        let s = self.stream;
        let mut staged = Pinned::new(CONTROL_AT as usize).map_err(cuda("cuMemHostAlloc"))?;
        let mut answer = Pinned::new(MESSAGE_BYTES as usize).map_err(cuda("cuMemHostAlloc"))?;
        let control = handler_control();
        unsafe {
            result::memcpy_htod_async(buf + CONTROL_AT, &control[..], s)
                .and_then(|()| result::stream::synchronize(s))
                .map_err(cuda("writing the control block"))?;
        }
        let (mut a, mut b, mut c, mut f) = (buf + IN_AT, buf + OUT_AT, buf + CONTROL_AT, FACTOR);
        let mut args: [*mut c_void; 4] = [
            (&mut a as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
            (&mut c as *mut u64).cast(),
            (&mut f as *mut f32).cast(),
        ];
        let mut rings = Vec::new();
        let mut launch_sync = Vec::with_capacity(p.iters as usize);
        for k in 0..WARMUP + p.iters {
            handler_rings(k, &mut rings);
            staged.as_mut_slice().copy_from_slice(&rings);
            unsafe {
                result::memcpy_htod_async(buf, staged.as_mut_slice(), s)
                    .and_then(|()| result::stream::synchronize(s))
                    .map_err(cuda("writing the message"))?;
            }
            let start = Instant::now();
            self.launch(self.function, &mut args)
                .and_then(|()| unsafe { result::stream::synchronize(s) })
                .map_err(cuda("launch + sync"))?;
            let t = start.elapsed();
            if k >= WARMUP {
                launch_sync.push(t.as_nanos() as u64);
            }
        }
        let mut rtt = Vec::with_capacity(p.iters as usize);
        for k in 0..WARMUP + p.iters {
            handler_rings(k, &mut rings);
            staged.as_mut_slice().copy_from_slice(&rings);
            let start = Instant::now();
            unsafe {
                result::memcpy_htod_async(buf, staged.as_mut_slice(), s)
                    .and_then(|()| self.launch(self.function, &mut args))
                    .and_then(|()| {
                        result::memcpy_dtoh_async(answer.as_mut_slice(), buf + ANSWER_AT, s)
                    })
                    .and_then(|()| result::stream::synchronize(s))
                    .map_err(cuda("write + launch + read"))?;
            }
            let t = start.elapsed();
            if !answers(k, answer.as_mut_slice()) {
                return Err("write + launch + read: the answer differs from in * 2 + 1".into());
            }
            if k >= WARMUP {
                rtt.push(t.as_nanos() as u64);
            }
        }
        Ok((launch_sync, rtt))
    }
}

/// The round trips, then the batches, through the rings while the kernel serves them.
fn exchange(p: &Params, inbox: &Ring, outbox: &Ring) -> Result<(Vec<u64>, Vec<u64>), String> {
    let (mut request, mut answer) = (Vec::new(), Vec::new());
    let mut rtt = Vec::with_capacity(p.iters as usize);
    for k in 0..WARMUP + p.iters {
        request.clear();
        message(k, &mut request);
        crate::think(p.think_ns);
        let start = Instant::now();
        send(inbox, &request, 1)?;
        receive(outbox, 1, &mut answer)?;
        let t = start.elapsed();
        if !answers(k, &answer) {
            return Err("round trip: an answer differs from in * 2 + 1".into());
        }
        if k >= WARMUP {
            rtt.push(t.as_nanos() as u64);
        }
    }
    let mut batches = Vec::with_capacity(p.batches as usize);
    let mut first = 0u32;
    for i in 0..WARMUP.min(p.batches) + p.batches {
        request.clear();
        for j in 0..p.batch {
            message(first.wrapping_add(j), &mut request);
        }
        let start = Instant::now();
        send(inbox, &request, p.batch)?;
        receive(outbox, p.batch, &mut answer)?;
        let t = start.elapsed();
        if !all_answer(first, &answer) {
            return Err("batch: an answer differs from in * 2 + 1".into());
        }
        first = first.wrapping_add(p.batch);
        if i >= WARMUP.min(p.batches) {
            batches.push(t.as_nanos() as u64);
        }
    }
    Ok((rtt, batches))
}

/// Puts `n` messages; the inbox is empty between round trips and batches, so all fit.
fn send(inbox: &Ring, messages: &[u8], n: u32) -> Result<(), String> {
    match inbox.push(messages) {
        Ok(sent) if sent == n => Ok(()),
        Ok(sent) => Err(format!("only {sent} of {n} messages fit the inbox")),
        Err(e) => Err(e.to_string()),
    }
}

/// Polls until `n` answers have come, reading the clock every [`POLLS_PER_CLOCK_READ`] polls to
/// give up after [`ANSWER_WAIT`].
fn receive(outbox: &Ring, n: u32, into: &mut Vec<u8>) -> Result<(), String> {
    into.clear();
    let until = Instant::now() + ANSWER_WAIT;
    let (mut got, mut polls) = (0, 0u32);
    while got < n {
        got += outbox.pop(n - got, into).map_err(|e| e.to_string())?;
        polls = polls.wrapping_add(1);
        if polls % POLLS_PER_CLOCK_READ == 0 && Instant::now() >= until {
            return Err(format!(
                "{got} of {n} answers came within {ANSWER_WAIT:?} of waiting"
            ));
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// Page-locked host memory (`cuMemHostAlloc`, no flags), for the normal launch's copies.
struct Pinned {
    ptr: *mut u8,
    len: usize,
}

impl Pinned {
    fn new(len: usize) -> Result<Pinned, DriverError> {
        let ptr = unsafe { result::malloc_host(len, 0)? } as *mut u8;
        // SAFETY: `len` bytes just allocated; zeroed before any read.
        unsafe { ptr.write_bytes(0, len) };
        Ok(Pinned { ptr, len })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes, owned, initialised in `new`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        unsafe {
            let _ = result::free_host(self.ptr.cast());
        }
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        // A kernel still running (it did not stop when asked) keeps the mapped memory: freeing
        // it under the kernel would fault the context. The process ends soon after.
        let idle = self.wait_for_stream(Duration::ZERO).is_ok();
        unsafe {
            if idle {
                for host in self.mapped.drain(..) {
                    let _ = result::free_host(host.cast());
                }
                let _ = result::module::unload(self.module);
                let _ = result::stream::destroy(self.stream);
            }
        }
    }
}
