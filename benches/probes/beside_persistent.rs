//! Which driver calls wait for a kernel that is still running on another stream of the same
//! context: what a worker can do beside a persistent kernel (issue 20), and what it must refuse
//! or do another way. In one process, no worker: a kernel that spins on a word of mapped host
//! memory is launched cooperatively on a non-blocking stream of its own (as the worker launches
//! persistent kernels); then one call is timed, and a thread releases the kernel after `HOLD`. A
//! call that took about `HOLD` waited for the kernel; one that took far less did not.
//!
//!     cargo bench -p tasklet-benches --bench beside_persistent
//!
//! `CUDA_MODULE_LOADING` is set to `EAGER` unless already set, as the worker does; run it again
//! with `CUDA_MODULE_LOADING=LAZY` to see lazy loading. Needs a CUDA device; says so and exits 0
//! without one.

use std::ffi::{c_void, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUdeviceptr, CUfunction, CUmodule, CUstream};

/// How long the kernel runs before the release thread lets it return.
const HOLD: Duration = Duration::from_millis(1500);

/// `spin(flag)`: thread 0 spins until `*flag` is non-zero.
const SPIN_PTX: &str = "
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 spin_flag)
{
    .reg .pred %p;
    .reg .b32 %r;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [spin_flag];
$L_wait:
    ld.volatile.global.u32 %r, [%rd1];
    setp.eq.u32 %p, %r, 0;
    @%p bra $L_wait;
    ret;
}
";

/// `touch(p)`: stores 1 at `p`. Each load gets a comment of its own, so no cache can answer it.
fn touch_ptx(n: u32) -> String {
    format!(
        "// touch {n}\n.version 7.0\n.target sm_70\n.address_size 64\n\
         .visible .entry touch(.param .u64 touch_p)\n{{\n\t.reg .b32 %r;\n\t.reg .b64 %rd;\n\
         \tld.param.u64 %rd, [touch_p];\n\tmov.u32 %r, 1;\n\tst.global.u32 [%rd], %r;\n\tret;\n}}\n"
    )
}

fn ok(what: &str, r: sys::CUresult) -> Result<(), String> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(format!("{what}: {e:?}")),
    }
}

struct Gpu {
    spin: CUfunction,
    /// The kernel's stream and the stream of everything else (both non-blocking).
    actor: CUstream,
    work: CUstream,
    /// Mapped host word (host pointer, device address).
    flag: (*mut u32, CUdeviceptr),
    /// A loaded `touch` and a small buffer it writes.
    touch: CUfunction,
    buffer: CUdeviceptr,
    host: Vec<u8>,
    loads: u32,
}

impl Gpu {
    fn new() -> Result<Gpu, String> {
        unsafe {
            ok("cuInit", sys::cuInit(0))?;
            let mut dev = 0;
            ok("cuDeviceGet", sys::cuDeviceGet(&mut dev, 0))?;
            let mut ctx = null_mut();
            ok(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            )?;
            ok("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
            let spin = function(SPIN_PTX, "spin")?.1;
            let touch = function(&touch_ptx(0), "touch")?.1;
            let mut actor = null_mut();
            let mut work = null_mut();
            ok("cuStreamCreate", sys::cuStreamCreate(&mut actor, 1))?;
            ok("cuStreamCreate", sys::cuStreamCreate(&mut work, 1))?;
            let mut host: *mut c_void = null_mut();
            ok(
                "cuMemHostAlloc",
                sys::cuMemHostAlloc(
                    &mut host,
                    4096,
                    sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                ),
            )?;
            let mut dflag = 0;
            ok(
                "cuMemHostGetDevicePointer",
                sys::cuMemHostGetDevicePointer_v2(&mut dflag, host, 0),
            )?;
            let mut buffer = 0;
            ok("cuMemAlloc", sys::cuMemAlloc_v2(&mut buffer, 1 << 20))?;
            Ok(Gpu {
                spin,
                actor,
                work,
                flag: (host.cast(), dflag),
                touch,
                buffer,
                host: vec![7u8; 1 << 20],
                loads: 0,
            })
        }
    }

    fn flag(&self) -> &AtomicU32 {
        // SAFETY: a live, aligned word of pinned host memory, written by the device only as
        // plain loads.
        unsafe { &*(self.flag.0 as *const AtomicU32) }
    }

    /// Starts the spinning kernel (cooperatively) and a thread that releases it after `HOLD`.
    fn start(&self) -> Result<std::thread::JoinHandle<()>, String> {
        self.flag().store(0, Ordering::SeqCst);
        let mut arg = self.flag.1;
        let mut params = [(&mut arg as *mut CUdeviceptr).cast::<c_void>()];
        unsafe {
            ok(
                "cuLaunchCooperativeKernel",
                sys::cuLaunchCooperativeKernel(
                    self.spin,
                    1,
                    1,
                    1,
                    32,
                    1,
                    1,
                    0,
                    self.actor,
                    params.as_mut_ptr(),
                ),
            )?;
        }
        // Until the kernel is seen running, a call could slip in before it.
        std::thread::sleep(Duration::from_millis(50));
        let flag = self.flag.0 as usize;
        Ok(std::thread::spawn(move || {
            std::thread::sleep(HOLD);
            // SAFETY: as in `flag`.
            unsafe { &*(flag as *const AtomicU32) }.store(1, Ordering::SeqCst);
        }))
    }

    fn finish(&self, release: std::thread::JoinHandle<()>) -> Result<(), String> {
        let _ = release.join();
        unsafe {
            ok(
                "cuStreamSynchronize(actor)",
                sys::cuStreamSynchronize(self.actor),
            )
        }
    }

    fn launch_touch(&self, f: CUfunction) -> Result<(), String> {
        let mut arg = self.buffer;
        let mut params = [(&mut arg as *mut CUdeviceptr).cast::<c_void>()];
        unsafe {
            ok(
                "cuLaunchKernel",
                sys::cuLaunchKernel(
                    f,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    self.work,
                    params.as_mut_ptr(),
                    null_mut(),
                ),
            )?;
            ok(
                "cuStreamSynchronize(work)",
                sys::cuStreamSynchronize(self.work),
            )
        }
    }

    /// The calls to time, each as a worker makes it.
    fn call(&mut self, name: &str) -> Result<(), String> {
        unsafe {
            match name {
                "launch + sync on another stream" => self.launch_touch(self.touch),
                "cuModuleLoadData (new PTX)" => {
                    self.loads += 1;
                    function(&touch_ptx(self.loads), "touch").map(|_| ())
                }
                "cuModuleLoadData, then a launch of it" => {
                    self.loads += 1;
                    let (_, f) = function(&touch_ptx(self.loads), "touch")?;
                    self.launch_touch(f)
                }
                "cuMemAlloc 4 KiB" => {
                    let mut p = 0;
                    ok("cuMemAlloc", sys::cuMemAlloc_v2(&mut p, 4096))?;
                    LEAKED.with(|l| l.borrow_mut().push(p));
                    Ok(())
                }
                "cuMemAlloc 256 MiB" => {
                    let mut p = 0;
                    ok("cuMemAlloc", sys::cuMemAlloc_v2(&mut p, 256 << 20))?;
                    LEAKED.with(|l| l.borrow_mut().push(p));
                    Ok(())
                }
                "cuMemFree (made before)" => {
                    let p = LEAKED
                        .with(|l| l.borrow_mut().pop())
                        .ok_or("nothing to free")?;
                    ok("cuMemFree", sys::cuMemFree_v2(p))
                }
                "cuMemAllocAsync + cuMemFreeAsync + sync (work stream)" => {
                    let mut p = 0;
                    ok(
                        "cuMemAllocAsync",
                        sys::cuMemAllocAsync(&mut p, 1 << 20, self.work),
                    )?;
                    ok("cuMemFreeAsync", sys::cuMemFreeAsync(p, self.work))?;
                    ok("cuStreamSynchronize", sys::cuStreamSynchronize(self.work))
                }
                "cuMemsetD8Async + sync (work stream)" => {
                    ok(
                        "cuMemsetD8Async",
                        sys::cuMemsetD8Async(self.buffer, 0, 1 << 20, self.work),
                    )?;
                    ok("cuStreamSynchronize", sys::cuStreamSynchronize(self.work))
                }
                "cuMemcpyHtoDAsync 1 MiB pageable + sync" => {
                    ok(
                        "cuMemcpyHtoDAsync",
                        sys::cuMemcpyHtoDAsync_v2(
                            self.buffer,
                            self.host.as_ptr().cast(),
                            1 << 20,
                            self.work,
                        ),
                    )?;
                    ok("cuStreamSynchronize", sys::cuStreamSynchronize(self.work))
                }
                "cuMemHostRegister 1 MiB + unregister" => {
                    let mut v = vec![0u8; 2 << 20];
                    let p = ((v.as_mut_ptr() as usize + 4095) & !4095) as *mut c_void;
                    ok(
                        "cuMemHostRegister",
                        sys::cuMemHostRegister_v2(p, 1 << 20, 0),
                    )?;
                    ok("cuMemHostUnregister", sys::cuMemHostUnregister(p))
                }
                "cuMemHostAlloc 1 MiB + cuMemFreeHost" => {
                    let mut p = null_mut();
                    ok("cuMemHostAlloc", sys::cuMemHostAlloc(&mut p, 1 << 20, 0))?;
                    ok("cuMemFreeHost", sys::cuMemFreeHost(p))
                }
                "cuMemGetInfo" => {
                    let (mut f, mut t) = (0, 0);
                    ok("cuMemGetInfo", sys::cuMemGetInfo_v2(&mut f, &mut t))
                }
                "cuStreamCreate + cuStreamDestroy" => {
                    let mut s = null_mut();
                    ok("cuStreamCreate", sys::cuStreamCreate(&mut s, 1))?;
                    ok("cuStreamDestroy", sys::cuStreamDestroy_v2(s))
                }
                "graph: capture, instantiate, launch, sync" => {
                    ok(
                        "cuStreamBeginCapture",
                        sys::cuStreamBeginCapture_v2(
                            self.work,
                            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                        ),
                    )?;
                    let mut arg = self.buffer;
                    let mut params = [(&mut arg as *mut CUdeviceptr).cast::<c_void>()];
                    ok(
                        "cuLaunchKernel",
                        sys::cuLaunchKernel(
                            self.touch,
                            1,
                            1,
                            1,
                            1,
                            1,
                            1,
                            0,
                            self.work,
                            params.as_mut_ptr(),
                            null_mut(),
                        ),
                    )?;
                    let mut g = null_mut();
                    ok(
                        "cuStreamEndCapture",
                        sys::cuStreamEndCapture(self.work, &mut g),
                    )?;
                    let mut e = null_mut();
                    ok(
                        "cuGraphInstantiate",
                        sys::cuGraphInstantiateWithFlags(&mut e, g, 0),
                    )?;
                    ok("cuGraphLaunch", sys::cuGraphLaunch(e, self.work))?;
                    ok("cuStreamSynchronize", sys::cuStreamSynchronize(self.work))?;
                    ok("cuGraphExecDestroy", sys::cuGraphExecDestroy(e))?;
                    ok("cuGraphDestroy", sys::cuGraphDestroy(g))
                }
                "cuCtxSynchronize (waits, by definition)" => {
                    ok("cuCtxSynchronize", sys::cuCtxSynchronize())
                }
                other => Err(format!("unknown call {other}")),
            }
        }
    }
}

thread_local! {
    static LEAKED: std::cell::RefCell<Vec<CUdeviceptr>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Loads `ptx` and finds `name` in it.
fn function(ptx: &str, name: &str) -> Result<(CUmodule, CUfunction), String> {
    let text = CString::new(ptx).map_err(|e| e.to_string())?;
    let name = CString::new(name).map_err(|e| e.to_string())?;
    let mut module = null_mut();
    let mut f = null_mut();
    unsafe {
        ok(
            "cuModuleLoadData",
            sys::cuModuleLoadData(&mut module, text.as_ptr().cast()),
        )?;
        ok(
            "cuModuleGetFunction",
            sys::cuModuleGetFunction(&mut f, module, name.as_ptr()),
        )?;
    }
    Ok((module, f))
}

const CALLS: [&str; 16] = [
    "launch + sync on another stream",
    "cuModuleLoadData (new PTX)",
    "cuModuleLoadData, then a launch of it",
    "cuMemAlloc 4 KiB",
    "cuMemAlloc 256 MiB",
    "cuMemFree (made before)",
    "cuMemFree (made before)",
    "cuMemAllocAsync + cuMemFreeAsync + sync (work stream)",
    "cuMemsetD8Async + sync (work stream)",
    "cuMemcpyHtoDAsync 1 MiB pageable + sync",
    "cuMemHostRegister 1 MiB + unregister",
    "cuMemHostAlloc 1 MiB + cuMemFreeHost",
    "cuMemGetInfo",
    "cuStreamCreate + cuStreamDestroy",
    "graph: capture, instantiate, launch, sync",
    "cuCtxSynchronize (waits, by definition)",
];

fn main() {
    if std::env::var_os("CUDA_MODULE_LOADING").is_none() {
        std::env::set_var("CUDA_MODULE_LOADING", "EAGER");
    }
    if !unsafe { sys::is_culib_present() } {
        println!("skipped: no CUDA device (libcuda is not installed)");
        return;
    }
    let mut gpu = match Gpu::new() {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    println!(
        "# driver calls beside a running kernel on another stream (CUDA_MODULE_LOADING={}), kernel released after {HOLD:?}",
        std::env::var("CUDA_MODULE_LOADING").unwrap_or_default()
    );
    println!("| call | took | waited for the kernel |");
    println!("| --- | ---: | --- |");
    for name in CALLS {
        let release = match gpu.start() {
            Ok(r) => r,
            Err(e) => {
                println!("| {name} | — | could not start the kernel: {e} |");
                continue;
            }
        };
        let t = Instant::now();
        let r = gpu.call(name);
        let took = t.elapsed();
        let verdict = match &r {
            Err(e) => format!("error: {e}"),
            // Started ~50 ms into HOLD: a call that waited ends near its end.
            Ok(()) if took >= HOLD / 2 => "**yes**".into(),
            Ok(()) => "no".into(),
        };
        println!(
            "| {name} | {:.3} ms | {verdict} |",
            took.as_secs_f64() * 1e3
        );
        if let Err(e) = gpu.finish(release) {
            println!("stopping: {e}");
            return;
        }
    }
}
