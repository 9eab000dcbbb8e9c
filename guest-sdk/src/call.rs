//! The one-shot helper for the pure-function pattern.

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::launch::{KernelArg, LaunchConfig};
use crate::lease::{vram_for, Lease, LeaseBuilder};
use crate::raw::oneshot as raw;

/// One kernel over one buffer, start to finish, in one host call (`oneshot.submit`): the host
/// acquires a lease sized for the data, takes its memory as the call's buffer, copies the input
/// there, loads the module, runs the kernel over it in place, reads the buffer back and ends the
/// lease. Where the GPU is on a node, that is one request to it (GPU_SUBMIT) when the data is
/// the kernel's first parameter, the module PTX, and the input at most 1 MiB; otherwise the host
/// sends the same steps as session operations.
///
/// The kernel's arguments are given in parameter order: [`GpuCall::data`] for the device buffer
/// holding the input, [`GpuCall::len_arg`] for its element count as a `u32`, and
/// [`GpuCall::arg`] for scalars. The launch configuration defaults to
/// [`LaunchConfig::for_num_elems`] of the input length.
///
/// ```no_run
/// use tasklet_gpu::GpuCall;
///
/// // extern "C" __global__ void scale(float* x, float factor, unsigned n)
/// const SCALE_PTX: &str = "..."; // e.g. include_str!("../kernels/scale.ptx")
///
/// fn scale(xs: &[f32], factor: f32) -> Result<Vec<f32>, tasklet_gpu::Error> {
///     GpuCall::new(SCALE_PTX, "scale").data().arg(factor).len_arg().run(xs)
/// }
/// ```
///
/// The lease is [`Lease::builder`]'s, with the SDK's one set of defaults
/// ([`LeaseBuilder::DEFAULT_SECS`], any device), and at least as large as the data;
/// [`GpuCall::lease`] asks for more memory, another lease time or a particular device. An empty
/// input returns an empty output without acquiring a lease.
#[derive(Debug, Clone)]
#[must_use = "a GpuCall does nothing until .run(input)"]
pub struct GpuCall<'p> {
    source: Source<'p>,
    kernel: &'p str,
    args: Vec<CallArg>,
    config: Option<LaunchConfig>,
    lease: LeaseBuilder,
}

#[derive(Debug, Clone)]
enum Source<'p> {
    Ptx(&'p str),
    Cuda(&'p str, Vec<String>),
}

#[derive(Debug, Clone)]
enum CallArg {
    Data,
    Len,
    Scalar(ScalarArg),
}

/// A scalar (owned, lifetime-free) kernel argument: the WIT `kernel-arg` less its buffer case,
/// kept apart because the generated type is not `Clone` (and a `GpuCall` is).
#[derive(Debug, Clone)]
enum ScalarArg {
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    Bytes(Vec<u8>),
}

impl<'p> GpuCall<'p> {
    /// A call of `kernel` from the PTX module `ptx`.
    pub fn new(ptx: &'p str, kernel: &'p str) -> Self {
        GpuCall::with_source(Source::Ptx(ptx), kernel)
    }

    /// A call of `kernel` from CUDA C `source`, compiled on the host with `options`.
    pub fn cuda(source: &'p str, options: &[&str], kernel: &'p str) -> Self {
        let options = options.iter().map(|o| (*o).to_owned()).collect();
        GpuCall::with_source(Source::Cuda(source, options), kernel)
    }

    fn with_source(source: Source<'p>, kernel: &'p str) -> Self {
        GpuCall {
            source,
            kernel,
            args: Vec::new(),
            config: None,
            lease: Lease::builder(),
        }
    }

    /// The next parameter is the device buffer holding the input (a pointer to its element 0).
    pub fn data(mut self) -> Self {
        self.args.push(CallArg::Data);
        self
    }

    /// The next parameter is the number of input elements, as a `u32`.
    pub fn len_arg(mut self) -> Self {
        self.args.push(CallArg::Len);
        self
    }

    /// The next parameter is a scalar (`i32`, `u32`, `i64`, `u64`, `f32`, `f64`) or a by-value
    /// struct ([`Arg::bytes_of`]). Buffers cannot be passed: the call owns the only one.
    ///
    /// # Panics
    ///
    /// When given an [`Arg`] that refers to a buffer (a [`CStruct`](crate::CStruct) with a
    /// buffer field included).
    pub fn arg(mut self, arg: impl KernelArg<'static>) -> Self {
        use crate::raw::sessions::KernelArg as K;
        let scalar = match arg.into_arg().into_raw() {
            K::I32(v) => ScalarArg::I32(v),
            K::U32(v) => ScalarArg::U32(v),
            K::I64(v) => ScalarArg::I64(v),
            K::U64(v) => ScalarArg::U64(v),
            K::F32(v) => ScalarArg::F32(v),
            K::F64(v) => ScalarArg::F64(v),
            K::Bytes(v) => ScalarArg::Bytes(v),
            // A struct's bytes without addresses in them are bytes.
            K::Relocated(r) if r.relocations.is_empty() => ScalarArg::Bytes(r.bytes),
            K::Buffer(_) | K::Relocated(_) => {
                panic!("GpuCall::arg takes scalars; use .data() for the buffer")
            }
        };
        self.args.push(CallArg::Scalar(scalar));
        self
    }

    /// Sets the launch configuration (default: [`LaunchConfig::for_num_elems`] of the input
    /// length).
    pub fn config(mut self, config: LaunchConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Shapes the lease request: `request` gets the call's ([`Lease::builder`]'s defaults) and
    /// returns the one to make. Its
    /// [`min_vram`](LeaseBuilder::min_vram) is a floor: the lease is never smaller than the input
    /// needs (its size rounded up as [`LeaseBuilder::min_vram_for`] does).
    ///
    /// ```no_run
    /// # const SCALE_PTX: &str = "";
    /// # let xs = [1.0f32];
    /// let ys = tasklet_gpu::GpuCall::new(SCALE_PTX, "scale")
    ///     .lease(|l| l.secs(5).device(1))
    ///     .data()
    ///     .arg(2.0f32)
    ///     .len_arg()
    ///     .run(&xs)?;
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn lease(mut self, request: impl FnOnce(LeaseBuilder) -> LeaseBuilder) -> Self {
        self.lease = request(self.lease);
        self
    }

    /// The lease request for an input of `len` elements of `T`: the caller's, with room for the
    /// input at least.
    fn lease_for<T>(&self, len: usize) -> LeaseBuilder {
        let asked = self.lease.request().min_vram;
        self.lease.clone().min_vram(asked.max(vram_for::<T>(len)))
    }

    /// Runs the kernel over a device copy of `input` and returns the buffer's contents afterwards
    /// (its first `input.len()` elements: the lease may hold more, zeroed).
    pub fn run<T: Pod>(&self, input: &[T]) -> Result<Vec<T>> {
        if input.is_empty() {
            return Ok(Vec::new());
        }
        let n = u32::try_from(input.len()).map_err(|_| {
            Error::invalid_input(format!(
                "{} elements do not fit a kernel's u32 count",
                input.len()
            ))
        })?;
        let bytes: &[u8] = bytemuck::cast_slice(input);
        let module = match &self.source {
            Source::Ptx(ptx) => raw::ModuleSource::Ptx((*ptx).to_owned()),
            Source::Cuda(source, options) => raw::ModuleSource::Cuda(raw::CudaSource {
                source: (*source).to_owned(),
                options: options.clone(),
            }),
        };
        let args = self
            .args
            .iter()
            .map(|a| match a {
                CallArg::Data => raw::SubmitArg::Region(0),
                CallArg::Len => raw::SubmitArg::U32(n),
                CallArg::Scalar(s) => s.to_submit_arg(),
            })
            .collect();
        // The one-shot carries a lease request alone: requirements would be dropped unseen.
        if self.lease.requirements().is_some() {
            return Err(Error::invalid_input(
                "a GpuCall cannot require a device's UUID, model, compute capability or size; acquire a Lease with \
                 them (Lease::builder()) and launch in its session",
            ));
        }
        let call = raw::Submission {
            lease: self.lease_for::<T>(input.len()).request(),
            module,
            kernel: self.kernel.to_owned(),
            config: self
                .config
                .unwrap_or(LaunchConfig::for_num_elems(n))
                .to_raw(),
            args,
            input: bytes.to_vec(),
            output_offset: 0,
            output_size: bytes.len() as u64,
        };
        let out = raw::submit(&call)?;
        // The host returns exactly the bytes asked for; a shorter answer is refused, not read.
        if out.len() != bytes.len() {
            return Err(Error::invalid_input(format!(
                "the host returned {} bytes for a {}-byte output",
                out.len(),
                bytes.len()
            )));
        }
        let mut values = vec![T::zeroed(); input.len()];
        bytemuck::cast_slice_mut::<T, u8>(&mut values).copy_from_slice(&out);
        Ok(values)
    }
}

impl ScalarArg {
    fn to_submit_arg(&self) -> raw::SubmitArg {
        use raw::SubmitArg as K;
        match self {
            ScalarArg::I32(v) => K::I32(*v),
            ScalarArg::U32(v) => K::U32(*v),
            ScalarArg::I64(v) => K::I64(*v),
            ScalarArg::U64(v) => K::U64(*v),
            ScalarArg::F32(v) => K::F32(*v),
            ScalarArg::F64(v) => K::F64(*v),
            ScalarArg::Bytes(v) => K::Bytes(v.clone()),
        }
    }
}

/// [`GpuCall`] as a function: `build` adds the arguments (and any options) to the call.
///
/// ```no_run
/// # const SCALE_PTX: &str = "";
/// let xs = [1.0f32, 2.0, 3.0];
/// let ys = tasklet_gpu::gpu_call(SCALE_PTX, "scale", &xs, |c| c.data().arg(2.0f32).len_arg())?;
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
pub fn gpu_call<'p, T: Pod>(
    ptx: &'p str,
    kernel: &'p str,
    input: &[T],
    build: impl FnOnce(GpuCall<'p>) -> GpuCall<'p>,
) -> Result<Vec<T>> {
    build(GpuCall::new(ptx, kernel)).run(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_keep_their_order_and_types() {
        let c = GpuCall::new("", "k").data().arg(2.0f32).len_arg().arg(7u64);
        let kinds: Vec<String> = c.args.iter().map(|a| format!("{a:?}")).collect();
        assert_eq!(kinds, ["Data", "Scalar(F32(2.0))", "Len", "Scalar(U64(7))"]);
    }

    #[test]
    fn the_lease_has_room_for_the_input_and_keeps_what_the_caller_set() {
        let r = GpuCall::new("", "k").lease_for::<u32>(3 << 20).request();
        assert_eq!(
            (r.min_vram, r.secs, r.device),
            (12 << 20, LeaseBuilder::DEFAULT_SECS, None)
        );
        let call = GpuCall::new("", "k").lease(|l| l.min_vram(64 << 20).secs(5).device(1));
        let r = call.lease_for::<u32>(3 << 20).request();
        assert_eq!((r.min_vram, r.secs, r.device), (64 << 20, 5, Some(1)));
        // A floor below what the input needs does not shrink the lease.
        let r = GpuCall::new("", "k")
            .lease(|l| l.min_vram(1))
            .lease_for::<u8>(5 << 20)
            .request();
        assert_eq!(r.min_vram, 5 << 20);
    }

    #[test]
    fn the_call_and_the_builder_share_their_defaults() {
        assert_eq!(GpuCall::new("", "k").lease, Lease::builder());
        // A small input still asks for the builder's default memory, not less.
        let r = GpuCall::new("", "k").lease_for::<u8>(1).request();
        assert_eq!(
            (r.min_vram, r.secs),
            (LeaseBuilder::DEFAULT_MIN_VRAM, LeaseBuilder::DEFAULT_SECS)
        );
    }

    #[test]
    fn empty_input_needs_no_gpu() {
        let out: Vec<f32> = GpuCall::new("", "k").data().run(&[]).unwrap();
        assert!(out.is_empty());
    }
}
