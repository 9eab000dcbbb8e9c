//! NVRTC (CUDA C → PTX), found and loaded at run time, one way for every backend.
//!
//! The worker binary does not link NVRTC: it starts, and serves PTX, on machines without it.
//! [`compile`] dlopens `libnvrtc` on first use and resolves the handful of entry points it needs
//! itself (no cudarc). The library is searched for, in order:
//!
//! 1. `$TASKLET_NVRTC`, a path to the library file. When set it is the only candidate: a wrong
//!    path is reported, never silently replaced by another NVRTC.
//! 2. The plain sonames `libnvrtc.so`, `libnvrtc.so.13`, `libnvrtc.so.12` (the dynamic linker's
//!    search: `LD_LIBRARY_PATH`, ldconfig's cache).
//! 3. `/usr/local/cuda/lib64/libnvrtc.so*` (a CUDA toolkit install).
//! 4. The `nvidia-cuda-nvrtc` / `nvidia-cuda-nvrtc-cu12` wheels' `nvidia/{cu13,cuda_nvrtc,cu12}/lib/`
//!    in the site-packages (or dist-packages) of `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `$PYTHONHOME`,
//!    `~/.local`, pyenv's versions, `/usr/local` and `/usr` (globbed, not asked of Python: starting
//!    an interpreter is too slow for a worker).
//! 5. The repo-local `target/nvrtc/*/` that `kernels/install-nvrtc.sh` fills (CI runs it), found
//!    from the running executable's `target/` ancestor and from this crate's build-time location.
//!
//! NVRTC 13 is preferred over 12 wherever both are present. The wheels' `libnvrtc` loads its
//! `libnvrtc-builtins` from its own directory, so no `LD_LIBRARY_PATH` is needed.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The architecture [`compile`] targets when the options name none. The emulator runs sm_80 PTX
/// (the corpus is nvcc `-arch=sm_80`, the lowest architecture CUDA 13 compiles for), and
/// `compute_80` PTX also JITs on every newer GPU; the cuda backend passes its device's own
/// architecture instead (`--gpu-architecture=compute_90`, …) to use newer instructions.
pub const DEFAULT_ARCH_OPTION: &str = "--gpu-architecture=compute_80";

/// What to install when NVRTC is missing; part of [`NvrtcError::NotFound`]'s message.
pub const INSTALL_HINT: &str =
    "install NVRTC with `pip install nvidia-cuda-nvrtc` (in a checkout: \
    `kernels/install-nvrtc.sh`), or set TASKLET_NVRTC to the path of libnvrtc.so.13 (or .12)";

/// Why [`compile`] produced no PTX.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvrtcError {
    /// No loadable libnvrtc. `searched` lists each place looked in (and why a file found there
    /// would not load).
    #[error("NVRTC not found: {hint}. Searched: {list}", hint = INSTALL_HINT, list = .searched.join("; "))]
    NotFound { searched: Vec<String> },
    /// A libnvrtc was loaded but lacks an entry point (too old, or not NVRTC).
    #[error("{library}: missing NVRTC entry point {symbol}: {message}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
        message: String,
    },
    /// The source did not compile; `log` is NVRTC's program log (errors with line numbers).
    #[error("NVRTC compile failed:\n{log}")]
    Compile { log: String },
    /// The source or an option contains a NUL byte.
    #[error("{0} contains a NUL byte")]
    InvalidInput(&'static str),
    /// An NVRTC call failed other than by a compile error (out of memory, bad option, …).
    #[error("{call} failed: {message} (nvrtcResult {code}){extra}", extra = log_suffix(.log))]
    Api {
        call: &'static str,
        code: i32,
        message: String,
        log: String,
    },
}

fn log_suffix(log: &str) -> String {
    if log.is_empty() {
        String::new()
    } else {
        format!("\n{log}")
    }
}

type Program = *mut c_void;
type Res = c_int;
const NVRTC_SUCCESS: Res = 0;
const NVRTC_ERROR_INVALID_OPTION: Res = 5;
const NVRTC_ERROR_COMPILATION: Res = 6;

struct Api {
    path: String,
    version: (i32, i32),
    _lib: libloading::Library,
    _builtins: Option<libloading::Library>,
    get_error_string: Option<unsafe extern "C" fn(Res) -> *const c_char>,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Res,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Res,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Res,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> Res,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Res,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Res,
    destroy: unsafe extern "C" fn(*mut Program) -> Res,
}

// SAFETY: the function pointers are plain C entry points; NVRTC is thread-safe for calls on
// distinct programs, and each `compile` uses its own program.
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

static API: OnceLock<Result<Api, NvrtcError>> = OnceLock::new();

fn api() -> Result<&'static Api, NvrtcError> {
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// The loaded library's path and NVRTC version (major, minor), loading it if needed.
pub fn library() -> Result<(String, (i32, i32)), NvrtcError> {
    api().map(|a| (a.path.clone(), a.version))
}

/// Whether a loadable NVRTC is present.
pub fn available() -> bool {
    api().is_ok()
}

/// Compiles one CUDA C translation unit to PTX. `options` are NVRTC's (`-DN=4`, `-std=c++17`,
/// `--gpu-architecture=compute_90`, …); when none of them names an architecture,
/// [`DEFAULT_ARCH_OPTION`] is added. Kernels meant to be launched by name should be
/// `extern "C"` (NVRTC mangles C++ names otherwise).
pub fn compile(source: &str, options: &[String]) -> Result<String, NvrtcError> {
    compile_for(source, options, DEFAULT_ARCH_OPTION)
}

/// [`compile`] with `default_arch` (an option such as `--gpu-architecture=compute_90`) added
/// instead when none of `options` names an architecture: how a backend compiles for its device.
pub fn compile_for(
    source: &str,
    options: &[String],
    default_arch: &str,
) -> Result<String, NvrtcError> {
    let api = api()?;
    let src = CString::new(source).map_err(|_| NvrtcError::InvalidInput("the source"))?;
    let names_arch = options.iter().any(|o| {
        let o = o.trim_start_matches('-');
        o.starts_with("gpu-architecture") || o.starts_with("arch")
    });
    let mut opts = Vec::with_capacity(options.len() + 1);
    if !names_arch {
        opts.push(CString::new(default_arch).map_err(|_| NvrtcError::InvalidInput("an option"))?);
    }
    for o in options {
        opts.push(CString::new(o.as_str()).map_err(|_| NvrtcError::InvalidInput("an option"))?);
    }
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let name = c"tasklet.cu";

    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings; no headers (count 0, null arrays).
    let r = unsafe {
        (api.create)(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    api.check("nvrtcCreateProgram", r, None)?;
    let guard = ProgramGuard { api, prog };

    // SAFETY: `prog` is live; `opt_ptrs` points at `opts`, alive across the call.
    let r = unsafe { (api.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
    if r == NVRTC_ERROR_COMPILATION {
        let log = guard.log().unwrap_or_else(|e| format!("(no log: {e})"));
        return Err(NvrtcError::Compile { log });
    }
    if r != NVRTC_SUCCESS {
        let log = if r == NVRTC_ERROR_INVALID_OPTION {
            format!("options: {}", options.join(" "))
        } else {
            guard.log().unwrap_or_default()
        };
        return Err(api.error("nvrtcCompileProgram", r, log));
    }

    let mut size = 0usize;
    // SAFETY: live program, valid out pointer.
    api.check(
        "nvrtcGetPTXSize",
        unsafe { (api.ptx_size)(prog, &mut size) },
        None,
    )?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` holds the `size` bytes NVRTC said it writes (including the NUL).
    api.check(
        "nvrtcGetPTX",
        unsafe { (api.ptx)(prog, buf.as_mut_ptr().cast()) },
        None,
    )?;
    drop(guard);
    Ok(c_buf_to_string(buf))
}

/// Destroys the program on every path out of [`compile`].
struct ProgramGuard {
    api: &'static Api,
    prog: Program,
}

impl ProgramGuard {
    fn log(&self) -> Result<String, NvrtcError> {
        let mut size = 0usize;
        // SAFETY: live program, valid out pointer.
        self.api.check(
            "nvrtcGetProgramLogSize",
            unsafe { (self.api.log_size)(self.prog, &mut size) },
            None,
        )?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: `buf` holds `size` bytes, as NVRTC asked for.
        self.api.check(
            "nvrtcGetProgramLog",
            unsafe { (self.api.log)(self.prog, buf.as_mut_ptr().cast()) },
            None,
        )?;
        Ok(c_buf_to_string(buf))
    }
}

impl Drop for ProgramGuard {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        unsafe { (self.api.destroy)(&mut self.prog) };
    }
}

fn c_buf_to_string(mut buf: Vec<u8>) -> String {
    if let Some(nul) = buf.iter().position(|&b| b == 0) {
        buf.truncate(nul);
    }
    String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl Api {
    fn error(&self, call: &'static str, code: Res, log: String) -> NvrtcError {
        let message = self
            .get_error_string
            .map(|f| {
                // SAFETY: nvrtcGetErrorString returns a static string (or null).
                let p = unsafe { f(code) };
                if p.is_null() {
                    String::new()
                } else {
                    // SAFETY: NUL-terminated static string.
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "NVRTC error".into());
        NvrtcError::Api {
            call,
            code,
            message,
            log,
        }
    }

    fn check(&self, call: &'static str, code: Res, log: Option<String>) -> Result<(), NvrtcError> {
        if code == NVRTC_SUCCESS {
            Ok(())
        } else {
            Err(self.error(call, code, log.unwrap_or_default()))
        }
    }
}

fn load() -> Result<Api, NvrtcError> {
    let mut searched = Vec::new();
    for cand in candidates(&mut searched) {
        // SAFETY: loading NVRTC runs its initialisers, which have no preconditions.
        let builtins = preload_builtins(&cand);
        match unsafe { libloading::Library::new(&cand) } {
            Ok(lib) => return resolve(lib, builtins, cand.to_string_lossy().into_owned()),
            Err(e) => {
                // A bare soname the linker does not know is the common case: say only "searched".
                if cand.is_absolute() {
                    searched.push(format!("{} (would not load: {e})", cand.display()));
                }
            }
        }
    }
    Err(NvrtcError::NotFound { searched })
}

/// NVRTC dlopens `libnvrtc-builtins.so.<major>.<minor>` by soname at compile time, which finds
/// nothing when the library came from a wheel directory the linker does not search. Loading the
/// builtins beside `lib` by path first makes that lookup succeed (glibc matches an already-loaded
/// object by its soname), as CuPy does. None for a bare soname (the linker finds both).
fn preload_builtins(lib: &Path) -> Option<libloading::Library> {
    let dir = lib.parent().filter(|d| !d.as_os_str().is_empty())?;
    let name = lib.file_name()?.to_str()?;
    let major = name
        .strip_prefix("libnvrtc.so.")
        .and_then(|v| v.split('.').next())
        .unwrap_or("");
    let prefix = format!("libnvrtc-builtins.so.{major}");
    let file = sorted_entries(dir, |n| n.starts_with(&prefix))
        .into_iter()
        .next()?;
    // SAFETY: the builtins library has no initialiser preconditions.
    unsafe { libloading::Library::new(file) }.ok()
}

fn resolve(
    lib: libloading::Library,
    builtins: Option<libloading::Library>,
    path: String,
) -> Result<Api, NvrtcError> {
    macro_rules! sym {
        ($name:literal) => {{
            // SAFETY: the type is NVRTC's documented signature for this symbol.
            let s = unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| {
                NvrtcError::MissingSymbol {
                    library: path.clone(),
                    symbol: $name,
                    message: e.to_string(),
                }
            })?;
            *s
        }};
    }
    let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Res = sym!("nvrtcVersion");
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out pointers.
    let r = unsafe { version_fn(&mut major, &mut minor) };
    if r != NVRTC_SUCCESS {
        return Err(NvrtcError::Api {
            call: "nvrtcVersion",
            code: r,
            message: "NVRTC error".into(),
            log: String::new(),
        });
    }
    // SAFETY: documented signature; optional (used for messages only).
    let get_error_string =
        unsafe { lib.get::<unsafe extern "C" fn(Res) -> *const c_char>(b"nvrtcGetErrorString\0") }
            .ok()
            .map(|s| *s);
    Ok(Api {
        version: (major, minor),
        get_error_string,
        create: sym!("nvrtcCreateProgram"),
        compile: sym!("nvrtcCompileProgram"),
        ptx_size: sym!("nvrtcGetPTXSize"),
        ptx: sym!("nvrtcGetPTX"),
        log_size: sym!("nvrtcGetProgramLogSize"),
        log: sym!("nvrtcGetProgramLog"),
        destroy: sym!("nvrtcDestroyProgram"),
        path,
        _lib: lib,
        _builtins: builtins,
    })
}

/// Every candidate library, in search order; `searched` gets a line per place looked in.
fn candidates(searched: &mut Vec<String>) -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os("TASKLET_NVRTC").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        searched.push(format!("TASKLET_NVRTC={}", p.display()));
        if !p.exists() {
            searched.push(format!("{} (no such file)", p.display()));
            return Vec::new();
        }
        // An absolute path so a load failure is reported with its reason.
        return vec![std::path::absolute(&p).unwrap_or(p)];
    }
    let mut out: Vec<PathBuf> = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
        .iter()
        .map(PathBuf::from)
        .collect();
    searched.push("the dynamic linker's path (libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12)".into());

    let mut dirs = vec![PathBuf::from("/usr/local/cuda/lib64")];
    searched.push("/usr/local/cuda/lib64".into());

    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            prefixes.push(v.into());
        }
    }
    if let Some(h) = &home {
        prefixes.push(h.join(".local"));
    }
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".pyenv")));
    if let Some(root) = pyenv {
        prefixes.extend(sorted_entries(&root.join("versions"), |_| true));
    }
    prefixes.push("/usr/local".into());
    prefixes.push("/usr".into());
    let mut site_dirs = Vec::new();
    for prefix in &prefixes {
        for libdir in sorted_entries(&prefix.join("lib"), |n| n.starts_with("python3")) {
            for sp in ["site-packages", "dist-packages"] {
                site_dirs.push(libdir.join(sp));
            }
        }
    }
    site_dirs.push("/usr/lib/python3/dist-packages".into());
    for sd in &site_dirs {
        dirs.extend(wheel_lib_dirs(sd));
    }
    searched.push(format!(
        "nvidia/{{cu13,cuda_nvrtc,cu12}}/lib in the site-packages of {}",
        prefixes
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));

    for target in repo_target_dirs() {
        let root = target.join("nvrtc");
        searched.push(format!(
            "{}/*/nvidia/*/lib (kernels/install-nvrtc.sh)",
            root.display()
        ));
        for install in sorted_entries(&root, |n| !n.ends_with(".tmp"))
            .into_iter()
            .rev()
        {
            dirs.extend(wheel_lib_dirs(&install));
        }
    }

    // NVRTC 13 before 12 across the whole search, then by search order.
    let mut files: Vec<(u32, usize, PathBuf)> = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        for f in sorted_entries(d, |n| n.starts_with("libnvrtc.so")) {
            let name = f
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let major = name["libnvrtc.so".len()..]
                .trim_start_matches('.')
                .split('.')
                .next()
                .and_then(|m| m.parse().ok());
            // Unversioned names sort after versioned ones (they are usually links to them).
            files.push((u32::MAX - major.unwrap_or(0), i, f));
        }
    }
    files.sort();
    out.extend(files.into_iter().map(|(_, _, f)| f));
    out.dedup();
    out
}

/// `dir/nvidia/{cu13,cuda_nvrtc,cu12}/lib` that exist.
fn wheel_lib_dirs(dir: &Path) -> Vec<PathBuf> {
    ["cu13", "cuda_nvrtc", "cu12"]
        .iter()
        .map(|s| dir.join("nvidia").join(s).join("lib"))
        .filter(|d| d.is_dir())
        .collect()
}

/// Entries of `dir` whose file name passes `keep`, sorted; empty when `dir` can't be read.
fn sorted_entries(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// Cargo `target/` directories this binary may belong to: the nearest `target` ancestor of the
/// running executable, and the workspace's as seen when this crate was built.
fn repo_target_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(t) = exe
            .ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "target"))
        {
            out.push(t.to_path_buf());
        }
    }
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        out.push(t.into());
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    if let Ok(t) = built.canonicalize() {
        out.push(t);
    }
    let mut seen = Vec::new();
    out.retain(|p| {
        let c = p.canonicalize().unwrap_or_else(|_| p.clone());
        let new = !seen.contains(&c);
        seen.push(c);
        new
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_message_says_what_to_install() {
        let e = NvrtcError::NotFound {
            searched: vec!["/a".into(), "/b".into()],
        };
        let m = e.to_string();
        assert!(m.contains("pip install nvidia-cuda-nvrtc"), "{m}");
        assert!(m.contains("TASKLET_NVRTC"), "{m}");
        assert!(m.contains("/a; /b"), "{m}");
    }

    #[test]
    fn compiles_or_reports_not_found() {
        match compile(
            "extern \"C\" __global__ void k(int *p) { p[threadIdx.x] = 7; }",
            &[],
        ) {
            Ok(ptx) => {
                assert!(ptx.contains(".entry k("), "{ptx}");
                assert!(ptx.contains(".target sm_80"), "{ptx}");
            }
            Err(e @ NvrtcError::NotFound { .. }) => eprintln!("skipped: NVRTC not found ({e})"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn compile_error_carries_the_log() {
        match compile(
            "extern \"C\" __global__ void k(int *p) { p[0] = undefined_name; }",
            &[],
        ) {
            Err(NvrtcError::Compile { log }) => assert!(log.contains("undefined_name"), "{log}"),
            Err(e @ NvrtcError::NotFound { .. }) => eprintln!("skipped: NVRTC not found ({e})"),
            other => panic!("{other:?}"),
        }
    }
}
