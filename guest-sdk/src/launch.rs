//! Kernel launches: configuration, arguments and the launch builder.

use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::error::{quoted, Error, Result};
use crate::raw::sessions as raw;
use crate::session::{Kernel, Module, Session};

/// Grid and block dimensions of a launch, and its dynamic shared memory.
///
/// ```
/// use tasklet_gpu::LaunchConfig;
///
/// let c = LaunchConfig::for_num_elems(1000);
/// assert_eq!((c.grid, c.block, c.shared_mem_bytes), ((4, 1, 1), (256, 1, 1), 0));
///
/// let tiled = LaunchConfig { grid: (8, 8, 1), block: (16, 16, 1), shared_mem_bytes: 0 }
///     .with_shared_mem(2 * 16 * 16 * 4);
/// assert_eq!(tiled.shared_mem_bytes, 2048);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid, (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads in a block, (x, y, z).
    pub block: (u32, u32, u32),
    /// Bytes of dynamic shared memory per block.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// The block size [`LaunchConfig::for_num_elems`] uses.
    pub const BLOCK: u32 = 256;

    /// One thread per element in one dimension: blocks of [`LaunchConfig::BLOCK`] (256) threads,
    /// and enough blocks to cover `n` (at least one, so that `n = 0` is still a valid launch; the
    /// kernel must guard `i < n`, as it must for the last partial block anyway).
    pub const fn for_num_elems(n: u32) -> LaunchConfig {
        let blocks = n.div_ceil(Self::BLOCK);
        LaunchConfig {
            grid: (if blocks == 0 { 1 } else { blocks }, 1, 1),
            block: (Self::BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// `grid` blocks of `block` threads, in one dimension.
    pub const fn linear(grid: u32, block: u32) -> LaunchConfig {
        LaunchConfig {
            grid: (grid, 1, 1),
            block: (block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// The same, with `bytes` of dynamic shared memory per block.
    pub const fn with_shared_mem(mut self, bytes: u32) -> LaunchConfig {
        self.shared_mem_bytes = bytes;
        self
    }

    /// Threads per block.
    pub const fn threads_per_block(&self) -> u64 {
        self.block.0 as u64 * self.block.1 as u64 * self.block.2 as u64
    }

    /// Threads in the whole grid.
    pub const fn total_threads(&self) -> u128 {
        self.grid.0 as u128
            * self.grid.1 as u128
            * self.grid.2 as u128
            * self.threads_per_block() as u128
    }

    /// The WIT record.
    pub const fn to_raw(self) -> raw::LaunchConfig {
        raw::LaunchConfig {
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
        }
    }
}

impl From<LaunchConfig> for raw::LaunchConfig {
    fn from(c: LaunchConfig) -> Self {
        c.to_raw()
    }
}

/// One kernel argument, ready to launch: a typed scalar, a buffer (at a byte offset), or a by-value
/// struct as bytes. Usually made implicitly through [`KernelArg`] by [`Launch::arg`].
#[derive(Debug)]
pub struct Arg<'a> {
    pub(crate) raw: raw::KernelArg<'a>,
    /// The session a buffer argument belongs to, checked at launch.
    pub(crate) owner: Option<&'a Session<'a>>,
}

impl<'a> Arg<'a> {
    /// A pointer to element 0 of `buf`.
    pub fn buffer<T: Pod>(buf: &'a DeviceBuffer<'_, T>) -> Arg<'a> {
        Arg::buffer_at_byte(buf, 0)
    }

    /// A pointer to element `index` of `buf` (which may be `buf.len()`, one past the end); the
    /// byte offset is `index * size_of::<T>()`. The host checks it against the buffer's size;
    /// [`Launch::arg_at_elem`] also checks it before calling the host.
    pub fn buffer_at_elem<T: Pod>(buf: &'a DeviceBuffer<'_, T>, index: usize) -> Arg<'a> {
        // An index whose byte offset overflows is past any buffer: the host refuses it as such.
        let byte_offset = (index as u64).saturating_mul(core::mem::size_of::<T>() as u64);
        Arg::buffer_at_byte(buf, byte_offset)
    }

    /// A pointer `byte_offset` bytes into `buf`, for a pointer that does not fall on an element
    /// (a `char*` into a buffer of `u32`s); the host checks the offset.
    pub fn buffer_at_byte<T: Pod>(buf: &'a DeviceBuffer<'_, T>, byte_offset: u64) -> Arg<'a> {
        Arg {
            raw: raw::KernelArg::Buffer(raw::BufferArg {
                buffer: buf.raw(),
                offset: byte_offset,
            }),
            owner: Some(buf.session()),
        }
    }

    /// A by-value parameter given as the bytes of a `#[repr(C)]` plain-old-data value; the host
    /// checks the length against the kernel's declared parameter. For a struct whose C layout
    /// has padding (which `Pod` forbids), build it with [`CStruct`](crate::CStruct).
    pub fn bytes_of<P: Pod>(value: &P) -> Arg<'a> {
        Arg::from_raw(raw::KernelArg::Bytes(bytemuck::bytes_of(value).to_vec()))
    }

    /// Wraps a WIT argument as is (no ownership check by the SDK; the host still checks).
    pub fn from_raw(raw: raw::KernelArg<'a>) -> Arg<'a> {
        Arg { raw, owner: None }
    }

    /// The WIT argument.
    pub fn into_raw(self) -> raw::KernelArg<'a> {
        self.raw
    }
}

/// A value that can be passed as a kernel parameter: the scalars `i32`, `u32`, `i64`, `u64`,
/// `f32`, `f64` (typed, so the host can check them against the kernel's parameters), a
/// `&DeviceBuffer` (a pointer to its first element), or an [`Arg`].
///
/// A pointer parameter (`float*`) takes a buffer; an `unsigned` takes a `u32`, an
/// `unsigned long long` or `size_t` a `u64`. Implement it for your own types by returning one of
/// these (e.g. `Arg::bytes_of(self)` for a by-value struct).
pub trait KernelArg<'a> {
    /// The argument.
    fn into_arg(self) -> Arg<'a>;
}

macro_rules! scalar_args {
    ($($t:ty => $case:ident),* $(,)?) => {$(
        impl<'a> KernelArg<'a> for $t {
            fn into_arg(self) -> Arg<'a> {
                Arg::from_raw(raw::KernelArg::$case(self))
            }
        }
    )*};
}

scalar_args!(i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

impl<'a, 's, T: Pod> KernelArg<'a> for &'a DeviceBuffer<'s, T> {
    fn into_arg(self) -> Arg<'a> {
        Arg::buffer(self)
    }
}

impl<'a> KernelArg<'a> for Arg<'a> {
    fn into_arg(self) -> Arg<'a> {
        self
    }
}

/// A kernel launch being built, from [`Session::launch`]; nothing happens until [`Launch::run`].
///
/// Arguments are given in the kernel's parameter order. The SDK checks that buffers and the module
/// belong to the launching session; the host checks everything again, and the arguments against
/// the kernel's declared parameters.
///
/// Offsets into buffers are in elements ([`Launch::arg_at_elem`]), as everywhere in the SDK;
/// the one method that takes bytes says so in its name ([`Launch::arg_at_byte`]).
///
/// ```no_run
/// use tasklet_gpu::{LaunchConfig, Pod, Zeroable};
/// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
/// # let module = session.load_ptx("")?;
/// #[derive(Clone, Copy, Pod, Zeroable)]
/// #[bytemuck(crate = "tasklet_gpu::bytemuck")]
/// #[repr(C)]
/// struct Params { scale: f32, bias: f32 }
///
/// let x = session.alloc::<f32>(4096)?;
/// session
///     .launch(&module, "affine")
///     .config(LaunchConfig::for_num_elems(2048))
///     .arg(&x)                     // float* x
///     .arg_at_elem(&x, 2048)       // float* y = x + 2048
///     .arg_bytes(&Params { scale: 2.0, bias: 1.0 })
///     .arg(2048u32)                // unsigned n
///     .run()?;
/// session.sync()?;
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
#[must_use = "a launch does nothing until .run()"]
pub struct Launch<'a> {
    session: &'a Session<'a>,
    target: Target<'a>,
    config: Option<LaunchConfig>,
    args: Vec<raw::KernelArg<'a>>,
    /// The stream to queue the launch on ([`Launch::on`]); the session's own queue if none.
    stream: Option<&'a crate::Stream<'a>>,
    /// The first mistake found while building, reported by `run`.
    error: Option<Error>,
}

/// What a launch runs: a kernel named in a module, or a kernel handle.
enum Target<'a> {
    Named(&'a Module<'a>, &'a str),
    Handle(&'a Kernel<'a>),
}

impl<'a> Launch<'a> {
    pub(crate) fn new(session: &'a Session<'a>, module: &'a Module<'a>, kernel: &'a str) -> Self {
        Launch::with_target(session, module, Target::Named(module, kernel))
    }

    pub(crate) fn of_kernel(session: &'a Session<'a>, kernel: &'a Kernel<'a>) -> Self {
        Launch::with_target(session, kernel.module(), Target::Handle(kernel))
    }

    fn with_target(session: &'a Session<'a>, module: &'a Module<'a>, target: Target<'a>) -> Self {
        let mut launch = Launch {
            session,
            target,
            config: None,
            args: Vec::new(),
            stream: None,
            error: None,
        };
        if !session.is(module.session()) {
            let name = launch.kernel_name();
            launch.fail(Error::InvalidArgument(format!(
                "launch of {}: the module belongs to another session",
                quoted(&name)
            )));
        }
        launch
    }

    /// The kernel's name, for messages (asked of the host for a handle: only on a mistake).
    fn kernel_name(&self) -> String {
        match self.target {
            Target::Named(_, name) => name.to_owned(),
            Target::Handle(k) => k.name(),
        }
    }

    fn fail(&mut self, e: Error) {
        self.error.get_or_insert(e);
    }

    /// Queues the launch on `stream` (of the launching session) instead of the session's own
    /// queue. Only a kernel handle ([`Session::launch_kernel`]) launches on a stream.
    pub fn on(mut self, stream: &'a crate::Stream<'a>) -> Self {
        if !self.session.is(stream.session()) {
            self.fail(Error::InvalidArgument(format!(
                "launch of {}: the stream belongs to another session",
                quoted(&self.kernel_name())
            )));
        }
        self.stream = Some(stream);
        self
    }

    /// Sets the grid, block and shared memory (required).
    pub fn config(mut self, config: LaunchConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Appends an argument (see [`KernelArg`]).
    pub fn arg(mut self, arg: impl KernelArg<'a>) -> Self {
        let Arg { raw, owner } = arg.into_arg();
        if let Some(owner) = owner {
            if !self.session.is(owner) {
                let i = self.args.len();
                self.fail(Error::InvalidArgument(format!(
                    "launch of {}: argument {i} is a buffer of another session",
                    quoted(&self.kernel_name())
                )));
            }
        }
        self.args.push(raw);
        self
    }

    /// Appends a pointer to element `index` of `buf`; `index` may be at most `buf.len()` (one
    /// past the end, as in C).
    pub fn arg_at_elem<T: Pod>(mut self, buf: &'a DeviceBuffer<'_, T>, index: usize) -> Self {
        if index > buf.len() {
            let i = self.args.len();
            self.fail(Error::OutOfBounds(format!(
                "launch of {}: argument {i} points at element {index} of a buffer of {} elements",
                quoted(&self.kernel_name()),
                buf.len()
            )));
        }
        self.arg(Arg::buffer_at_elem(buf, index))
    }

    /// Appends a pointer `byte_offset` bytes into `buf`, for a pointer that does not fall on an
    /// element; the offset may be at most the buffer's size in bytes.
    pub fn arg_at_byte<T: Pod>(mut self, buf: &'a DeviceBuffer<'_, T>, byte_offset: u64) -> Self {
        if byte_offset > buf.size_bytes() {
            let i = self.args.len();
            self.fail(Error::OutOfBounds(format!(
                "launch of {}: argument {i} points {byte_offset} bytes into a buffer of {} bytes",
                quoted(&self.kernel_name()),
                buf.size_bytes()
            )));
        }
        self.arg(Arg::buffer_at_byte(buf, byte_offset))
    }

    /// Appends a by-value parameter given as the bytes of `value` (a `#[repr(C)]` struct).
    pub fn arg_bytes<P: Pod>(self, value: &P) -> Self {
        self.arg(Arg::bytes_of(value))
    }

    /// Appends several arguments of one type.
    pub fn args<A: KernelArg<'a>>(mut self, args: impl IntoIterator<Item = A>) -> Self {
        for a in args {
            self = self.arg(a);
        }
        self
    }

    /// Queues the launch. It may return before the kernel completes: a kernel's faults surface at
    /// the next [`Session::sync`] or read. Fails at once with
    /// [`Error::LaunchFailed`](crate::Error::LaunchFailed) for an unknown kernel or a bad grid or
    /// block, and with [`Error::InvalidInput`] when no [`LaunchConfig`] was given.
    pub fn run(self) -> Result<()> {
        self.run_ordinal().map(drop)
    }

    /// [`Launch::run`], returning the launch's ordinal: its number among the launches under the
    /// session's lease, counting from 1, by which a later asynchronous error names it ("launch
    /// #N of kernel `k`").
    pub fn run_ordinal(self) -> Result<u64> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let config = self.config.ok_or_else(|| {
            Error::invalid_input(format!(
                "launch of {} has no LaunchConfig; call .config(..)",
                quoted(&self.kernel_name())
            ))
        })?;
        let raw = self.session.raw();
        if let Some(stream) = self.stream {
            let Target::Handle(kernel) = self.target else {
                return Err(Error::invalid_input(format!(
                    "launch of {} on a stream: resolve the kernel with Module::kernel and launch it with Session::launch_kernel",
                    quoted(&self.kernel_name())
                )));
            };
            return Ok(stream
                .raw()
                .launch(kernel.raw(), config.to_raw(), &self.args)?);
        }
        Ok(match self.target {
            Target::Named(module, kernel) => {
                raw.launch(module.raw(), kernel, config.to_raw(), &self.args)?
            }
            Target::Handle(kernel) => {
                raw.launch_kernel(kernel.raw(), config.to_raw(), &self.args)?
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_num_elems_covers_n_with_256_thread_blocks() {
        let cases = [
            (0, 1),
            (1, 1),
            (255, 1),
            (256, 1),
            (257, 2),
            (1000, 4),
            (1024, 4),
            (1025, 5),
        ];
        for (n, blocks) in cases {
            let c = LaunchConfig::for_num_elems(n);
            assert_eq!(c.grid, (blocks, 1, 1), "n = {n}");
            assert_eq!(c.block, (256, 1, 1));
            assert_eq!(c.shared_mem_bytes, 0);
            assert!(c.total_threads() >= n as u128);
        }
        let max = LaunchConfig::for_num_elems(u32::MAX);
        assert_eq!(max.grid.0, 16_777_216);
        assert!(max.total_threads() >= u32::MAX as u128);
    }

    #[test]
    fn config_helpers() {
        let c = LaunchConfig::linear(3, 64).with_shared_mem(512);
        assert_eq!(
            c,
            LaunchConfig {
                grid: (3, 1, 1),
                block: (64, 1, 1),
                shared_mem_bytes: 512
            }
        );
        assert_eq!(c.threads_per_block(), 64);
        assert_eq!(c.total_threads(), 192);
        let r: raw::LaunchConfig = c.into();
        assert_eq!(
            (r.grid, r.block, r.shared_mem_bytes),
            (c.grid, c.block, 512)
        );
    }

    #[test]
    fn scalars_become_typed_args() {
        assert!(matches!(3i32.into_arg().raw, raw::KernelArg::I32(3)));
        assert!(matches!(3u32.into_arg().raw, raw::KernelArg::U32(3)));
        assert!(matches!((-3i64).into_arg().raw, raw::KernelArg::I64(-3)));
        assert!(matches!((1u64 << 40).into_arg().raw, raw::KernelArg::U64(v) if v == 1 << 40));
        assert!(matches!(1.5f32.into_arg().raw, raw::KernelArg::F32(v) if v == 1.5));
        assert!(matches!(2.5f64.into_arg().raw, raw::KernelArg::F64(v) if v == 2.5));
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(C)]
        struct P {
            a: u32,
            b: f32,
        }
        let a = Arg::bytes_of(&P { a: 1, b: 1.0 });
        match a.raw {
            raw::KernelArg::Bytes(b) => assert_eq!(b, [1, 0, 0, 0, 0, 0, 0x80, 0x3f]),
            other => panic!("{other:?}"),
        }
    }
}
