//! Bursts: one kernel launched many times in one host call, each launch with some of its
//! arguments changed.

use crate::error::{quoted, Error, Result};
use crate::launch::{Arg, KernelArg, LaunchConfig};
use crate::raw::sessions as raw;
use crate::session::{Kernel, Session};

/// The most launches one burst may hold (the host refuses more with
/// [`Error::InvalidArgument`]): split a longer series into several bursts.
pub const MAX_BURST_LAUNCHES: usize = 4096;

/// A burst being built, from [`Session::burst`]: the kernel's arguments, given once in parameter
/// order as for a [`Launch`](crate::Launch), and one entry per launch saying which of them that
/// launch changes (a scalar such as a step or a row, or a buffer at another offset). Nothing
/// happens until [`Burst::run`], which queues every launch in order, in one host call, and
/// returns the first launch's ordinal (the others follow it one by one).
///
/// The host checks every launch as it checks a single one before it queues any: a refused
/// launch fails the whole burst, the error naming it ("launch 3 of the burst: …").
///
/// ```no_run
/// use tasklet_gpu::{Arg, LaunchConfig};
/// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
/// # let module = session.load_ptx("")?; let kernel = module.kernel("axpy_row")?;
/// let m = session.alloc::<f32>(64 * 256)?;
/// // axpy_row(float* row, float a, unsigned n): 64 rows, each with its own scale.
/// let mut burst = session
///     .burst(&kernel)
///     .config(LaunchConfig::for_num_elems(256))
///     .arg(&m)
///     .arg(1.0f32)
///     .arg(256u32);
/// for row in 0..64 {
///     burst = burst.launch([
///         (0, Arg::buffer_at_elem(&m, row * 256)),
///         (1, (row as f32).into_arg()),
///     ]);
/// }
/// burst.run()?;
/// session.sync()?;
/// # use tasklet_gpu::KernelArg;
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
#[must_use = "a burst does nothing until .run()"]
pub struct Burst<'a> {
    session: &'a Session<'a>,
    kernel: &'a Kernel<'a>,
    config: Option<LaunchConfig>,
    args: Vec<raw::KernelArg<'a>>,
    launches: Vec<Vec<raw::BurstArg<'a>>>,
    /// The first mistake found while building, reported by `run`.
    error: Option<Error>,
}

impl<'a> Burst<'a> {
    pub(crate) fn new(session: &'a Session<'a>, kernel: &'a Kernel<'a>) -> Burst<'a> {
        let mut burst = Burst {
            session,
            kernel,
            config: None,
            args: Vec::new(),
            launches: Vec::new(),
            error: None,
        };
        if !session.is(kernel.module().session()) {
            burst.fail(format!(
                "burst of {}: the kernel's module belongs to another session",
                quoted(&kernel.name())
            ));
        }
        burst
    }

    fn fail(&mut self, why: String) {
        self.error.get_or_insert(Error::InvalidArgument(why));
    }

    /// The argument as the host takes it, after the SDK's own check that a buffer is this
    /// session's.
    fn checked(
        &mut self,
        arg: impl KernelArg<'a>,
        what: impl FnOnce() -> String,
    ) -> raw::KernelArg<'a> {
        let Arg { raw, owner } = arg.into_arg();
        if owner.is_some_and(|o| !self.session.is(o)) {
            self.fail(format!(
                "burst of {}: {} is a buffer of another session",
                quoted(&self.kernel.name()),
                what()
            ));
        }
        raw
    }

    /// Sets the grid, block and shared memory of every launch (required).
    pub fn config(mut self, config: LaunchConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Appends an argument every launch takes unless it changes it (see [`KernelArg`]).
    pub fn arg(mut self, arg: impl KernelArg<'a>) -> Self {
        let i = self.args.len();
        let raw = self.checked(arg, || format!("argument {i}"));
        self.args.push(raw);
        self
    }

    /// Adds one launch, changing the arguments at the given places (in the order given) for it
    /// alone; the others are the burst's.
    pub fn launch<A: KernelArg<'a>>(mut self, changes: impl IntoIterator<Item = (u32, A)>) -> Self {
        let n = self.launches.len();
        let mut own = Vec::new();
        for (index, arg) in changes {
            let arg = self.checked(arg, || format!("launch {n}'s argument {index}"));
            own.push(raw::BurstArg { index, arg });
        }
        self.launches.push(own);
        self
    }

    /// Adds `n` launches that change nothing.
    pub fn repeat(mut self, n: usize) -> Self {
        self.launches.extend((0..n).map(|_| Vec::new()));
        self
    }

    /// Launches so far.
    pub fn len(&self) -> usize {
        self.launches.len()
    }

    /// Whether no launch was added yet.
    pub fn is_empty(&self) -> bool {
        self.launches.is_empty()
    }

    /// Queues every launch, in order, in one host call; returns the first one's ordinal. May
    /// return before the kernels complete: a fault surfaces at the next [`Session::sync`] or
    /// read, naming the launch by its ordinal.
    pub fn run(self) -> Result<u64> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let config = self.config.ok_or_else(|| {
            Error::invalid_input(format!(
                "burst of {} has no LaunchConfig; call .config(..)",
                quoted(&self.kernel.name())
            ))
        })?;
        Ok(self.session.raw().launch_burst(
            self.kernel.raw(),
            config.to_raw(),
            &self.args,
            &self.launches,
        )?)
    }
}
