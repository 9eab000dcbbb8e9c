//! One kernel launch, as the host asks for it, as it travels, and as a backend runs it: a single
//! description from the lease's call down to the device.

use std::time::Duration;

/// One kernel launch.
///
/// The kernel is named by its index in the module's kernel list — `LoadedModule::kernels`, in
/// the order the worker answered the load with — not by its name: the host resolves names once,
/// and the worker never looks one up again. A worker answers an index outside that list with
/// `InvalidArgument`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch<'a> {
    /// The module's id, as its load was answered with.
    pub module: u32,
    /// The kernel's index in the module's kernel list.
    pub kernel: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// The argument block, laid out as `KernelInfo::param_layout` says.
    pub args: &'a [u8],
    /// How long the kernel may run; above zero (the host refuses a launch without one before it
    /// is sent). Past it the lease gets `DeadlineExceeded` and the worker is never reused.
    ///
    /// Each backend enforces it its own way: the emulator turns it into a step limit; cuda
    /// queues the kernel, answers at once, and enforces the deadline when it waits for the
    /// kernel — at `sync` and at any later op that must wait for it — with a watchdog that ends
    /// the process shortly after, synced or not. The host, for its part, kills a worker that has
    /// not reported by `deadline + slack`, counted from when the kernels queued before it could
    /// have ended.
    pub deadline: Duration,
}
