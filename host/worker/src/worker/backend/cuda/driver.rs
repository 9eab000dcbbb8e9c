//! The CUDA driver API as this backend calls it: a table of entry points resolved once from the
//! `libcuda` that cudarc finds (`cudarc::driver::sys::culib`), each returning the raw `CUresult`.
//!
//! Why not call cudarc's `sys` functions directly: they return `CUresult` as a Rust enum, and a
//! driver newer than cudarc's headers may return a code the enum does not have — undefined
//! behaviour the moment it is returned. Here every result is a plain integer, and unknown codes
//! are named by the driver itself (`cuGetErrorName`). A missing entry point is an error at start
//! (cudarc's loader panics instead), and a missing `libcuda` is checked for before cudarc is asked
//! to load it (cudarc panics on that too).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuEvent = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuDevicePtr = u64;
pub type CuGraph = *mut c_void;
pub type CuGraphExec = *mut c_void;
pub type CuGraphNode = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_DEINITIALIZED: CuResult = 4;
pub const CUDA_ERROR_STUB_LIBRARY: CuResult = 34;
pub const CUDA_ERROR_DEVICE_UNAVAILABLE: CuResult = 46;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CuResult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CuResult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CuResult = 201;
pub const CUDA_ERROR_NO_BINARY_FOR_GPU: CuResult = 209;
pub const CUDA_ERROR_ECC_UNCORRECTABLE: CuResult = 214;
pub const CUDA_ERROR_INVALID_PTX: CuResult = 218;
pub const CUDA_ERROR_NVLINK_UNCORRECTABLE: CuResult = 220;
pub const CUDA_ERROR_JIT_COMPILER_NOT_FOUND: CuResult = 221;
pub const CUDA_ERROR_UNSUPPORTED_PTX_VERSION: CuResult = 222;
pub const CUDA_ERROR_JIT_COMPILATION_DISABLED: CuResult = 223;
pub const CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND: CuResult = 302;
pub const CUDA_ERROR_SHARED_OBJECT_INIT_FAILED: CuResult = 303;
pub const CUDA_ERROR_INVALID_HANDLE: CuResult = 400;
pub const CUDA_ERROR_ILLEGAL_STATE: CuResult = 401;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub const CUDA_ERROR_NOT_READY: CuResult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CuResult = 700;
pub const CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: CuResult = 701;
pub const CUDA_ERROR_LAUNCH_TIMEOUT: CuResult = 702;
pub const CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING: CuResult = 703;
pub const CUDA_ERROR_CONTEXT_IS_DESTROYED: CuResult = 709;
pub const CUDA_ERROR_ASSERT: CuResult = 710;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CuResult = 712;
pub const CUDA_ERROR_HARDWARE_STACK_ERROR: CuResult = 714;
pub const CUDA_ERROR_ILLEGAL_INSTRUCTION: CuResult = 715;
pub const CUDA_ERROR_MISALIGNED_ADDRESS: CuResult = 716;
pub const CUDA_ERROR_INVALID_ADDRESS_SPACE: CuResult = 717;
pub const CUDA_ERROR_INVALID_PC: CuResult = 718;
pub const CUDA_ERROR_LAUNCH_FAILED: CuResult = 719;
pub const CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: CuResult = 720;
pub const CUDA_ERROR_TENSOR_MEMORY_LEAK: CuResult = 721;
pub const CUDA_ERROR_NOT_PERMITTED: CuResult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;
pub const CUDA_ERROR_SYSTEM_NOT_READY: CuResult = 802;
pub const CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: CuResult = 803;
pub const CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: CuResult = 804;
pub const CUDA_ERROR_UNKNOWN: CuResult = 999;

/// `CU_LAUNCH_PARAM_*` markers of `cuLaunchKernel`'s `extra` array (pointer-valued in cuda.h).
pub const CU_LAUNCH_PARAM_END: *mut c_void = std::ptr::null_mut();
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void = std::ptr::without_provenance_mut(1);
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: *mut c_void = std::ptr::without_provenance_mut(2);

macro_rules! driver_api {
    ($( $field:ident = $sym:literal : fn($($arg:ty),* $(,)?); )*) => {
        /// The driver entry points this backend uses, resolved once.
        #[allow(non_snake_case)]
        pub struct Driver {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CuResult, )*
            /// Graph launches, where the driver has them (and they are not turned off).
            pub graphs: Option<GraphApi>,
            /// The stream-ordered allocator, where the driver has it (and it is not turned off).
            pub pools: Option<PoolApi>,
            /// Memory shared between processes, where the driver has it.
            pub ipc: Option<IpcApi>,
            /// The linker, through which a load keeps the code it compiled.
            pub link: Option<LinkApi>,
        }

        impl Driver {
            fn resolve(lib: &'static libloading::Library) -> Result<Driver, String> {
                Ok(Driver {
                    graphs: GraphApi::resolve(lib),
                    pools: PoolApi::resolve(lib),
                    ipc: IpcApi::resolve(lib),
                    link: LinkApi::resolve(lib),
                    $( $field: {
                        // SAFETY: the symbol is the documented driver entry point of this exact
                        // signature (cuda.h, versioned names as cuda.h maps them); the library is
                        // never unloaded ('static), so the pointer stays valid.
                        let sym = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> CuResult>(concat!($sym, "\0").as_bytes())
                        };
                        match sym {
                            Ok(f) => *f,
                            Err(e) => return Err(format!(
                                "the CUDA driver (libcuda) lacks the entry point {}: {e}; the driver is too old for this worker (it needs CUDA 11.7 or newer)",
                                $sym
                            )),
                        }
                    }, )*
                })
            }
        }
    };
}

driver_api! {
    init = "cuInit": fn(c_uint);
    driver_get_version = "cuDriverGetVersion": fn(*mut c_int);
    get_error_name = "cuGetErrorName": fn(CuResult, *mut *const c_char);
    get_error_string = "cuGetErrorString": fn(CuResult, *mut *const c_char);
    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    device_get = "cuDeviceGet": fn(*mut CuDevice, c_int);
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CuDevice);
    device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, CuDevice);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CuDevice);
    device_get_uuid = "cuDeviceGetUuid_v2": fn(*mut [u8; 16], CuDevice);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut CuContext, CuDevice);
    ctx_set_current = "cuCtxSetCurrent": fn(CuContext);
    ctx_synchronize = "cuCtxSynchronize": fn();
    mem_get_info = "cuMemGetInfo_v2": fn(*mut usize, *mut usize);
    mem_alloc = "cuMemAlloc_v2": fn(*mut CuDevicePtr, usize);
    mem_free = "cuMemFree_v2": fn(CuDevicePtr);
    memset_d8_async = "cuMemsetD8Async": fn(CuDevicePtr, u8, usize, CuStream);
    memcpy_htod_async = "cuMemcpyHtoDAsync_v2": fn(CuDevicePtr, *const c_void, usize, CuStream);
    memcpy_dtoh_async = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, CuDevicePtr, usize, CuStream);
    memcpy_dtod_async = "cuMemcpyDtoDAsync_v2": fn(CuDevicePtr, CuDevicePtr, usize, CuStream);
    mem_host_register = "cuMemHostRegister_v2": fn(*mut c_void, usize, c_uint);
    mem_host_unregister = "cuMemHostUnregister": fn(*mut c_void);
    module_load_data_ex = "cuModuleLoadDataEx": fn(*mut CuModule, *const c_void, c_uint, *mut c_int, *mut *mut c_void);
    module_unload = "cuModuleUnload": fn(CuModule);
    module_get_function = "cuModuleGetFunction": fn(*mut CuFunction, CuModule, *const c_char);
    func_get_attribute = "cuFuncGetAttribute": fn(*mut c_int, c_int, CuFunction);
    func_set_attribute = "cuFuncSetAttribute": fn(CuFunction, c_int, c_int);
    launch_kernel = "cuLaunchKernel": fn(CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream, *mut *mut c_void, *mut *mut c_void);
    launch_cooperative_kernel = "cuLaunchCooperativeKernel": fn(CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream, *mut *mut c_void);
    event_create = "cuEventCreate": fn(*mut CuEvent, c_uint);
    event_record = "cuEventRecord": fn(CuEvent, CuStream);
    event_query = "cuEventQuery": fn(CuEvent);
    event_destroy = "cuEventDestroy_v2": fn(CuEvent);
    event_elapsed_time = "cuEventElapsedTime": fn(*mut f32, CuEvent, CuEvent);
    stream_query = "cuStreamQuery": fn(CuStream);
    stream_synchronize = "cuStreamSynchronize": fn(CuStream);
    stream_create = "cuStreamCreate": fn(*mut CuStream, c_uint);
    stream_destroy = "cuStreamDestroy_v2": fn(CuStream);
    stream_wait_event = "cuStreamWaitEvent": fn(CuStream, CuEvent, c_uint);
    stream_write_value32 = "cuStreamWriteValue32_v2": fn(CuStream, CuDevicePtr, c_uint, c_uint);
    mem_host_get_device_pointer = "cuMemHostGetDevicePointer_v2": fn(*mut CuDevicePtr, *mut c_void, c_uint);
    occupancy_max_active_blocks = "cuOccupancyMaxActiveBlocksPerMultiprocessor": fn(*mut c_int, CuFunction, c_int, usize);
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (cuda.h, CUDA 12.0+): one kernel node of a graph.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KernelNodeParams {
    pub function: CuFunction,
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem_bytes: c_uint,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    /// A `CUkernel` (library API); null: `function` is used.
    pub kernel: *mut c_void,
    /// Null: the context `function` belongs to.
    pub ctx: CuContext,
}

/// The CUDA graph entry points the backend launches bursts through (`graphs`). Optional: a driver
/// without them (before CUDA 12.0) launches one `cuLaunchKernel` at a time, as does a worker
/// started with `TASKLET_CUDA_GRAPHS=0`.
pub struct GraphApi {
    pub create: unsafe extern "C" fn(*mut CuGraph, c_uint) -> CuResult,
    pub add_kernel_node: unsafe extern "C" fn(
        *mut CuGraphNode,
        CuGraph,
        *const CuGraphNode,
        usize,
        *const KernelNodeParams,
    ) -> CuResult,
    pub instantiate: unsafe extern "C" fn(*mut CuGraphExec, CuGraph, u64) -> CuResult,
    pub set_kernel_node:
        unsafe extern "C" fn(CuGraphExec, CuGraphNode, *const KernelNodeParams) -> CuResult,
    pub launch: unsafe extern "C" fn(CuGraphExec, CuStream) -> CuResult,
    pub exec_destroy: unsafe extern "C" fn(CuGraphExec) -> CuResult,
    pub destroy: unsafe extern "C" fn(CuGraph) -> CuResult,
}

/// The environment variable that turns graph launches off (`0`); read once per worker.
pub const GRAPHS_ENV: &str = "TASKLET_CUDA_GRAPHS";

impl GraphApi {
    fn resolve(lib: &'static libloading::Library) -> Option<GraphApi> {
        if std::env::var_os(GRAPHS_ENV).is_some_and(|v| v == "0") {
            return None;
        }
        /// SAFETY (of each use): `name` is the documented driver entry point whose signature is
        /// the field's type (cuda.h's versioned names); the library stays loaded ('static).
        unsafe fn sym<T: Copy>(lib: &'static libloading::Library, name: &[u8]) -> Option<T> {
            // SAFETY: see above.
            unsafe { lib.get::<T>(name).ok().map(|f| *f) }
        }
        // SAFETY: each name and type pair as in cuda.h (CUDA 12.0+).
        unsafe {
            Some(GraphApi {
                create: sym(lib, b"cuGraphCreate\0")?,
                add_kernel_node: sym(lib, b"cuGraphAddKernelNode_v2\0")?,
                instantiate: sym(lib, b"cuGraphInstantiateWithFlags\0")?,
                set_kernel_node: sym(lib, b"cuGraphExecKernelNodeSetParams_v2\0")?,
                launch: sym(lib, b"cuGraphLaunch\0")?,
                exec_destroy: sym(lib, b"cuGraphExecDestroy\0")?,
                destroy: sym(lib, b"cuGraphDestroy\0")?,
            })
        }
    }
}

/// The stream-ordered allocator's entry points (CUDA 11.2+), through which the backend allocates
/// and frees device memory where the device supports memory pools: `cuMemFree` waits for every
/// running kernel of the context, a persistent kernel's too, where `cuMemFreeAsync` on the
/// worker's stream waits for nothing on another stream (`benches/probes/beside_persistent.rs`).
/// Optional: without them, or with `TASKLET_CUDA_POOLS=0`, `cuMemAlloc` and `cuMemFree`.
pub struct PoolApi {
    pub alloc_async: unsafe extern "C" fn(*mut CuDevicePtr, usize, CuStream) -> CuResult,
    pub free_async: unsafe extern "C" fn(CuDevicePtr, CuStream) -> CuResult,
}

/// The environment variable that turns the stream-ordered allocator off (`0`).
pub const POOLS_ENV: &str = "TASKLET_CUDA_POOLS";

impl PoolApi {
    fn resolve(lib: &'static libloading::Library) -> Option<PoolApi> {
        if std::env::var_os(POOLS_ENV).is_some_and(|v| v == "0") {
            return None;
        }
        // SAFETY: the documented entry points of exactly these signatures (cuda.h, CUDA 11.2+);
        // the library stays loaded ('static).
        unsafe {
            Some(PoolApi {
                alloc_async: *lib.get(b"cuMemAllocAsync\0").ok()?,
                free_async: *lib.get(b"cuMemFreeAsync\0").ok()?,
            })
        }
    }
}

/// `CUipcMemHandle`: an allocation's handle as another process opens it, 64 opaque bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IpcMemHandle(pub [u8; IPC_HANDLE_BYTES]);

pub const IPC_HANDLE_BYTES: usize = 64;

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`: open another GPU's memory with peer access turned on
/// for it (the copy then goes GPU to GPU, over NVLink where there is one).
pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// The entry points through which workers copy between each other's device memory (a copy
/// between the GPUs of a group lease): one exports an allocation of `cuMemAlloc`, the other
/// maps it for the copy (`cuMemcpyAsync` infers the direction from the unified addresses) and
/// unmaps it. Optional: without them, copies between workers are staged through host memory.
pub struct IpcApi {
    pub get_mem_handle: unsafe extern "C" fn(*mut IpcMemHandle, CuDevicePtr) -> CuResult,
    pub open_mem_handle: unsafe extern "C" fn(*mut CuDevicePtr, IpcMemHandle, c_uint) -> CuResult,
    pub close_mem_handle: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    pub memcpy_async: unsafe extern "C" fn(CuDevicePtr, CuDevicePtr, usize, CuStream) -> CuResult,
}

impl IpcApi {
    fn resolve(lib: &'static libloading::Library) -> Option<IpcApi> {
        // SAFETY: the documented entry points of exactly these signatures (cuda.h: the handle is
        // passed by value, a 64-byte struct); the library stays loaded ('static).
        unsafe {
            Some(IpcApi {
                get_mem_handle: *lib.get(b"cuIpcGetMemHandle\0").ok()?,
                open_mem_handle: *lib.get(b"cuIpcOpenMemHandle_v2\0").ok()?,
                close_mem_handle: *lib.get(b"cuIpcCloseMemHandle\0").ok()?,
                memcpy_async: *lib.get(b"cuMemcpyAsync\0").ok()?,
            })
        }
    }
}

/// `CUlinkState`: a link in progress.
pub type CuLinkState = *mut c_void;

/// `CU_JIT_INPUT_PTX` (`CUjitInputType`): the data added to a link is PTX text.
pub const CU_JIT_INPUT_PTX: c_int = 1;

/// The driver's linker, through which a module's PTX is compiled to a cubin the worker keeps
/// (for the host's node-wide module cache) before loading it, and the load of such a cubin.
/// Optional: without them a load JITs as `cuModuleLoadDataEx` does and keeps nothing.
pub struct LinkApi {
    pub create:
        unsafe extern "C" fn(c_uint, *mut c_int, *mut *mut c_void, *mut CuLinkState) -> CuResult,
    pub add_data: unsafe extern "C" fn(
        CuLinkState,
        c_int,
        *mut c_void,
        usize,
        *const c_char,
        c_uint,
        *mut c_int,
        *mut *mut c_void,
    ) -> CuResult,
    pub complete: unsafe extern "C" fn(CuLinkState, *mut *mut c_void, *mut usize) -> CuResult,
    pub destroy: unsafe extern "C" fn(CuLinkState) -> CuResult,
    pub module_load_data: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
}

impl LinkApi {
    fn resolve(lib: &'static libloading::Library) -> Option<LinkApi> {
        // SAFETY: the documented entry points of exactly these signatures (cuda.h: the `_v2`
        // names cuda.h maps cuLinkCreate and cuLinkAddData to; enums passed as int); the library
        // stays loaded ('static).
        unsafe {
            Some(LinkApi {
                create: *lib.get(b"cuLinkCreate_v2\0").ok()?,
                add_data: *lib.get(b"cuLinkAddData_v2\0").ok()?,
                complete: *lib.get(b"cuLinkComplete\0").ok()?,
                destroy: *lib.get(b"cuLinkDestroy\0").ok()?,
                module_load_data: *lib.get(b"cuModuleLoadData\0").ok()?,
            })
        }
    }
}

// SAFETY: plain function pointers into a library that stays loaded; the driver API is
// thread-safe.
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

/// The worker's one stream, a plain handle the serving thread and the watchdog both use.
#[derive(Debug, Clone, Copy)]
pub struct WorkStream(pub CuStream);

// SAFETY: a stream handle is a plain value the driver accepts from any thread of the process.
unsafe impl Send for WorkStream {}
unsafe impl Sync for WorkStream {}

/// `CU_STREAM_NON_BLOCKING`: no implicit ordering with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;

/// What a worker on a machine without a usable driver says (the CLI prints it when `--backend
/// auto` falls back to the emulator).
pub const NO_DRIVER: &str = "no CUDA driver found (libcuda.so.1 not loadable)";

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

/// The driver, loaded and initialised (`cuInit`) on first use.
pub fn driver() -> Result<&'static Driver, String> {
    DRIVER.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Driver, String> {
    // SAFETY: tries to dlopen libcuda under cudarc's candidate names; no other effect.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(NO_DRIVER.to_owned());
    }
    // Load every kernel when its module loads, not at its first launch (the default since CUDA
    // 12.2 is lazy): a module's JIT errors then come from `cuModuleLoadDataEx` with its log, and
    // a first launch costs what every launch costs. An operator's explicit setting wins. Read by
    // `cuInit`; set before any other thread of this process exists.
    if std::env::var_os("CUDA_MODULE_LOADING").is_none() {
        std::env::set_var("CUDA_MODULE_LOADING", "EAGER");
    }
    // SAFETY: present (checked just above), so cudarc's loader does not panic; it keeps the
    // library loaded for the life of the process.
    let lib = unsafe { cudarc::driver::sys::culib() };
    let d = Driver::resolve(lib)?;
    // SAFETY: plain driver call.
    let r = unsafe { (d.init)(0) };
    if r != CUDA_SUCCESS {
        return Err(init_error(&d, r));
    }
    Ok(d)
}

fn init_error(d: &Driver, r: CuResult) -> String {
    let what = describe_with(d, r);
    let hint = match r {
        CUDA_ERROR_NO_DEVICE => "no CUDA-capable device is visible to this process (check CUDA_VISIBLE_DEVICES, the container's GPU access, and `nvidia-smi`)",
        CUDA_ERROR_INSUFFICIENT_DRIVER => "the installed NVIDIA kernel driver is older than its libcuda; reinstall matching driver packages",
        CUDA_ERROR_STUB_LIBRARY => "the libcuda found is the CUDA toolkit's link stub, not the driver's; put the driver's libcuda.so.1 first on the library path",
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => "the libcuda and the kernel module come from different driver versions; reboot or reinstall the driver",
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => "a CUDA forward-compatibility libcuda is in use on a GPU that does not support it; remove it from the library path",
        CUDA_ERROR_SYSTEM_NOT_READY => "the GPU system is not ready (fabric manager not running on an NVSwitch system?)",
        CUDA_ERROR_DEVICE_UNAVAILABLE => "the GPU is busy or unavailable (exclusive-process compute mode held by another process?)",
        _ => "the CUDA driver could not initialise",
    };
    format!("cuInit failed: {what}: {hint}")
}

const CUDA_ERROR_INSUFFICIENT_DRIVER: CuResult = 35;

impl Driver {
    /// `NAME: description (code N)` for a driver result, e.g.
    /// `CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered (code 700)`.
    pub fn describe(&self, r: CuResult) -> String {
        describe_with(self, r)
    }
}

fn describe_with(d: &Driver, r: CuResult) -> String {
    let text =
        |f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult| -> Option<String> {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: the driver writes a pointer to a static string or fails (unknown code).
            let ok = unsafe { f(r, &mut p) } == CUDA_SUCCESS && !p.is_null();
            // SAFETY: NUL-terminated static string owned by the driver.
            ok.then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
    match (text(d.get_error_name), text(d.get_error_string)) {
        (Some(name), Some(desc)) => format!("{name}: {desc} (code {r})"),
        (Some(name), None) => format!("{name} (code {r})"),
        _ => format!("CUDA error code {r} (unknown to this driver)"),
    }
}

/// A failed driver call: which call and its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallError {
    pub call: &'static str,
    pub code: CuResult,
}

/// Turns a driver result into `Ok` or a [`CallError`] naming the call.
#[inline]
pub fn check(call: &'static str, r: CuResult) -> Result<(), CallError> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CallError { call, code: r })
    }
}
