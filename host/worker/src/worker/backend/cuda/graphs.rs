//! Launching through CUDA graphs: a run of up to [`GROUP_MAX`] ready launches goes to the driver
//! as one `cuGraphLaunch` of a cached, instantiated chain of kernel nodes (node `i` after node
//! `i - 1`, so the kernels run in order on the worker's stream exactly as separate launches would).
//!
//! Why: the driver's CPU cost of a launch is much lower through an instantiated graph than through
//! `cuLaunchKernel`, and lower still per node in a longer chain (`benches/probes/graph_bursts.rs`
//! measures it). Updating a node costs extra only when its launch differs from what the node holds
//! — not at all in a loop launching one kernel again and again — and even an updated one-node graph
//! costs no more than `cuLaunchKernel`; a single launch followed by a wait for the stream is faster
//! through the graph too.
//!
//! One chain is kept per length (1 to [`GROUP_MAX`]), built at its first use from the launches it
//! first carries; each later use updates only the nodes whose launch differs from what they hold
//! (function, dimensions, shared memory, argument bytes; the driver copies the argument block at
//! the update). Chains hold functions of loaded modules, so they are destroyed before any module
//! is unloaded ([`Chains::clear`]) and rebuilt on demand.
//!
//! Anything the driver refuses here (building, an update, the launch) launches nothing of the
//! run; the caller then launches it one `cuLaunchKernel` at a time, which names the launch at
//! fault with the driver's own error, exactly as without graphs. A chain whose update failed is
//! forgotten.

use std::ffi::c_void;

use super::driver::*;
use super::launch::{ReadyLaunch, GROUP_MAX};

/// What one node of a chain launches now.
#[derive(Default)]
struct Held {
    function: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    args: Vec<u8>,
}

impl Held {
    fn matches(&self, l: &ReadyLaunch) -> bool {
        self.function == l.function as usize
            && self.grid == l.grid
            && self.block == l.block
            && self.shared_mem_bytes == l.shared_mem_bytes
            && self.args == launch_args(l)
    }

    fn set(&mut self, l: &ReadyLaunch) {
        self.function = l.function as usize;
        self.grid = l.grid;
        self.block = l.block;
        self.shared_mem_bytes = l.shared_mem_bytes;
        self.args.clear();
        self.args.extend_from_slice(launch_args(l));
    }
}

fn launch_args(l: &ReadyLaunch) -> &[u8] {
    if l.args.is_null() {
        &[]
    } else {
        // SAFETY: `ReadyLaunch::args` points at `args_len` bytes valid for the launch call.
        unsafe { std::slice::from_raw_parts(l.args.cast::<u8>(), l.args_len) }
    }
}

/// An instantiated chain of kernel nodes and what each node launches now.
struct Chain {
    graph: CuGraph,
    exec: CuGraphExec,
    nodes: Vec<CuGraphNode>,
    held: Vec<Held>,
}

/// The cached chains, one per length; `None` where the driver has no graph API.
pub struct Chains {
    api: Option<&'static GraphApi>,
    by_len: Vec<Option<Chain>>,
}

// SAFETY: graph handles are plain handles usable from any thread of the process; a `Chains` is
// only used under the launch queue's lock.
unsafe impl Send for Chains {}

/// A kernel node's parameters for `l`; its `extra` points into `extra` and `size` (see
/// [`ReadyLaunch::extra`]): use it before they move.
fn node_params(
    l: &ReadyLaunch,
    extra: &mut [*mut c_void; 5],
    size: &mut usize,
) -> KernelNodeParams {
    KernelNodeParams {
        function: l.function,
        grid: l.grid,
        block: l.block,
        shared_mem_bytes: l.shared_mem_bytes,
        kernel_params: std::ptr::null_mut(),
        extra: l.extra(extra, size),
        kernel: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

impl Chains {
    pub fn new(drv: &'static Driver) -> Chains {
        Chains {
            api: drv.graphs.as_ref(),
            by_len: (0..GROUP_MAX).map(|_| None).collect(),
        }
    }

    /// Launches `run` (1 to [`GROUP_MAX`] launches, in order) on `stream` as one graph launch.
    /// `Err`: the driver refused something, or has no graph API, and nothing of `run` was launched.
    pub fn launch(&mut self, run: &[ReadyLaunch], stream: CuStream) -> Result<(), CuResult> {
        let api = self.api.ok_or(CUDA_ERROR_NOT_SUPPORTED)?;
        let slot = self
            .by_len
            .get_mut(run.len().wrapping_sub(1))
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let chain = match slot {
            Some(c) => c,
            None => slot.insert(build(api, run)?),
        };
        let exec = chain.exec;
        let mut refused = None;
        for ((node, held), l) in chain.nodes.iter().zip(chain.held.iter_mut()).zip(run) {
            if held.matches(l) {
                continue;
            }
            let (mut extra, mut size) = ([std::ptr::null_mut(); 5], 0usize);
            let p = node_params(l, &mut extra, &mut size);
            // SAFETY: a node of the graph `exec` was instantiated from; `p` and what it points to
            // live across the call, which copies the argument block.
            let r = unsafe { (api.set_kernel_node)(exec, *node, &p) };
            if r != CUDA_SUCCESS {
                refused = Some(r);
                break;
            }
            held.set(l);
        }
        if let Some(r) = refused {
            // What the refused node holds now is not known: forget the chain.
            if let Some(c) = slot.take() {
                destroy(api, c);
            }
            return Err(r);
        }
        // SAFETY: an instantiated graph; the worker's stream.
        match unsafe { (api.launch)(exec, stream) } {
            CUDA_SUCCESS => Ok(()),
            r => Err(r),
        }
    }

    /// Destroys every chain (before a module is unloaded: chains hold its functions). A launch
    /// of a chain still in flight completes; the driver frees it then.
    pub fn clear(&mut self) {
        let Some(api) = self.api else { return };
        for c in self.by_len.iter_mut().filter_map(Option::take) {
            destroy(api, c);
        }
    }
}

/// Builds and instantiates a chain of `run.len()` nodes launching `run`.
fn build(api: &GraphApi, run: &[ReadyLaunch]) -> Result<Chain, CuResult> {
    let mut graph: CuGraph = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let r = unsafe { (api.create)(&mut graph, 0) };
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    let mut chain = Chain {
        graph,
        exec: std::ptr::null_mut(),
        nodes: Vec::with_capacity(run.len()),
        held: Vec::with_capacity(run.len()),
    };
    for l in run {
        let (mut extra, mut size) = ([std::ptr::null_mut(); 5], 0usize);
        let p = node_params(l, &mut extra, &mut size);
        let (deps, n_deps) = match chain.nodes.last() {
            Some(prev) => (prev as *const CuGraphNode, 1),
            None => (std::ptr::null(), 0),
        };
        let mut node: CuGraphNode = std::ptr::null_mut();
        // SAFETY: valid out-pointer; `deps` is a node of this graph (or none); `p` and what it
        // points to live across the call, which copies the argument block.
        let r = unsafe { (api.add_kernel_node)(&mut node, graph, deps, n_deps, &p) };
        if r != CUDA_SUCCESS {
            destroy(api, chain);
            return Err(r);
        }
        chain.nodes.push(node);
        let mut held = Held::default();
        held.set(l);
        chain.held.push(held);
    }
    // SAFETY: valid out-pointer; a complete graph.
    let r = unsafe { (api.instantiate)(&mut chain.exec, graph, 0) };
    if r != CUDA_SUCCESS {
        chain.exec = std::ptr::null_mut();
        destroy(api, chain);
        return Err(r);
    }
    Ok(chain)
}

fn destroy(api: &GraphApi, c: Chain) {
    // SAFETY: handles this chain owns, destroyed once; an in-flight launch of `exec` is freed by
    // the driver when it completes. Failures leave at worst a leak in a context that ends with
    // its worker.
    unsafe {
        if !c.exec.is_null() {
            (api.exec_destroy)(c.exec);
        }
        (api.destroy)(c.graph);
    }
}
