//! Loaded modules: the driver JIT, kernel signatures, and a cache keyed by the PTX text so that
//! loading the same PTX again in a lease is a lookup.
//!
//! This cache is the first lookup; the host's node-wide module cache (`tasklet-runtime`'s
//! `module_cache`, docs/design.md "Module cache") is the second. A load through it
//! (`Request::LoadModuleCached`) that finds nothing here either loads the image the host sent —
//! the cubin an earlier load of exactly this PTX compiled, in this or another worker on a device
//! of the same compute capability — with `cuModuleLoadData`, no JIT ([`Modules::load_cached_image`]),
//! or compiles the PTX through the driver's linker to a cubin, loads that, and hands it to the
//! host ([`Modules::load_keeping`]). An image the device refuses is compiled afresh from the PTX
//! and reported refused; a cubin the linker made that the device refuses is not handed on. Only
//! an ELF image whose header tables lie inside it ever reaches the driver ([`plausible_cubin`]).
//! Either way the kernel table comes from the PTX, as for every load.
//!
//! Each `load_module` gets its own worker module id (ids are never reused). Ids whose PTX is the
//! same share one `CUmodule` when the PTX declares no module-scope `.global` variables: such a
//! module has no state a kernel can change, so sharing it is invisible. A module with `.global`
//! variables is loaded afresh every time, as CUDA itself would (each load has its own variables).
//! A shared module whose last id is unloaded stays cached (up to [`MAX_IDLE`]), across `reset`
//! too ([`Modules::end_ids`]): the next lease on the worker that loads the same PTX gets it by a
//! lookup, no JIT. Only stateless code is kept that way; every module with `.global` variables
//! is unloaded at `reset`, so no state of one lease is seen by the next. What a later tenant can
//! tell is that the same PTX was loaded on this worker before (its load is faster): the price of
//! a cache by content.

use rustc_hash::FxHashMap;
use std::ffi::{c_int, c_void, CString};
use std::sync::Arc;

use cudarc::driver::sys::CUjit_option as J;
use tasklet_ptx::PtxHeader;

use super::driver::*;
use super::errors::{self, LoadTarget};
use crate::contract::modules::{declares_module_globals, MAX_MODULES};
use crate::contract::{quote, ErrorKind, KernelTable, LoadedModule};
use crate::worker::backend::BackendError;

/// Shared modules kept loaded with no id referring to them.
const MAX_IDLE: usize = 32;
/// Bytes of each JIT log buffer.
const LOG_BYTES: usize = 16 * 1024;

/// One kernel of a loaded module, resolved at load so a launch is a lookup.
pub struct Kernel {
    pub function: CuFunction,
    pub name: Arc<str>,
    /// Size of its argument block (`KernelInfo::param_layout`).
    pub arg_bytes: u32,
    /// Where each parameter starts in the argument block (`KernelInfo::param_layout`): what a
    /// cooperative launch, which takes a pointer per parameter, points into the block.
    pub param_offsets: Arc<[u32]>,
    /// Dynamic shared memory the function has been opted in to (above the 48 KiB default).
    pub shared_optin: u32,
}

/// One `CUmodule`.
struct Loaded {
    module: CuModule,
    kernels: KernelTable,
    /// Device memory its `.global` variables take (`LoadedModule::variable_bytes`).
    variable_bytes: u64,
    functions: Vec<Kernel>,
    /// Worker ids referring to it.
    refs: u32,
    /// Shareable modules are in the cache under `hash`, with their text for the equality check.
    shared: Option<(u64, Box<str>)>,
}

#[derive(Default)]
pub struct Modules {
    slots: Vec<Option<Loaded>>,
    /// Worker module id → slot.
    ids: FxHashMap<u32, usize>,
    /// PTX hash → slots of shareable modules with that hash.
    cache: FxHashMap<u64, Vec<usize>>,
    next_id: u32,
    idle: usize,
}

// SAFETY: module and function handles are plain driver handles usable from any thread.
unsafe impl Send for Modules {}

impl Modules {
    pub fn new() -> Modules {
        Modules {
            next_id: 1,
            ..Modules::default()
        }
    }

    /// Module ids held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Kernel `index` (in the order the load answered with) of module `id`: unknown ids and
    /// indexes past the module's kernels are `InvalidArgument`.
    pub fn kernel(&mut self, id: u32, index: u32) -> Result<&mut Kernel, BackendError> {
        let no_module = || {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!("no module with id {id}"),
            )
        };
        let slot = *self.ids.get(&id).ok_or_else(no_module)?;
        let m = self.slots[slot].as_mut().ok_or_else(no_module)?;
        let count = m.functions.len();
        m.functions.get_mut(index as usize).ok_or_else(|| {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!("module {id} has {count} kernels: no kernel {index}"),
            )
        })
    }

    /// The name of kernel `index` of module `id`, if both exist.
    pub fn kernel_name(&self, id: u32, index: u32) -> Option<&str> {
        let slot = *self.ids.get(&id)?;
        let k = self
            .slots
            .get(slot)?
            .as_ref()?
            .functions
            .get(index as usize)?;
        Some(&k.name)
    }

    fn fresh_id(&mut self) -> Result<u32, BackendError> {
        if self.ids.len() >= MAX_MODULES {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!("a worker holds at most {MAX_MODULES} modules"),
            ));
        }
        let id = self.next_id;
        self.next_id = id
            .checked_add(1)
            .ok_or_else(|| BackendError::new(ErrorKind::OutOfMemory, "module ids exhausted"))?;
        Ok(id)
    }

    /// A cached module with exactly this text, as a new id. No driver call.
    pub fn lookup(&mut self, ptx: &str) -> Result<Option<LoadedModule>, BackendError> {
        let h = fast_hash(ptx.as_bytes());
        let Some(slots) = self.cache.get(&h) else {
            return Ok(None);
        };
        let Some(&slot) = slots.iter().find(|&&s| {
            self.slots[s]
                .as_ref()
                .and_then(|m| m.shared.as_ref())
                .is_some_and(|(_, text)| &**text == ptx)
        }) else {
            return Ok(None);
        };
        let id = self.fresh_id()?;
        let Some(m) = self.slots[slot].as_mut() else {
            return Ok(None);
        };
        if m.refs == 0 {
            self.idle -= 1;
        }
        m.refs += 1;
        self.ids.insert(id, slot);
        Ok(Some(LoadedModule {
            id,
            kernels: m.kernels.clone(),
            variable_bytes: m.variable_bytes,
            text_bytes: ptx.len() as u64,
        }))
    }

    /// JIT-loads `ptx` (not in the cache; its header `header` passed the module check) and
    /// gives it a new id. The caller has drained the queue.
    pub fn load(
        &mut self,
        drv: &Driver,
        ptx: &str,
        header: &PtxHeader,
        target: &LoadTarget,
    ) -> Result<LoadedModule, BackendError> {
        let id = self.fresh_id()?;
        let module = jit(drv, ptx, header, target)?;
        self.admit(drv, id, module, ptx)
    }

    /// As [`Modules::load`], keeping the code compiled for the host's node-wide cache: the PTX
    /// goes through the driver's linker to a cubin, which is loaded and returned. Without the
    /// linker, or should the device refuse the cubin it just made, the PTX is JIT-loaded as by
    /// `load` and nothing is kept (an empty image): a bad image is never handed on.
    pub fn load_keeping(
        &mut self,
        drv: &Driver,
        ptx: &str,
        header: &PtxHeader,
        target: &LoadTarget,
    ) -> Result<(LoadedModule, Vec<u8>), BackendError> {
        let id = self.fresh_id()?;
        if let Some(api) = &drv.link {
            let cubin = link(drv, api, ptx, header, target)?;
            // A cubin lacking a kernel the PTX declares is not the PTX's code: JIT instead.
            if let Some(Ok(loaded)) =
                load_image(api, &cubin).map(|module| self.admit(drv, id, module, ptx))
            {
                return Ok((loaded, cubin));
            }
        }
        let module = jit(drv, ptx, header, target)?;
        Ok((self.admit(drv, id, module, ptx)?, Vec::new()))
    }

    /// Loads `image`, what an earlier load of exactly `ptx` compiled (from the host's node-wide
    /// cache), without JIT, under a new id; kernels from `ptx`, as every load. `Ok(None)` where
    /// the device refuses the image or it lacks a kernel the PTX declares (the caller then
    /// compiles the PTX), or without the driver's `cuModuleLoadData`.
    pub fn load_cached_image(
        &mut self,
        drv: &Driver,
        ptx: &str,
        image: &[u8],
    ) -> Result<Option<LoadedModule>, BackendError> {
        let Some(api) = &drv.link else {
            return Ok(None);
        };
        let id = self.fresh_id()?;
        let Some(module) = load_image(api, image) else {
            return Ok(None);
        };
        Ok(self.admit(drv, id, module, ptx).ok())
    }

    /// Resolves the kernels of `module`, just loaded from `ptx` (or from code compiled from
    /// it), and files it under `id`, in the cache where it is shareable. Unloads it on failure.
    fn admit(
        &mut self,
        drv: &Driver,
        id: u32,
        module: CuModule,
        ptx: &str,
    ) -> Result<LoadedModule, BackendError> {
        let loaded = match resolve(drv, module, ptx) {
            Ok(l) => l,
            Err(e) => {
                // SAFETY: the module just loaded; nothing refers to it.
                unsafe { (drv.module_unload)(module) };
                return Err(e);
            }
        };
        let shared = (!declares_module_globals(ptx))
            .then(|| (fast_hash(ptx.as_bytes()), Box::<str>::from(ptx)));
        let answer = LoadedModule {
            id,
            kernels: loaded.kernels.clone(),
            variable_bytes: loaded.variable_bytes,
            text_bytes: ptx.len() as u64,
        };
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        if let Some((h, _)) = &shared {
            self.cache.entry(*h).or_default().push(slot);
        }
        self.slots[slot] = Some(Loaded {
            shared,
            refs: 1,
            ..loaded
        });
        self.ids.insert(id, slot);
        Ok(answer)
    }

    /// Drops id `id`. Returns a module the caller must unload (after draining the queue), if this
    /// was its last id and it is not kept in the cache.
    pub fn release(&mut self, id: u32) -> Result<Option<CuModule>, BackendError> {
        let slot = self.ids.remove(&id).ok_or_else(|| {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!("no module with id {id}"),
            )
        })?;
        let Some(m) = self.slots[slot].as_mut() else {
            return Ok(None);
        };
        m.refs -= 1;
        if m.refs > 0 {
            return Ok(None);
        }
        if m.shared.is_some() && self.idle < MAX_IDLE {
            self.idle += 1;
            return Ok(None);
        }
        Ok(self.evict(slot))
    }

    fn evict(&mut self, slot: usize) -> Option<CuModule> {
        let m = self.slots[slot].take()?;
        if let Some((h, _)) = &m.shared {
            if let Some(v) = self.cache.get_mut(h) {
                v.retain(|&s| s != slot);
                if v.is_empty() {
                    self.cache.remove(h);
                }
            }
        }
        Some(m.module)
    }

    /// Ends every id (a worker's `reset` between leases) and returns the modules for the caller to
    /// unload: every module with `.global` variables, every one past [`MAX_IDLE`], and nothing
    /// else. Up to [`MAX_IDLE`] shareable modules stay loaded with no id, so a later lease on this
    /// worker loading the same PTX gets them by a lookup: their code holds no state a kernel can
    /// change, so nothing one lease did to them is seen by the next.
    pub fn end_ids(&mut self) -> Vec<CuModule> {
        self.ids.clear();
        self.idle = 0;
        let mut unload = Vec::new();
        for slot in 0..self.slots.len() {
            let keep = match &mut self.slots[slot] {
                None => continue,
                Some(m) if m.shared.is_some() && self.idle < MAX_IDLE => {
                    m.refs = 0;
                    true
                }
                Some(_) => false,
            };
            if keep {
                self.idle += 1;
            } else if let Some(m) = self.evict(slot) {
                unload.push(m);
            }
        }
        unload
    }

    /// Forgets every module and returns them all for the caller to unload.
    #[cfg(test)]
    pub fn take_all(&mut self) -> Vec<CuModule> {
        let all = self
            .slots
            .iter_mut()
            .filter_map(|s| s.take().map(|m| m.module))
            .collect();
        self.slots.clear();
        self.ids.clear();
        self.cache.clear();
        self.idle = 0;
        all
    }
}

/// `cuModuleLoadDataEx` with the JIT's error and info logs captured.
fn jit(
    drv: &Driver,
    ptx: &str,
    header: &PtxHeader,
    target: &LoadTarget,
) -> Result<CuModule, BackendError> {
    let text = c_text(ptx)?;
    let mut logs = JitLogs::new();
    let mut module: CuModule = std::ptr::null_mut();
    // SAFETY: NUL-terminated image; option arrays of equal length; log buffers live across the call.
    let r = unsafe {
        (drv.module_load_data_ex)(
            &mut module,
            text.as_ptr().cast(),
            logs.options.len() as u32,
            logs.options.as_mut_ptr(),
            logs.values.as_mut_ptr(),
        )
    };
    if r == CUDA_SUCCESS {
        return Ok(module);
    }
    let log = logs.text();
    Err(errors::load_error(
        drv,
        r,
        &log,
        header,
        &target.loader,
        target.driver_version,
    ))
}

/// The PTX compiled to a cubin by the driver's linker (`cuLinkCreate` / `cuLinkAddData` /
/// `cuLinkComplete`): the code `cuModuleLoadDataEx` would JIT, as bytes the worker can hand on.
/// Refusals carry the JIT's logs and words, as [`jit`]'s do.
fn link(
    drv: &Driver,
    api: &LinkApi,
    ptx: &str,
    header: &PtxHeader,
    target: &LoadTarget,
) -> Result<Vec<u8>, BackendError> {
    let text = c_text(ptx)?;
    // The driver writes the log sizes back while the link state lives, so the logs outlive it
    // (it is destroyed below).
    let mut logs = JitLogs::new();
    let mut state: CuLinkState = std::ptr::null_mut();
    // SAFETY: option arrays of equal length, alive until the state is destroyed; a valid out-pointer.
    let r = unsafe {
        (api.create)(
            logs.options.len() as u32,
            logs.options.as_mut_ptr(),
            logs.values.as_mut_ptr(),
            &mut state,
        )
    };
    let mut cubin = Vec::new();
    let mut r = r;
    if r == CUDA_SUCCESS {
        let bytes = text.as_bytes_with_nul();
        // SAFETY: a live link state; NUL-terminated PTX of `bytes.len()` bytes (the driver only
        // reads it); a NUL-terminated name; no per-input options.
        r = unsafe {
            (api.add_data)(
                state,
                CU_JIT_INPUT_PTX,
                bytes.as_ptr() as *mut c_void,
                bytes.len(),
                c"module.ptx".as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if r == CUDA_SUCCESS {
            let mut out: *mut c_void = std::ptr::null_mut();
            let mut size = 0usize;
            // SAFETY: a live link state with its input added; valid out-pointers.
            r = unsafe { (api.complete)(state, &mut out, &mut size) };
            if r == CUDA_SUCCESS && !out.is_null() {
                // SAFETY: the driver's cubin, `size` bytes, owned by the state until it is destroyed
                // (below): copied out first.
                cubin = unsafe { std::slice::from_raw_parts(out.cast::<u8>(), size) }.to_vec();
            }
        }
        // SAFETY: the state made above, destroyed once.
        unsafe { (api.destroy)(state) };
    }
    if r == CUDA_SUCCESS && !cubin.is_empty() {
        return Ok(cubin);
    }
    let log = logs.text();
    Err(errors::load_error(
        drv,
        if r == CUDA_SUCCESS {
            CUDA_ERROR_INVALID_IMAGE
        } else {
            r
        },
        &log,
        header,
        &target.loader,
        target.driver_version,
    ))
}

/// `cuModuleLoadData` of a compiled image; `None` where the device refuses it.
fn load_image(api: &LinkApi, image: &[u8]) -> Option<CuModule> {
    if !plausible_cubin(image) {
        return None;
    }
    let mut module: CuModule = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the image's bytes live across the call. The driver reads an
    // image by its own format (a cubin's ELF header gives its size); bytes that are not one are
    // refused (CUDA_ERROR_INVALID_IMAGE), which is what this answers for them.
    let r = unsafe { (api.module_load_data)(&mut module, image.as_ptr().cast()) };
    (r == CUDA_SUCCESS && !module.is_null()).then_some(module)
}

/// Whether `image` is an ELF64 file whose header tables lie inside it: what the linker makes
/// for a GPU. Anything else the driver would take for PTX text and read up to a NUL byte,
/// perhaps past the image's end; it is never passed to the driver.
pub fn plausible_cubin(image: &[u8]) -> bool {
    const HEADER: usize = 64;
    if image.len() < HEADER || image[..5] != [0x7f, b'E', b'L', b'F', 2] {
        return false;
    }
    let u16_at = |at: usize| u16::from_le_bytes([image[at], image[at + 1]]) as u64;
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&image[at..at + 8]);
        u64::from_le_bytes(b)
    };
    // (table offset, entry size, entries) of the program and the section header tables.
    let tables = [
        (u64_at(0x20), u16_at(0x36), u16_at(0x38)),
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c)),
    ];
    tables.iter().all(|&(off, size, n)| {
        n == 0
            || off
                .checked_add(size * n)
                .is_some_and(|end| end <= image.len() as u64)
    })
}

/// The JIT's error log, and its info log where that says something too.
/// The PTX as the driver takes it: NUL-terminated, so a NUL inside is refused.
fn c_text(ptx: &str) -> Result<CString, BackendError> {
    CString::new(ptx).map_err(|e| {
        BackendError::new(
            ErrorKind::LoadFailed,
            format!("the PTX contains a NUL byte at offset {}", e.nul_position()),
        )
    })
}

/// The JIT's error and info log buffers and the options that hand them to the driver (a module
/// load's or a link's).
struct JitLogs {
    error: Vec<u8>,
    info: Vec<u8>,
    options: [c_int; 4],
    /// Size options are passed by value in the pointer slot (cuda.h: "option values are cast to
    /// void*"); the driver writes the bytes used back into them.
    values: [*mut c_void; 4],
}

impl JitLogs {
    fn new() -> JitLogs {
        let mut error = vec![0u8; LOG_BYTES];
        let mut info = vec![0u8; LOG_BYTES];
        // The vectors' buffers stay where they are when the vectors move into the struct.
        let values = [
            error.as_mut_ptr().cast(),
            LOG_BYTES as *mut c_void,
            info.as_mut_ptr().cast(),
            LOG_BYTES as *mut c_void,
        ];
        JitLogs {
            error,
            info,
            options: [
                J::CU_JIT_ERROR_LOG_BUFFER as c_int,
                J::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES as c_int,
                J::CU_JIT_INFO_LOG_BUFFER as c_int,
                J::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES as c_int,
            ],
            values,
        }
    }

    /// What the driver wrote: the error log, the info log, or both.
    fn text(&self) -> String {
        let log = log_text(&self.error, self.values[1] as usize);
        let info = log_text(&self.info, self.values[3] as usize);
        match (log.trim().is_empty(), info.trim().is_empty()) {
            (true, _) => info,
            (false, true) => log,
            (false, false) => format!("{log}\n{info}"),
        }
    }
}

fn log_text(buf: &[u8], used: usize) -> String {
    let used = used.min(buf.len());
    let end = buf[..used].iter().position(|&b| b == 0).unwrap_or(used);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Reads the kernels' signatures and resolves each to a function.
fn resolve(drv: &Driver, module: CuModule, ptx: &str) -> Result<Loaded, BackendError> {
    let outline = tasklet_ptx::module_outline(ptx).map_err(|e| {
        BackendError::new(
            ErrorKind::LoadFailed,
            format!("the driver loaded the module, but its kernel signatures cannot be read (needed to lay out arguments): PTX line {}: {}", e.line, quote::text(&e.message)),
        )
    })?;
    let kernels = outline.kernels;
    let mut functions = Vec::with_capacity(kernels.len());
    for k in &kernels {
        let cname = CString::new(k.name.as_str()).map_err(|_| {
            BackendError::new(
                ErrorKind::LoadFailed,
                format!("kernel name {} contains a NUL byte", quote::name(&k.name)),
            )
        })?;
        let mut f: CuFunction = std::ptr::null_mut();
        // SAFETY: a loaded module, a NUL-terminated name, a valid out-pointer.
        let r = unsafe { (drv.module_get_function)(&mut f, module, cname.as_ptr()) };
        if r != CUDA_SUCCESS {
            return Err(BackendError::new(
                ErrorKind::LoadFailed,
                format!(
                    "kernel {} is declared in the PTX but the driver cannot find it: {}",
                    quote::name(&k.name),
                    drv.describe(r)
                ),
            ));
        }
        let (offsets, arg_bytes) = k.param_layout();
        functions.push(Kernel {
            function: f,
            name: Arc::from(k.name.as_str()),
            arg_bytes,
            param_offsets: offsets.into(),
            shared_optin: 0,
        });
    }
    Ok(Loaded {
        module,
        kernels: kernels.into(),
        variable_bytes: outline.variable_bytes,
        functions,
        refs: 0,
        shared: None,
    })
}

/// A fast 64-bit hash of the PTX text (the cache confirms hits by comparing the text).
pub fn fast_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(23) ^ w).wrapping_mul(K);
    }
    for &b in chunks.remainder() {
        h = (h.rotate_left(23) ^ b as u64).wrapping_mul(K);
    }
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module as `load` leaves it, without a driver: `module` stands for the handle.
    fn loaded(m: &mut Modules, ptx: &str, module: usize) -> u32 {
        let id = m.fresh_id().unwrap();
        let shared = (!declares_module_globals(ptx))
            .then(|| (fast_hash(ptx.as_bytes()), Box::<str>::from(ptx)));
        let slot = m.slots.len();
        if let Some((h, _)) = &shared {
            m.cache.entry(*h).or_default().push(slot);
        }
        m.slots.push(Some(Loaded {
            module: module as CuModule,
            kernels: Vec::new().into(),
            variable_bytes: 0,
            functions: Vec::new(),
            refs: 1,
            shared,
        }));
        m.ids.insert(id, slot);
        id
    }

    #[test]
    fn a_reset_keeps_only_shareable_modules_for_the_next_lease() {
        const PLAIN: &str = ".version 8.0\n.target sm_80\n.visible .entry k()\n{\n\tret;\n}\n";
        const STATEFUL: &str = ".version 8.0\n.target sm_80\n.global .u32 counter;\n";
        let mut m = Modules::new();
        let plain = loaded(&mut m, PLAIN, 0x10);
        loaded(&mut m, STATEFUL, 0x20);
        // One lease: the plain module also loaded twice more (lookups) and once unloaded.
        let again = m.lookup(PLAIN).unwrap().expect("a lookup").id;
        assert_ne!(again, plain);
        assert_eq!(m.release(again).unwrap(), None);

        let unloaded = m.end_ids();
        assert_eq!(
            unloaded,
            vec![0x20 as CuModule],
            "only the module with state is unloaded"
        );
        assert_eq!(m.len(), 0, "no id of the last lease lives on");
        assert!(m.kernel(plain, 0).is_err(), "the last lease's id is gone");
        // The next lease: the plain module by lookup under a new id, the stateful one not at all.
        let next = m
            .lookup(PLAIN)
            .unwrap()
            .expect("kept for the next lease")
            .id;
        assert!(next > again);
        assert!(m.lookup(STATEFUL).unwrap().is_none());
        assert_eq!(m.release(next).unwrap(), None);
        assert_eq!(m.take_all(), vec![0x10 as CuModule]);
    }

    #[test]
    fn a_reset_keeps_at_most_max_idle_modules() {
        let mut m = Modules::new();
        let texts: Vec<String> = (0..MAX_IDLE + 3)
            .map(|i| format!(".version 8.0\n.target sm_80\n// {i}\n"))
            .collect();
        for (i, t) in texts.iter().enumerate() {
            loaded(&mut m, t, i + 1);
        }
        assert_eq!(m.end_ids().len(), 3);
        let kept = texts
            .iter()
            .filter(|t| m.lookup(t).unwrap().is_some())
            .count();
        assert_eq!(kept, MAX_IDLE);
    }

    #[test]
    fn only_an_elf_image_that_holds_its_tables_goes_to_the_driver() {
        let mut elf = vec![0u8; 64];
        elf[..5].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2]);
        assert!(plausible_cubin(&elf));
        assert!(!plausible_cubin(&elf[..63]), "shorter than its header");
        assert!(
            !plausible_cubin(b".version 8.0\n.target sm_90\n"),
            "PTX text"
        );
        assert!(!plausible_cubin(&[]));
        // A section table of 2 entries of 64 bytes at 64: past the end, then inside it.
        elf[0x28] = 64;
        elf[0x3a] = 64;
        elf[0x3c] = 2;
        assert!(!plausible_cubin(&elf));
        elf.resize(64 + 128, 0);
        assert!(plausible_cubin(&elf));
        // An offset near the top of 64 bits does not wrap.
        elf[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(!plausible_cubin(&elf));
    }

    #[test]
    fn hash_differs_on_small_changes() {
        let a = fast_hash(b".version 8.0\n.target sm_80\n");
        let b = fast_hash(b".version 8.0\n.target sm_90\n");
        assert_ne!(a, b);
        assert_ne!(fast_hash(b""), fast_hash(b"\0"));
        assert_eq!(a, fast_hash(b".version 8.0\n.target sm_80\n"));
    }
}
