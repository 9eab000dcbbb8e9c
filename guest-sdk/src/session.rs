//! Sessions and modules.

use core::ops::RangeBounds;

use bytemuck::Pod;

use crate::buffer::{byte_len, byte_span, elem_range, DeviceBuffer};
use crate::error::{Error, Result};
use crate::launch::Launch;
use crate::lease::Lease;
use crate::raw::sessions as raw;

/// Device memory, modules and launches under one [`Lease`].
///
/// Opened with [`Lease::session`] or [`Session::open`]; it borrows the lease, so it cannot outlive
/// it, and its buffers and modules borrow the session in turn. Operations are queued in order:
/// writes and launches may return before the device finishes them, and their errors surface at
/// the next [`Session::sync`] or read at the latest (the contract CUDA streams have).
///
/// ```no_run
/// use tasklet_gpu::{Lease, LaunchConfig};
/// # const PTX: &str = "";
/// let lease = Lease::builder().min_vram(16 << 20).secs(30).acquire()?;
/// let session = lease.session()?;
///
/// let a = session.alloc_from(&[1u32, 2, 3, 4])?;
/// let b = session.alloc::<u32>(4)?; // zeroed
/// session.copy(&b, &a)?;
/// b.write(2, &[30, 40])?;
/// assert_eq!(b.read()?, [1, 2, 30, 40]);
///
/// let module = session.load_ptx(PTX)?;
/// session.launch(&module, "iota").config(LaunchConfig::for_num_elems(4)).arg(&b).arg(4u32).run()?;
/// session.sync()?;
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
#[derive(Debug)]
pub struct Session<'l> {
    lease: &'l Lease,
    raw: raw::Session,
}

impl<'l> Session<'l> {
    /// Opens a session on a live lease.
    pub fn open(lease: &'l Lease) -> Result<Session<'l>> {
        Ok(Session {
            lease,
            raw: raw::Session::open(lease.raw())?,
        })
    }

    /// The lease this session is under.
    pub fn lease(&self) -> &'l Lease {
        self.lease
    }

    /// Allocates zeroed device memory for `len` elements of `T`, charged to the lease.
    ///
    /// Fails with [`Error::InvalidInput`] when the byte size overflows, and with the host's error
    /// (e.g. [`Error::QuotaExceeded`], or [`Error::InvalidArgument`] for a zero size) otherwise.
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<'_, T>> {
        let bytes = byte_len::<T>(len)?;
        let raw = self.raw.mem_alloc(bytes)?;
        Ok(DeviceBuffer::new(self, raw, len))
    }

    /// Allocates device memory for `data` and writes `data` to it.
    pub fn alloc_from<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<'_, T>> {
        let buf = self.alloc::<T>(data.len())?;
        buf.write(0, data)?;
        Ok(buf)
    }

    /// Copies all of `src` to the start of `dst`, on the device. `dst` must be at least as long.
    pub fn copy<T: Pod>(&self, dst: &DeviceBuffer<'_, T>, src: &DeviceBuffer<'_, T>) -> Result<()> {
        self.copy_range(dst, 0, src, ..)
    }

    /// Copies the elements `src_range` of `src` to `dst` from element `dst_elem_offset` on, on
    /// the device.
    pub fn copy_range<T: Pod>(
        &self,
        dst: &DeviceBuffer<'_, T>,
        dst_elem_offset: usize,
        src: &DeviceBuffer<'_, T>,
        src_range: impl RangeBounds<usize>,
    ) -> Result<()> {
        self.check_owns(dst.session(), "destination buffer")?;
        self.check_owns(src.session(), "source buffer")?;
        let range = elem_range(src_range, src.len())?;
        let count = range.end - range.start;
        let (src_off, len) = byte_span::<T>(range.start, count, src.len())?;
        let (dst_off, _) = byte_span::<T>(dst_elem_offset, count, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        Ok(self
            .raw
            .mem_copy(dst.raw(), dst_off, src.raw(), src_off, len)?)
    }

    /// Copies the elements `src_range` of `src`, a buffer of *another* session of this tasklet
    /// (typically under a lease on another device), to `dst` of this session from element
    /// `dst_elem_offset` on, after all earlier work of both sessions: GPU to GPU between the
    /// leases of one group where the GPUs allow, else staged through the host's memory. Needs the
    /// `read` and `write` rights. With `src` of this session it is [`Session::copy_range`].
    ///
    /// ```no_run
    /// use tasklet_gpu::Lease;
    /// let (a, b) = (Lease::builder().device(0).acquire()?, Lease::builder().device(1).acquire()?);
    /// let (sa, sb) = (a.session()?, b.session()?);
    /// let on_a = sa.alloc_from(&[1u32, 2, 3])?;
    /// let on_b = sb.alloc::<u32>(3)?;
    /// sb.copy_from(&on_b, 0, &on_a, ..)?;
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn copy_from<T: Pod>(
        &self,
        dst: &DeviceBuffer<'_, T>,
        dst_elem_offset: usize,
        src: &DeviceBuffer<'_, T>,
        src_range: impl RangeBounds<usize>,
    ) -> Result<()> {
        self.check_owns(dst.session(), "destination buffer")?;
        let range = elem_range(src_range, src.len())?;
        let count = range.end - range.start;
        let (src_off, len) = byte_span::<T>(range.start, count, src.len())?;
        let (dst_off, _) = byte_span::<T>(dst_elem_offset, count, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        Ok(self.raw.mem_copy_from(
            dst.raw(),
            dst_off,
            src.session().raw(),
            src.raw(),
            src_off,
            len,
        )?)
    }

    /// Loads a PTX module (the driver JITs it; the emulator parses and validates all of it).
    ///
    /// ```no_run
    /// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
    /// const IOTA_PTX: &str = "..."; // e.g. include_str!("../kernels/iota.ptx")
    /// let module = session.load_ptx(IOTA_PTX)?;
    /// assert!(module.kernels().iter().any(|k| k == "iota"));
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn load_ptx(&self, ptx: &str) -> Result<Module<'_>> {
        Ok(Module {
            session: self,
            raw: self.raw.module_load(ptx)?,
        })
    }

    /// Compiles CUDA C source with NVRTC, with the given options (e.g. `"-arch=sm_90"`), and
    /// loads the result. Backends without a compiler fail with [`Error::Unsupported`].
    ///
    /// ```no_run
    /// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
    /// let src = r#"extern "C" __global__ void twice(float* x, unsigned n) {
    ///     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    ///     if (i < n) x[i] *= 2.0f;
    /// }"#;
    /// let module = session.load_cuda(src, &["-default-device"])?;
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn load_cuda(&self, source: &str, options: &[&str]) -> Result<Module<'_>> {
        let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        Ok(Module {
            session: self,
            raw: self.raw.module_load_source(source, &options)?,
        })
    }

    /// Starts a launch of `kernel` from `module`; see [`Launch`].
    pub fn launch<'a>(&'a self, module: &'a Module<'_>, kernel: &'a str) -> Launch<'a> {
        Launch::new(self, module, kernel)
    }

    /// Starts a launch of a kernel resolved once with [`Module::kernel`]: the host looks
    /// nothing up by name; see [`Launch`].
    pub fn launch_kernel<'a>(&'a self, kernel: &'a Kernel<'_>) -> Launch<'a> {
        Launch::of_kernel(self, kernel)
    }

    /// Starts a burst of launches of `kernel`: many launches, each changing some arguments, in
    /// one host call; see [`Burst`](crate::Burst).
    pub fn burst<'a>(&'a self, kernel: &'a Kernel<'_>) -> crate::Burst<'a> {
        crate::Burst::new(self, kernel)
    }

    /// A new, empty graph of this session; see [`Graph`](crate::Graph).
    pub fn graph(&self) -> Result<crate::Graph<'_>> {
        Ok(crate::Graph::new(self, self.raw.new_graph()?))
    }

    /// Waits for all work of this session, and reports the first error of the work queued since
    /// the last sync (a kernel fault, a missed deadline, a failed write).
    pub fn sync(&self) -> Result<()> {
        Ok(self.raw.sync()?)
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Session {
        &self.raw
    }

    /// Whether `other` is this very session.
    pub(crate) fn is(&self, other: &Session<'_>) -> bool {
        core::ptr::eq(&self.raw, &other.raw)
    }

    pub(crate) fn check_owns(&self, owner: &Session<'_>, what: &str) -> Result<()> {
        if self.is(owner) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "the {what} belongs to another session"
            )))
        }
    }
}

/// A loaded module of kernels, usable only in the session that loaded it (which it borrows).
#[derive(Debug)]
pub struct Module<'s> {
    session: &'s Session<'s>,
    raw: raw::Module,
}

impl<'s> Module<'s> {
    /// The module's kernels (entries) with their parameters, in the module's order: what the
    /// host checks every launch's arguments against. A [`KernelInfo`] compares equal to its
    /// name (`module.kernels().iter().any(|k| k == "iota")`).
    pub fn kernels(&self) -> Vec<KernelInfo> {
        self.raw
            .signatures()
            .into_iter()
            .map(KernelInfo::from_raw)
            .collect()
    }

    /// The module's kernel names, in the module's order.
    pub fn kernel_names(&self) -> Vec<String> {
        self.raw.kernels()
    }

    /// Whether the module has a kernel named `name`.
    pub fn has_kernel(&self, name: &str) -> bool {
        self.kernel_names().iter().any(|k| k == name)
    }

    /// The kernel named `name`, resolved once: launched with [`Session::launch_kernel`] without
    /// a name lookup per launch. Fails with [`Error::LaunchFailed`](crate::Error::LaunchFailed)
    /// naming the module's kernels when there is none.
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>> {
        Ok(Kernel {
            module: self,
            raw: self.raw.kernel(name)?,
        })
    }

    /// Hot reload: replaces the module's code with `ptx`, keeping the session's buffers. Takes
    /// the module mutably, so no [`Kernel`] resolved from the old code outlives it: resolve the
    /// kernels again with [`Module::kernel`] (graphs that launch the old ones are refused; record
    /// them again). A reload that fails leaves the old code loaded and usable.
    ///
    /// ```no_run
    /// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
    /// # let (old_ptx, new_ptx) = ("", "");
    /// let mut module = session.load_ptx(old_ptx)?;
    /// let step = module.kernel("step")?;
    /// // ... launches of `step` ...
    /// drop(step);
    /// module.reload_ptx(new_ptx)?;
    /// let step = module.kernel("step")?;
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn reload_ptx(&mut self, ptx: &str) -> Result<()> {
        Ok(self.raw.reload(ptx)?)
    }

    /// [`Module::reload_ptx`] with CUDA C, compiled by the host (NVRTC) with `options`.
    pub fn reload_cuda(&mut self, source: &str, options: &[&str]) -> Result<()> {
        let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        Ok(self.raw.reload_source(source, &options)?)
    }

    /// The session that loaded the module.
    pub fn session(&self) -> &'s Session<'s> {
        self.session
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Module {
        &self.raw
    }
}

/// How a kernel parameter is passed, as the module declares and uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A 64-bit integer parameter the kernel uses as a global memory address: it takes only a
    /// buffer of the launching session (a `&DeviceBuffer`, or one at an offset).
    Pointer,
    /// Any other: a scalar (a 64-bit integer the kernel is not seen using as an address takes a
    /// `u64` or a buffer), a by-value struct or array.
    Value,
}

/// One parameter of a kernel, as its argument block lays it out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelParam {
    /// The parameter's name in the module.
    pub name: String,
    /// Bytes.
    pub size: u32,
    /// Alignment in bytes.
    pub align: u32,
    /// Pointer or value.
    pub kind: ParamKind,
}

impl KernelParam {
    fn from_raw(p: raw::KernelParam) -> KernelParam {
        KernelParam {
            name: p.name,
            size: p.size,
            align: p.align,
            kind: match p.kind {
                raw::ParamKind::Pointer => ParamKind::Pointer,
                raw::ParamKind::Value => ParamKind::Value,
            },
        }
    }
}

/// A kernel of a module and its parameters, from [`Module::kernels`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelInfo {
    /// The kernel's (entry's) name.
    pub name: String,
    /// Its parameters, in declaration order.
    pub params: Vec<KernelParam>,
}

impl KernelInfo {
    fn from_raw(k: raw::KernelSignature) -> KernelInfo {
        KernelInfo {
            name: k.name,
            params: k.params.into_iter().map(KernelParam::from_raw).collect(),
        }
    }
}

/// A kernel compares equal to its name, so code written when `kernels()` listed names keeps
/// working.
impl PartialEq<str> for KernelInfo {
    fn eq(&self, name: &str) -> bool {
        self.name == name
    }
}

impl PartialEq<&str> for KernelInfo {
    fn eq(&self, name: &&str) -> bool {
        self.name == *name
    }
}

/// A kernel resolved once from a [`Module`] (which it borrows), for [`Session::launch_kernel`].
#[derive(Debug)]
pub struct Kernel<'m> {
    module: &'m Module<'m>,
    raw: raw::Kernel,
}

impl<'m> Kernel<'m> {
    /// The kernel's name.
    pub fn name(&self) -> String {
        self.raw.name()
    }

    /// Its parameters, in declaration order.
    pub fn params(&self) -> Vec<KernelParam> {
        self.raw
            .params()
            .into_iter()
            .map(KernelParam::from_raw)
            .collect()
    }

    /// The module it was resolved from.
    pub fn module(&self) -> &'m Module<'m> {
        self.module
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Kernel {
        &self.raw
    }
}
