//! A PTX interpreter: parses and validates the PTX that nvcc and NVRTC emit, and runs its kernels
//! on the CPU with CUDA's execution model (grids of CTAs, warps of 32 lanes, shared memory,
//! barriers).
//!
//! Every memory access is bounds-checked against the allocations of a [`DeviceMemory`]; a kernel
//! can fault, deadlock or run past its step limit, and each of those is an [`ExecError`], never a
//! panic or an access outside the emulator's own buffers.
//!
//! Layout, in the order a module goes through it:
//!
//! - `lexer` → `parser`: PTX text to the syntax tree of `ast`.
//! - `lower`: validates the tree and turns it into the pre-decoded program of `ir` (memory
//!   layout, function bodies, one file per instruction family, linking).
//! - `exec`: runs a launch — CTA scheduling and barriers (`exec`), one warp's scheduling and
//!   instruction dispatch (`exec::warp`), then one file per instruction family mirroring `lower`'s,
//!   with the bit-level semantics in `exec::ops` and IEEE rounding in `float`.
//! - `memory`: device memory, shared by the host and every CTA of a launch.
//!
//! Beside them, `header` reads a module's `.version` and `.target` without parsing the rest, for
//! loaders that must refuse what a given driver and device would ([`PtxHeader`]).

mod ast;
mod exec;
mod float;
mod header;
mod ir;
mod lexer;
mod lower;
mod memory;
mod module_memory;
mod parser;

use std::fmt;

pub use header::{HeaderError, PtxHeader, PtxTarget, TargetVariant};
pub use memory::DeviceMemory;

/// CUDA's limit on a kernel's parameter space, in bytes (32 KiB less 4 the driver keeps).
pub const MAX_PARAM_BYTES: u32 = 32_764;

/// Bytes of `printf` output one launch may print, as the device's printf buffer holds (CUDA's
/// default `cudaLimitPrintfFifoSize`). Past it a launch's later `printf`s print nothing, and the
/// launch ends by saying on stderr how much was dropped ([`LaunchStats::printf_dropped`]): a
/// kernel cannot flood its host's log.
pub const PRINTF_BUFFER_BYTES: u64 = 1 << 20;

/// Bytes of the grid-wide workspace a cooperative launch
/// ([`Module::launch_cooperative_by_index`]) has: what CUDA's `grid.sync()` uses (a 32-bit
/// arrival counter at offset 4), rounded up to the 16 bytes a GPU's driver gives at least.
pub const GRID_WORKSPACE_BYTES: u64 = 16;

/// A parse or validation failure, naming the PTX line (1-based) and the offending construct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LoadError {
    pub line: u32,
    pub message: String,
}

/// A [`LoadError`] at `line`: what the lexer, the parser and the lowering all report.
pub(crate) fn load_error(line: u32, message: impl Into<String>) -> LoadError {
    LoadError {
        line,
        message: message.into(),
    }
}

/// One `.param` of an `.entry`, as the launch argument block lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    /// Bytes (for `.b8 name[N]` arrays: N times the element size).
    pub size: u32,
    /// Alignment in bytes (from `.align`, else the element size).
    pub align: u32,
    /// True when the parameter is declared `.u64`/`.b64`/`.s64` and may carry a device pointer.
    pub pointer_sized: bool,
    /// The declared type's kind; with `size`, the scalar type (`.f32` is `Float` of 4 bytes).
    pub ty: ParamType,
    /// True when the kernel uses the parameter as a global memory address: loaded whole, its
    /// value reaches the address of a global or generic load, store, atomic or copy (see
    /// `lower::address_use` for how that is found, and what is not). Always `false` for a module
    /// whose bodies were not parsed, and for anything but a 64-bit integer parameter.
    pub used_as_address: bool,
}

/// The kind of a kernel parameter's declared type. Its width is the parameter's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// `.u8` … `.u64`.
    Unsigned,
    /// `.s8` … `.s64`.
    Signed,
    /// `.b8` … `.b128` and `.pred`: untyped bits.
    Bits,
    /// `.f16`, `.bf16`, `.f32`, `.f64`.
    Float,
    /// An array (`.align 8 .b8 s[16]`, how a by-value struct is declared), a vector (`.v2 .f32`)
    /// or packed halves (`.f16x2`): bytes whose layout only the kernel knows.
    Aggregate,
}

impl ParamType {
    /// The type of a declaration of element type `ty` (without the dot), `vec` elements per
    /// vector and `dims` array dimensions.
    pub(crate) fn of(ty: &str, vec: u32, array: bool) -> ParamType {
        if vec > 1 || array {
            return ParamType::Aggregate;
        }
        match ty {
            "pred" => ParamType::Bits,
            "f16" | "bf16" | "f32" | "f64" => ParamType::Float,
            t if t.starts_with('u') => ParamType::Unsigned,
            t if t.starts_with('s') => ParamType::Signed,
            t if t.starts_with('b') => ParamType::Bits,
            _ => ParamType::Aggregate,
        }
    }

    /// The PTX spelling of this type at `size` bytes (`.u32`, `.b8[12]`), for messages.
    pub fn ptx(self, size: u32) -> String {
        let bits = size.saturating_mul(8);
        match self {
            ParamType::Unsigned => format!(".u{bits}"),
            ParamType::Signed => format!(".s{bits}"),
            ParamType::Bits => format!(".b{bits}"),
            ParamType::Float => format!(".f{bits}"),
            ParamType::Aggregate => format!(".b8[{size}]"),
        }
    }
}

/// A kernel (`.entry`) of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    pub name: String,
    pub params: Vec<ParamInfo>,
}

impl KernelInfo {
    /// Byte offset of each parameter in the argument block, and the block's total size. Modules
    /// from [`Module::parse`] and [`entry_signatures`] always fit in [`MAX_PARAM_BYTES`]; for a
    /// hand-built list past that, see [`KernelInfo::checked_param_layout`].
    pub fn param_layout(&self) -> (Vec<u32>, u32) {
        self.checked_param_layout(u32::MAX).unwrap_or_default()
    }

    /// As [`KernelInfo::param_layout`], or `None` when the block would pass `max_bytes` (or
    /// overflow).
    pub fn checked_param_layout(&self, max_bytes: u32) -> Option<(Vec<u32>, u32)> {
        let mut offsets = Vec::with_capacity(self.params.len());
        let mut end = 0u32;
        for p in &self.params {
            let at = end.checked_next_multiple_of(p.align.max(1))?;
            offsets.push(at);
            end = at.checked_add(p.size).filter(|&e| e <= max_bytes)?;
        }
        Some((offsets, end))
    }
}

/// A parsed, validated PTX module, ready to launch. Immutable and shareable between threads.
///
/// The module's own `.global` variables live with the module (as they live with a loaded module
/// in a CUDA context): they keep their values from one launch to the next.
pub struct Module {
    prog: ir::Program,
    kernels: Vec<KernelInfo>,
    /// Argument-block size of each kernel, parallel to `kernels`.
    arg_sizes: Vec<u32>,
    module_data: memory::Region,
    variable_bytes: u64,
}

impl Module {
    /// Parses and validates a whole module. An unsupported instruction or modifier anywhere is an
    /// error naming its line, even in a kernel never launched.
    pub fn parse(ptx: &str) -> Result<Module, LoadError> {
        let toks = lexer::lex(ptx)?;
        let ast = parser::parse(&toks)?;
        let variable_bytes = module_memory::variable_bytes(&toks)?;
        let (prog, kernels) = lower::lower(&ast)?;
        let module_data =
            memory::Region::zeroed(prog.module_data.len().max(8) as u64).map_err(|e| {
                LoadError {
                    line: 1,
                    message: format!("module variables: {e}"),
                }
            })?;
        module_data.write_bytes(0, &prog.module_data);
        let arg_sizes = kernels.iter().map(|k| k.param_layout().1).collect();
        Ok(Module {
            prog,
            kernels,
            arg_sizes,
            module_data,
            variable_bytes,
        })
    }

    /// The module's kernels, in source order.
    pub fn kernels(&self) -> &[KernelInfo] {
        &self.kernels
    }

    /// Bytes of device memory the module's own `.global` variables take in each loaded copy
    /// (as [`ModuleOutline::variable_bytes`]).
    pub fn variable_bytes(&self) -> u64 {
        self.variable_bytes
    }
}

/// What a module declares, as a loader that does not run it needs it: its kernels (as
/// [`entry_signatures`]) and the device memory its own variables take in each loaded copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleOutline {
    pub kernels: Vec<KernelInfo>,
    /// Its `.global` variables, at module scope and in function bodies, each aligned as
    /// declared (and at least one byte): what each loaded copy of the module holds of device
    /// memory beyond its code. `.const` ones are left out: a module whose `.const` variables
    /// pass the 64 KiB constant bank is refused.
    pub variable_bytes: u64,
}

/// [`entry_signatures`], with the bytes of the module's own variables.
pub fn module_outline(ptx: &str) -> Result<ModuleOutline, LoadError> {
    let toks = lexer::lex(ptx)?;
    let ast = outline_ast(&toks)?;
    Ok(ModuleOutline {
        kernels: lower::entry_signatures(&ast)?,
        variable_bytes: module_memory::variable_bytes(&toks)?,
    })
}

/// Lists a module's `.entry` kernels and their parameters without validating (or even parsing)
/// the instruction bodies: for PTX this emulator cannot run (e.g. `mma`, textures) whose argument
/// blocks must still be laid out, as the CUDA backend does. Same code as [`Module::parse`] for
/// everything it does read (lexer, module-level declarations, function headers, parameter
/// layout), so for a module `Module::parse` accepts the result equals [`Module::kernels`].
///
/// Errors: malformed tokens anywhere, malformed declarations or headers, unbalanced braces in a
/// body, kernel parameters of unknown type or bad size. [`ParamInfo::used_as_address`] is found
/// where the bodies parse (they need not validate).
pub fn entry_signatures(ptx: &str) -> Result<Vec<KernelInfo>, LoadError> {
    let toks = lexer::lex(ptx)?;
    lower::entry_signatures(&outline_ast(&toks)?)
}

/// The module as [`entry_signatures`] reads it: bodies are parsed (not validated) where they
/// can be, to see which parameters are used as addresses; a body this parser cannot read leaves
/// that unknown (`used_as_address` false), and the module is read for its signatures alone.
fn outline_ast(toks: &[lexer::Token<'_>]) -> Result<ast::ModuleAst, LoadError> {
    match parser::parse(toks) {
        Ok(full) => Ok(full),
        Err(_) => parser::parse_signatures(toks),
    }
}

/// The declared type of every parameter of every `.entry`, as PTX writes it (`.u64`, `.f32`,
/// `.align 8 .b8[12]`), parallel to [`entry_signatures`] (same kernels, same order). For showing
/// signatures to people (`tasklet ptx check`); layouts come from [`KernelInfo`].
pub fn entry_param_types(ptx: &str) -> Result<Vec<Vec<String>>, LoadError> {
    let toks = lexer::lex(ptx)?;
    let ast = parser::parse_signatures(&toks)?;
    Ok(lower::entry_param_types(&ast))
}

/// Why a memory operation on [`DeviceMemory`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    #[error("no allocation covers device address {addr:#x}..+{len}")]
    OutOfBounds { addr: u64, len: u64 },
    #[error("{addr:#x} is not the start of an allocation")]
    NotAllocated { addr: u64 },
    #[error("cannot allocate {bytes} bytes: {reason}")]
    AllocFailed { bytes: u64, reason: String },
}

/// How to launch one kernel.
#[derive(Debug, Clone)]
pub struct LaunchParams<'a> {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory bytes per CTA (for `.extern .shared` arrays).
    pub shared_mem_bytes: u32,
    /// The argument block, laid out as [`KernelInfo::param_layout`] says.
    pub args: &'a [u8],
    /// Most lane-instructions the whole launch may execute before it stops with
    /// [`ExecError::StepLimit`]; stands in for a GPU kernel deadline. `u64::MAX` for no limit.
    /// An instruction executed by k lanes of a warp counts k.
    pub step_limit: u64,
    /// Worker threads for CTAs (0: one per available core).
    pub threads: usize,
}

/// Where in a launch something happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// PTX source line (1-based).
    pub line: u32,
    pub ctaid: [u32; 3],
    pub tid: [u32; 3],
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PTX line {}, block ({},{},{}), thread ({},{},{})",
            self.line,
            self.ctaid[0],
            self.ctaid[1],
            self.ctaid[2],
            self.tid[0],
            self.tid[1],
            self.tid[2]
        )
    }
}

/// Why a launch failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// Refused before running: unknown kernel, bad grid/block, argument block of the wrong size,
    /// too much shared memory.
    #[error("invalid launch: {0}")]
    InvalidLaunch(String),
    /// The kernel faulted: out-of-bounds or misaligned access, barrier deadlock, warp-op
    /// membership error, trap.
    #[error("kernel fault at {site}: {message}")]
    Fault { site: Site, message: String },
    /// The launch executed `step_limit` lane-instructions without finishing.
    #[error("step limit of {limit} lane-instructions reached at {site}")]
    StepLimit { site: Site, limit: u64 },
}

/// What a finished launch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Lane-instructions executed.
    pub lane_instructions: u64,
    /// Bytes of `printf` output dropped because the launch's printf buffer was full
    /// ([`PRINTF_BUFFER_BYTES`]); 0 when everything printed.
    pub printf_dropped: u64,
}

impl Module {
    /// Runs kernel number `kernel` (its index in [`Module::kernels`]) to completion against
    /// `memory`. Text printed by `vprintf` goes to the process's stderr, at most
    /// [`PRINTF_BUFFER_BYTES`] of it per launch.
    pub fn launch_by_index(
        &self,
        kernel: usize,
        memory: &DeviceMemory,
        params: &LaunchParams<'_>,
    ) -> Result<LaunchStats, ExecError> {
        let Some(&arg_size) = self.arg_sizes.get(kernel) else {
            return Err(ExecError::InvalidLaunch(format!(
                "the module has {} kernels: no kernel {kernel}",
                self.kernels.len()
            )));
        };
        exec::launch(
            &self.prog,
            &self.module_data,
            kernel,
            memory,
            params,
            arg_size,
            exec::Env::default(),
        )
    }

    /// Runs kernel number `kernel` as a cooperative launch (`cuLaunchCooperativeKernel`), whose
    /// blocks may wait for each other (cooperative groups' `this_grid().sync()`): every CTA runs
    /// at once, each on a thread of its own, and the launch has a grid-wide workspace of
    /// [`GRID_WORKSPACE_BYTES`] zeroed bytes, an allocation of `memory` made for the launch and
    /// freed when it ends, whose address `%envreg1` (high 32 bits) and `%envreg2` (low) hold.
    ///
    /// Refused ([`ExecError::InvalidLaunch`]) as [`Module::launch_by_index`] refuses a launch,
    /// and when `params.threads` (0: one per core) is fewer than the grid's CTAs: they could not
    /// all be resident at once, and a grid-wide barrier would wait forever for the CTAs left
    /// unscheduled. The caller bounds the threads, and with them the grid.
    pub fn launch_cooperative_by_index(
        &self,
        kernel: usize,
        memory: &DeviceMemory,
        params: &LaunchParams<'_>,
    ) -> Result<LaunchStats, ExecError> {
        self.check_launch(kernel, params)?;
        let ctas = params.grid.iter().map(|&d| u64::from(d)).product::<u64>();
        let threads = match params.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t,
        };
        if (threads as u64) < ctas {
            return Err(ExecError::InvalidLaunch(format!(
                "a cooperative launch runs all its blocks at once, one thread each: {ctas} \
                 blocks cannot be resident on {threads} threads; launch fewer blocks or give \
                 the launch at least {ctas} threads"
            )));
        }
        exec::check_all_at_once(&self.prog, kernel, params, self.arg_sizes[kernel], ctas)?;
        let workspace = memory.alloc(GRID_WORKSPACE_BYTES).map_err(|e| {
            ExecError::InvalidLaunch(format!("the grid's workspace for grid.sync: {e}"))
        })?;
        let ran = exec::launch(
            &self.prog,
            &self.module_data,
            kernel,
            memory,
            params,
            // `check_launch` found it.
            self.arg_sizes[kernel],
            exec::Env {
                grid_workspace: workspace,
            },
        );
        // Whatever the outcome. An error only means `memory` was cleared meanwhile, which freed
        // it already.
        let _ = memory.free(workspace);
        ran
    }

    /// Checks a launch of kernel number `kernel` as [`Module::launch_by_index`] does before it
    /// runs anything (the [`ExecError::InvalidLaunch`] it would return), without running it: for
    /// a caller that runs the launch elsewhere (on a thread of its own) and must refuse it at
    /// once.
    pub fn check_launch(&self, kernel: usize, params: &LaunchParams<'_>) -> Result<(), ExecError> {
        let Some(&arg_size) = self.arg_sizes.get(kernel) else {
            return Err(ExecError::InvalidLaunch(format!(
                "the module has {} kernels: no kernel {kernel}",
                self.kernels.len()
            )));
        };
        exec::check(&self.prog, kernel, params, arg_size)
    }

    /// [`Module::launch_by_index`] for the kernel named `kernel`.
    pub fn launch(
        &self,
        kernel: &str,
        memory: &DeviceMemory,
        params: &LaunchParams<'_>,
    ) -> Result<LaunchStats, ExecError> {
        let index = self
            .kernels
            .iter()
            .position(|k| k.name == kernel)
            .ok_or_else(|| {
                ExecError::InvalidLaunch(format!("no kernel named `{kernel}` in this module"))
            })?;
        self.launch_by_index(index, memory, params)
    }
}
