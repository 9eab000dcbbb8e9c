//! Graphs: a session's operations recorded once and replayed as a whole, with device scalars
//! that change between replays without recording anything again.

use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::launch::{Arg, KernelArg, LaunchConfig};
use crate::raw::sessions as raw;
use crate::session::{Kernel, Session};

/// A recorded operation of a [`Graph`], for [`Graph::set_args`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Node(pub u32);

/// A device scalar of a [`Graph`]: 8 bytes of device memory the graph holds, which a kernel
/// recorded in it reads through a pointer parameter ([`GraphArgs::scalar`]), and which
/// [`Graph::set_scalar`] changes for the next replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scalar(pub u32);

/// Operations recorded once and replayed as a whole, from [`Session::graph`]: launches,
/// copies and fills, each checked when it is recorded as the session's operation of the same
/// name, replayed with [`Graph::replay`] with the results of running them one by one. On a
/// GPU a replay is one CUDA graph launch.
///
/// ```no_run
/// use tasklet_gpu::{GraphArgs, LaunchConfig};
/// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
/// # let module = session.load_ptx("")?; let step = module.kernel("jacobi_step")?;
/// let (a, b) = (session.alloc::<f32>(1024)?, session.alloc::<f32>(1024)?);
/// let graph = session.graph()?;
/// let iteration = graph.scalar(0)?;
/// let config = LaunchConfig::for_num_elems(1024);
/// // jacobi_step(const float* from, float* to, const unsigned long long* iteration)
/// graph.launch(&step, config, GraphArgs::new().arg(&a).arg(&b).scalar(iteration))?;
/// graph.launch(&step, config, GraphArgs::new().arg(&b).arg(&a).scalar(iteration))?;
/// for i in 0..100 {
///     graph.set_scalar(iteration, i)?;
///     graph.replay(1)?;
/// }
/// session.sync()?;
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
pub struct Graph<'s> {
    session: &'s Session<'s>,
    raw: raw::Graph,
}

/// The arguments of a launch recorded in a graph, in the kernel's parameter order: kernel
/// arguments as for a [`Launch`](crate::Launch), or a device scalar's address.
#[derive(Default)]
pub struct GraphArgs<'a> {
    args: Vec<raw::GraphArg<'a>>,
    owners: Vec<&'a Session<'a>>,
}

impl<'a> GraphArgs<'a> {
    /// No arguments yet.
    pub fn new() -> GraphArgs<'a> {
        GraphArgs::default()
    }

    /// Appends an argument (see [`KernelArg`]).
    pub fn arg(mut self, arg: impl KernelArg<'a>) -> Self {
        let Arg { raw, owner } = arg.into_arg();
        self.owners.extend(owner);
        self.args.push(raw::GraphArg::Arg(raw));
        self
    }

    /// Appends the device address of one of the graph's scalars.
    pub fn scalar(mut self, scalar: Scalar) -> Self {
        self.args.push(raw::GraphArg::Scalar(scalar.0));
        self
    }
}

impl<'s> Graph<'s> {
    pub(crate) fn new(session: &'s Session<'s>, raw: raw::Graph) -> Graph<'s> {
        Graph { session, raw }
    }

    fn owned(&self, args: &GraphArgs<'_>) -> Result<()> {
        for owner in &args.owners {
            self.session.check_owns(owner, "buffer argument")?;
        }
        Ok(())
    }

    /// Records a launch of `kernel` (of a module of the graph's session).
    pub fn launch(
        &self,
        kernel: &Kernel<'_>,
        config: LaunchConfig,
        args: GraphArgs<'_>,
    ) -> Result<Node> {
        self.session
            .check_owns(kernel.module().session(), "kernel")?;
        self.owned(&args)?;
        Ok(Node(self.raw.launch(
            kernel.raw(),
            config.to_raw(),
            &args.args,
        )?))
    }

    /// Records a copy of all of `src` to the start of `dst` (buffers of the session that do not
    /// overlap; `dst` at least as long).
    pub fn copy<T: Pod>(
        &self,
        dst: &DeviceBuffer<'_, T>,
        src: &DeviceBuffer<'_, T>,
    ) -> Result<Node> {
        self.session
            .check_owns(dst.session(), "destination buffer")?;
        self.session.check_owns(src.session(), "source buffer")?;
        if dst.len() < src.len() {
            return Err(Error::OutOfBounds(format!(
                "a copy of {} elements into a buffer of {}",
                src.len(),
                dst.len()
            )));
        }
        Ok(Node(self.raw.copy(
            dst.raw(),
            0,
            src.raw(),
            0,
            src.size_bytes(),
        )?))
    }

    /// Records a fill of all of `dst` with the 32-bit `value` repeated (its size in bytes a
    /// multiple of 4).
    pub fn fill<T: Pod>(&self, dst: &DeviceBuffer<'_, T>, value: u32) -> Result<Node> {
        self.session.check_owns(dst.session(), "buffer")?;
        Ok(Node(self.raw.fill(
            dst.raw(),
            0,
            dst.size_bytes(),
            value,
        )?))
    }

    /// A new device scalar, holding `value` from the next replay on.
    pub fn scalar(&self, value: u64) -> Result<Scalar> {
        Ok(Scalar(self.raw.scalar(value)?))
    }

    /// Sets a device scalar for the next replays (nothing is recorded again).
    pub fn set_scalar(&self, scalar: Scalar, value: u64) -> Result<()> {
        Ok(self.raw.set_scalar(scalar.0, value)?)
    }

    /// Replaces the arguments of the launch recorded at `node` for the next replays.
    pub fn set_args(&self, node: Node, args: GraphArgs<'_>) -> Result<()> {
        self.owned(&args)?;
        Ok(self.raw.set_args(node.0, &args.args)?)
    }

    /// Replays the graph `times` times, in order with the session's other work; errors of the
    /// work surface here or at the next [`Session::sync`].
    pub fn replay(&self, times: u32) -> Result<()> {
        Ok(self.raw.replay(times)?)
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Graph {
        &self.raw
    }
}
