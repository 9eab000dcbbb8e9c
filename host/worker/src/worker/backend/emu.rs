//! The emulator backend: device memory and kernels run on the CPU by `tasklet_ptx`.

use std::collections::HashMap;

use tasklet_ptx::{DeviceMemory, ExecError, LaunchParams, MemError, Module};

use super::{Backend, BackendError};
use crate::contract::ErrorKind;
use crate::contract::{LaunchRequest, LoadedModule, WorkerInfo};
use crate::worker::nvrtc::{self, NvrtcError};

/// Allocation granularity the cap is accounted in (the emulator aligns allocations to this).
/// Modules a worker may hold at once: each costs host memory the device cap does not count.
const MAX_MODULES: usize = 4096;

pub struct EmuBackend {
    mem: DeviceMemory,
    modules: HashMap<u32, Module>,
    next_module: u32,
    /// Start address → (accounted, requested) bytes, for the cap and for `free` of a
    /// non-allocation.
    allocs: HashMap<u64, (u64, u64)>,
    used: u64,
    /// Sum of the requested sizes of live allocations.
    requested: u64,
    cap: u64,
    threads: usize,
}

impl EmuBackend {
    /// An emulated device with `device_memory` bytes, running CTAs on `threads` threads (0: one
    /// per core).
    pub fn new(device_memory: u64, threads: usize) -> EmuBackend {
        EmuBackend {
            mem: DeviceMemory::new(),
            modules: HashMap::new(),
            next_module: 1,
            allocs: HashMap::new(),
            used: 0,
            requested: 0,
            cap: device_memory,
            threads,
        }
    }

    fn module(&self, id: u32) -> Result<&Module, BackendError> {
        self.modules.get(&id).ok_or_else(|| {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!("no module with id {id}"),
            )
        })
    }
}

fn mem_error(e: MemError) -> BackendError {
    let kind = match e {
        MemError::OutOfBounds { .. } => ErrorKind::OutOfBounds,
        MemError::NotAllocated { .. } => ErrorKind::InvalidArgument,
        MemError::AllocFailed { .. } => ErrorKind::OutOfMemory,
    };
    BackendError::new(kind, e.to_string())
}

impl Backend for EmuBackend {
    fn info(&self) -> WorkerInfo {
        WorkerInfo {
            backend: "emu".into(),
            device: "tasklet PTX emulator".into(),
            memory_total: self.cap,
            memory_used: self.used,
            allocations: self.allocs.len() as u32,
            modules: self.modules.len() as u32,
            memory_requested: self.requested,
            device_memory: self.cap,
            compute_capability: (8, 0),
            uuid: String::new(),
            driver_version: 0,
            pinned_data: false,
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<u64, BackendError> {
        if bytes == 0 {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                "cannot allocate 0 bytes",
            ));
        }
        let accounted = crate::contract::charged_bytes(bytes);
        if accounted > self.cap - self.used {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "cannot allocate {bytes} bytes: {} of {} bytes in use",
                    self.used, self.cap
                ),
            ));
        }
        let addr = self.mem.alloc(bytes).map_err(mem_error)?;
        self.allocs.insert(addr, (accounted, bytes));
        self.used += accounted;
        self.requested += bytes;
        Ok(addr)
    }

    fn free(&mut self, addr: u64) -> Result<(), BackendError> {
        let Some(&(accounted, requested)) = self.allocs.get(&addr) else {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("{addr:#x} is not the start of an allocation"),
            ));
        };
        self.mem.free(addr).map_err(mem_error)?;
        self.allocs.remove(&addr);
        self.used -= accounted;
        self.requested -= requested;
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        self.mem.write(addr, data).map_err(mem_error)
    }

    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.mem.read(addr, out).map_err(mem_error)
    }

    fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), BackendError> {
        self.mem.copy(dst, src, len).map_err(mem_error)
    }

    fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, BackendError> {
        if self.modules.len() >= MAX_MODULES {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!("a worker holds at most {MAX_MODULES} modules"),
            ));
        }
        let module = Module::parse(ptx).map_err(|e| {
            BackendError::new(
                ErrorKind::LoadFailed,
                format!("PTX line {}: {}", e.line, e.message),
            )
        })?;
        let id = self.next_module;
        self.next_module = self
            .next_module
            .checked_add(1)
            .ok_or_else(|| BackendError::new(ErrorKind::OutOfMemory, "module ids exhausted"))?;
        let kernels = module.kernels().to_vec();
        self.modules.insert(id, module);
        Ok(LoadedModule { id, kernels })
    }

    /// Compiles with NVRTC (found at run time, see [`crate::worker::nvrtc`]; `compute_80` unless the
    /// options name an architecture) and loads the PTX like `load_module`.
    fn load_source(
        &mut self,
        source: &str,
        options: &[&str],
    ) -> Result<LoadedModule, BackendError> {
        let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        let ptx = nvrtc::compile(source, &options).map_err(|e| match e {
            NvrtcError::NotFound { .. } => BackendError::new(
                ErrorKind::Unsupported,
                format!("the emu backend compiles CUDA C with NVRTC, which is not installed: {e}"),
            ),
            // Compile errors (with NVRTC's log), bad options, a broken NVRTC install.
            _ => BackendError::new(ErrorKind::LoadFailed, e.to_string()),
        })?;
        self.load_module(&ptx).map_err(|e| {
            BackendError::new(
                e.kind,
                format!("{} (in the PTX NVRTC made of the source)", e.message),
            )
        })
    }

    fn unload_module(&mut self, id: u32) -> Result<(), BackendError> {
        self.modules.remove(&id).map(drop).ok_or_else(|| {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!("no module with id {id}"),
            )
        })
    }

    fn launch(&mut self, l: &LaunchRequest<'_>) -> Result<(), BackendError> {
        let module = self.module(l.module)?;
        let params = LaunchParams {
            grid: l.grid,
            block: l.block,
            shared_mem_bytes: l.shared_mem_bytes,
            args: l.args,
            step_limit: l.step_limit,
            threads: self.threads,
        };
        match module.launch(l.kernel, &self.mem, &params) {
            Ok(_) => Ok(()),
            Err(ExecError::InvalidLaunch(m)) => Err(BackendError::new(ErrorKind::LaunchFailed, m)),
            Err(e @ ExecError::Fault { .. }) => {
                Err(BackendError::new(ErrorKind::KernelFault, e.to_string()))
            }
            Err(e @ ExecError::StepLimit { .. }) => Err(BackendError::new(
                ErrorKind::DeadlineExceeded,
                format!("kernel deadline exceeded: {e}"),
            )),
        }
    }

    fn sync(&mut self) -> Result<(), BackendError> {
        // Every op already ran to completion.
        Ok(())
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        self.mem.clear();
        self.modules.clear();
        self.allocs.clear();
        self.used = 0;
        self.requested = 0;
        Ok(())
    }
}
