//! A copy between the two devices of one group lease (`mem-copy-from`: GPU to GPU where the
//! workers can, else staged; the row says which), beside native cudarc in this process on the
//! same two GPUs: `cuMemcpyPeer` (peer access on where the hardware allows) and a copy staged
//! through pinned host memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys, CudaContext, DriverError};
use tasklet_runtime::gpu::{GpuService, LeaseRequest};
use tasklet_runtime::{BackendKind, DeviceRequirement, Host};

use crate::{gbps, median, new_gpu, Options, MIB};

pub fn measure(host: &Host, o: &Options) -> Result<(), String> {
    println!(
        "## between devices: {} MiB from device 0 to device 1",
        o.mib
    );
    let bytes = o.mib * MIB;
    let peer_before = host.leases().peer_copy_bytes();
    let memory_before = crate::isolation::memory_in_use(host)?;
    let ours = group_copy(host, o)?;
    // The workers stay warm for the next leases: a copy must leave nothing behind on either GPU
    // (a worker that mapped the other GPU's memory keeps no context there).
    crate::settle(host);
    let memory_after = crate::isolation::memory_in_use(host)?;
    // Every copy went GPU to GPU, or none did (the workers could not): say which.
    let path = if host.leases().peer_copy_bytes() > peer_before {
        "GPU to GPU: the source's worker exports the buffer, the destination's maps it".to_string()
    } else {
        format!(
            "staged through memory both workers map: {}",
            host.leases()
                .peer_copy_refusal()
                .unwrap_or_else(|| "no reason given".into())
        )
    };
    let native = match o.backend {
        BackendKind::Cuda => Some(native(o.devices, bytes as usize, o.reps)),
        BackendKind::Emu => None,
    };
    println!("| path | median | bandwidth |");
    println!("| --- | --- | --- |");
    let row = |label: &str, d: Duration| {
        println!(
            "| {label} | {:.2} ms | {:.2} GB/s |",
            d.as_secs_f64() * 1e3,
            gbps(bytes, d)
        )
    };
    row(
        &format!("tasklet: `mem-copy-from` within a group lease ({path})"),
        ours,
    );
    match native {
        None => println!("native: skipped: no CUDA device (the emulator's devices)"),
        Some(Err(e)) => println!("native: error: {e}"),
        Some(Ok(n)) => {
            row(&n.direct_label, n.direct);
            row(
                "native: staged through pinned host memory (D→H, H→D)",
                n.staged,
            );
            println!(
                "tasklet ÷ native {}: {:.2}× the time; tasklet ÷ native staged: {:.2}× the time",
                if n.peer { "peer" } else { "copy" },
                ours.as_secs_f64() / n.direct.as_secs_f64(),
                ours.as_secs_f64() / n.staged.as_secs_f64()
            );
        }
    }
    for (i, (b, a)) in memory_before.iter().zip(&memory_after).enumerate() {
        println!(
            "device {i}: {} MiB in use before the copies, {} MiB after (the workers kept warm)",
            b / MIB,
            a / MIB
        );
    }
    println!();
    Ok(())
}

/// The median time of `mem-copy-from` between the two leases of a group, the bytes checked
/// once.
fn group_copy(host: &Host, o: &Options) -> Result<Duration, String> {
    let bytes = o.mib * MIB;
    let mut gpu = new_gpu(host, o);
    let leases = gpu
        .lease_acquire_group(
            LeaseRequest {
                min_vram: bytes,
                secs: 600,
                device: None,
            },
            &DeviceRequirement::default(),
            2,
        )
        .map_err(|e| format!("a group of two leases: {e}"))?;
    let mut on = [None, None];
    for l in leases {
        let device = gpu.lease_info(l).map_err(|e| e.to_string())?.device;
        let s = gpu.session_open(l).map_err(|e| format!("session: {e}"))?;
        let b = gpu.mem_alloc(s, bytes).map_err(|e| format!("alloc: {e}"))?;
        if let Some(slot) = on.get_mut(device as usize) {
            *slot = Some((s, b));
        }
    }
    let [Some(src), Some(dst)] = on else {
        return Err("the group did not land on devices 0 and 1".into());
    };
    let data: Vec<u8> = (0..bytes).map(|i| (i * 13 + i / 4096) as u8).collect();
    gpu.mem_write(src.0, src.1, 0, &data)
        .map_err(|e| format!("write: {e}"))?;
    let mut copy = || {
        let t = Instant::now();
        gpu.mem_copy_between((dst.0, dst.1, 0), (src.0, src.1, 0), bytes)
            .map_err(|e| format!("mem-copy-from: {e}"))?;
        // A copy is ordered with the destination's later work: a sync ends it.
        gpu.sync(dst.0).map_err(|e| format!("sync: {e}"))?;
        Ok::<_, String>(t.elapsed())
    };
    copy()?;
    let times = (0..o.reps).map(|_| copy()).collect::<Result<Vec<_>, _>>()?;
    let back = gpu
        .mem_read(dst.0, dst.1, 0, bytes)
        .map_err(|e| format!("read: {e}"))?;
    if back != data {
        return Err("the copy's bytes differ from the source's".into());
    }
    Ok(median(times))
}

struct Native {
    direct_label: String,
    direct: Duration,
    staged: Duration,
    /// Whether `direct` is a peer copy between two GPUs.
    peer: bool,
}

fn cuda(what: &str) -> impl Fn(DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// A device buffer of `bytes` in `ctx`, freed on drop.
struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    ctx: Arc<CudaContext>,
}

impl DeviceBuffer {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<DeviceBuffer, String> {
        ctx.bind_to_thread().map_err(cuda("bind"))?;
        let ptr = unsafe { result::malloc_sync(bytes) }.map_err(cuda("cuMemAlloc"))?;
        unsafe { result::memset_d8_sync(ptr, 7, bytes) }.map_err(cuda("cuMemset"))?;
        Ok(DeviceBuffer {
            ptr,
            ctx: Arc::clone(ctx),
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Pinned host memory, freed on drop.
struct Pinned(*mut u8, usize);

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = unsafe { result::free_host(self.0.cast()) };
    }
}

fn timed(reps: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<Duration, String> {
    f()?;
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed());
    }
    Ok(median(v))
}

fn native(gpus: [u32; 2], bytes: usize, reps: usize) -> Result<Native, String> {
    let a = CudaContext::new(gpus[0] as usize).map_err(cuda("context on the first GPU"))?;
    let b = CudaContext::new(gpus[1] as usize).map_err(cuda("context on the second GPU"))?;
    let src = DeviceBuffer::new(&a, bytes)?;
    let dst = DeviceBuffer::new(&b, bytes)?;
    let two = gpus[0] != gpus[1];
    let mut peer = false;
    if two {
        let mut can = 0;
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }
            .result()
            .map_err(cuda("cuDeviceCanAccessPeer"))?;
        if can == 1 {
            // Both ways: the copy engine of either side may be used.
            for (from, to) in [(&a, &b), (&b, &a)] {
                from.bind_to_thread().map_err(cuda("bind"))?;
                match unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) }.result() {
                    Ok(())
                    | Err(DriverError(sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)) => {}
                    Err(e) => return Err(format!("cuCtxEnablePeerAccess: {e}")),
                }
            }
            peer = true;
        }
    }
    let direct = timed(reps, || {
        a.bind_to_thread().map_err(cuda("bind"))?;
        unsafe {
            if two {
                sys::cuMemcpyPeer(dst.ptr, b.cu_ctx(), src.ptr, a.cu_ctx(), bytes).result()
            } else {
                result::memcpy_dtod_sync(dst.ptr, src.ptr, bytes)
            }
        }
        .map_err(cuda("copy"))?;
        result::ctx::synchronize().map_err(cuda("sync"))?;
        b.bind_to_thread().map_err(cuda("bind"))?;
        result::ctx::synchronize().map_err(cuda("sync"))
    })?;
    a.bind_to_thread().map_err(cuda("bind"))?;
    let host = unsafe { result::malloc_host(bytes, 0) }.map_err(cuda("cuMemHostAlloc"))?;
    let pinned = Pinned(host.cast(), bytes);
    let staged = timed(reps, || {
        // SAFETY: `pinned` is `bytes` long and lives past both copies, which are synchronous.
        let slice = unsafe { std::slice::from_raw_parts_mut(pinned.0, pinned.1) };
        a.bind_to_thread().map_err(cuda("bind"))?;
        unsafe { result::memcpy_dtoh_sync(slice, src.ptr) }.map_err(cuda("D→H"))?;
        b.bind_to_thread().map_err(cuda("bind"))?;
        unsafe { result::memcpy_htod_sync(dst.ptr, slice) }.map_err(cuda("H→D"))?;
        result::ctx::synchronize().map_err(cuda("sync"))
    })?;
    drop(pinned);
    let direct_label = match (two, peer) {
        (true, true) => format!("native: `cuMemcpyPeer`, peer access on (GPU {} → GPU {})", gpus[0], gpus[1]),
        (true, false) => format!(
            "native: `cuMemcpyPeer`, no peer access between GPU {} and GPU {} (the driver stages it)",
            gpus[0], gpus[1]
        ),
        (false, _) => format!("native: `cuMemcpyDtoD` within GPU {} (the two devices are its slots)", gpus[0]),
    };
    Ok(Native {
        direct_label,
        direct,
        staged,
        peer,
    })
}
