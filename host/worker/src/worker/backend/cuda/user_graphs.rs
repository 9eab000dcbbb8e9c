//! A tenant's recorded graphs on the GPU: each one CUDA graph of kernel nodes in a chain (node
//! `i` after node `i - 1`, so they run in order, as the ops one by one would), built and
//! instantiated once at `graph-create`, launched whole by each replay, its launches' arguments
//! updated in place (`cuGraphExecKernelNodeSetParams`).
//!
//! Copies and fills are kernel nodes too, of a small module of the worker's own
//! ([`HELPERS_PTX`]), so a graph needs nothing of the driver's graph API but kernel nodes. The
//! same module stores a replay's device-scalar writes: one tiny launch each on the worker's
//! stream, whose 16 bytes of parameters the driver copies when it is called, so a write is
//! asynchronous and ordered with the replays around it, and the host need not wait between
//! setting a scalar and replaying.
//!
//! A graph holds functions of loaded modules: graphs launching a module's kernels are destroyed
//! before it is unloaded, all of them at reset. A replay in flight completes; the driver frees
//! the graph then.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::Arc;
use std::time::Duration;

use super::driver::*;
use super::launch::ReadyLaunch;
use super::{Chunk, CudaBackend};
use crate::contract::messages::GraphOp;
use crate::contract::ErrorKind;
use crate::worker::backend::recorded;
use crate::worker::backend::BackendError;

/// The worker's own kernels: a byte copy, a 32-bit fill, and an 8-byte store, each a
/// grid-stride loop (one thread suffices; more go faster).
pub(crate) const HELPERS_PTX: &str = "\
.version 7.0
.target sm_50
.address_size 64

.visible .entry tasklet_graph_copy(.param .u64 dst, .param .u64 src, .param .u64 len)
{
\t.reg .pred %p<2>;
\t.reg .b16 %h<2>;
\t.reg .b32 %r<5>;
\t.reg .b64 %rd<10>;
\tld.param.u64 %rd1, [dst];
\tld.param.u64 %rd2, [src];
\tld.param.u64 %rd3, [len];
\tcvta.to.global.u64 %rd1, %rd1;
\tcvta.to.global.u64 %rd2, %rd2;
\tmov.u32 %r1, %ctaid.x;
\tmov.u32 %r2, %ntid.x;
\tmov.u32 %r3, %tid.x;
\tmov.u32 %r4, %nctaid.x;
\tmul.wide.u32 %rd4, %r1, %r2;
\tcvt.u64.u32 %rd5, %r3;
\tadd.u64 %rd4, %rd4, %rd5;
\tmul.wide.u32 %rd6, %r4, %r2;
COPY:
\tsetp.ge.u64 %p1, %rd4, %rd3;
\t@%p1 bra COPIED;
\tadd.u64 %rd7, %rd2, %rd4;
\tld.global.u8 %h1, [%rd7];
\tadd.u64 %rd8, %rd1, %rd4;
\tst.global.u8 [%rd8], %h1;
\tadd.u64 %rd4, %rd4, %rd6;
\tbra COPY;
COPIED:
\tret;
}

.visible .entry tasklet_graph_fill(.param .u64 dst, .param .u32 value, .param .u64 words)
{
\t.reg .pred %p<2>;
\t.reg .b32 %r<6>;
\t.reg .b64 %rd<10>;
\tld.param.u64 %rd1, [dst];
\tld.param.u32 %r5, [value];
\tld.param.u64 %rd3, [words];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %ctaid.x;
\tmov.u32 %r2, %ntid.x;
\tmov.u32 %r3, %tid.x;
\tmov.u32 %r4, %nctaid.x;
\tmul.wide.u32 %rd4, %r1, %r2;
\tcvt.u64.u32 %rd5, %r3;
\tadd.u64 %rd4, %rd4, %rd5;
\tmul.wide.u32 %rd6, %r4, %r2;
FILL:
\tsetp.ge.u64 %p1, %rd4, %rd3;
\t@%p1 bra FILLED;
\tshl.b64 %rd7, %rd4, 2;
\tadd.u64 %rd8, %rd1, %rd7;
\tst.global.u32 [%rd8], %r5;
\tadd.u64 %rd4, %rd4, %rd6;
\tbra FILL;
FILLED:
\tret;
}

.visible .entry tasklet_graph_store(.param .u64 dst, .param .u64 value)
{
\t.reg .b64 %rd<3>;
\tld.param.u64 %rd1, [dst];
\tld.param.u64 %rd2, [value];
\tcvta.to.global.u64 %rd1, %rd1;
\tst.global.u64 [%rd1], %rd2;
\tret;
}
";

/// Threads per block of the helpers, and most blocks.
const HELPER_BLOCK: u32 = 256;
const HELPER_GRID_MAX: u64 = 1024;
/// What a copy or fill node adds to a replay's deadline: far above what the device needs for
/// any allocation it holds.
const HELPER_DEADLINE: Duration = Duration::from_secs(1);

/// The helper module and its functions, loaded at first use.
struct Helpers {
    copy: CuFunction,
    fill: CuFunction,
    store: CuFunction,
    store_name: Arc<str>,
}

/// What a kernel node launches, kept to update it in place.
struct NodeLaunch {
    function: CuFunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    args_len: usize,
}

struct UserGraph {
    graph: CuGraph,
    exec: CuGraphExec,
    nodes: Vec<CuGraphNode>,
    /// Per node: the tenant's launch it makes (`None` for a copy or a fill).
    launches: Vec<Option<NodeLaunch>>,
    /// Modules whose kernels it launches.
    modules: Vec<u32>,
    deadline: Duration,
    label: Arc<str>,
}

/// The worker's graphs, by id (from 1, never reused; only the live ones held).
#[derive(Default)]
pub struct UserGraphs {
    graphs: HashMap<u32, UserGraph>,
    last_id: u32,
    helpers: Option<Helpers>,
}

// SAFETY: graph and function handles are plain handles usable from any thread of the process;
// the serving thread alone uses them.
unsafe impl Send for UserGraphs {}

/// A node to add: its function, shape and argument block.
struct Spec {
    function: CuFunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    args: Vec<Chunk>,
    args_len: usize,
}

impl Spec {
    fn helper(function: CuFunction, items: u64, args: &[u64]) -> Spec {
        let grid = items
            .div_ceil(u64::from(HELPER_BLOCK))
            .clamp(1, HELPER_GRID_MAX) as u32;
        let bytes: Vec<u8> = args.iter().flat_map(|a| a.to_le_bytes()).collect();
        Spec::new(function, [grid, 1, 1], [HELPER_BLOCK, 1, 1], 0, &bytes)
    }

    fn new(
        function: CuFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        bytes: &[u8],
    ) -> Spec {
        let mut args = vec![Chunk([0; 16]); bytes.len().div_ceil(16)];
        for (chunk, part) in args.iter_mut().zip(bytes.chunks(16)) {
            chunk.0[..part.len()].copy_from_slice(part);
        }
        Spec {
            function,
            grid,
            block,
            shared_mem_bytes,
            args,
            args_len: bytes.len(),
        }
    }

    /// The node's parameters; its `extra` points into `extra`, `size` and `self`: use it
    /// before they move.
    fn params(&mut self, extra: &mut [*mut c_void; 5], size: &mut usize) -> KernelNodeParams {
        let extra = if self.args_len == 0 {
            std::ptr::null_mut()
        } else {
            *size = self.args_len;
            *extra = [
                CU_LAUNCH_PARAM_BUFFER_POINTER,
                self.args.as_mut_ptr().cast(),
                CU_LAUNCH_PARAM_BUFFER_SIZE,
                (size as *mut usize).cast(),
                CU_LAUNCH_PARAM_END,
            ];
            extra.as_mut_ptr()
        };
        KernelNodeParams {
            function: self.function,
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
            kernel_params: std::ptr::null_mut(),
            extra,
            kernel: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        }
    }
}

fn graph_api(drv: &'static Driver) -> Result<&'static GraphApi, BackendError> {
    drv.graphs.as_ref().ok_or_else(|| {
        BackendError::new(
            ErrorKind::Unsupported,
            "this worker's CUDA driver has no graph API (CUDA 12.0 or newer), or graphs are turned off (TASKLET_CUDA_GRAPHS=0)",
        )
    })
}

fn refused(drv: &Driver, what: &str, r: CuResult) -> BackendError {
    BackendError::new(
        ErrorKind::LaunchFailed,
        format!("{what}: the driver refused it: {}", drv.describe(r)),
    )
}

fn destroy(api: &GraphApi, g: UserGraph) {
    // SAFETY: handles this graph owns, destroyed once; a replay in flight is freed by the driver
    // when it completes. A failure leaves at worst a leak in a context that ends with its worker.
    unsafe {
        if !g.exec.is_null() {
            (api.exec_destroy)(g.exec);
        }
        (api.destroy)(g.graph);
    }
}

impl CudaBackend {
    fn helpers(&mut self) -> Result<&Helpers, BackendError> {
        if self.user_graphs.helpers.is_none() {
            let text = CString::new(HELPERS_PTX).unwrap_or_default();
            let mut module: CuModule = std::ptr::null_mut();
            // SAFETY: a NUL-terminated PTX image; no options.
            let r = unsafe {
                (self.drv.module_load_data_ex)(
                    &mut module,
                    text.as_ptr().cast(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            if r != CUDA_SUCCESS {
                return Err(refused(self.drv, "loading the worker's graph helpers", r));
            }
            let function = |name: &str| {
                let name = CString::new(name).unwrap_or_default();
                let mut f: CuFunction = std::ptr::null_mut();
                // SAFETY: a loaded module, a NUL-terminated name, a valid out-pointer.
                let r = unsafe { (self.drv.module_get_function)(&mut f, module, name.as_ptr()) };
                if r == CUDA_SUCCESS {
                    Ok(f)
                } else {
                    Err(refused(self.drv, "resolving the worker's graph helpers", r))
                }
            };
            self.user_graphs.helpers = Some(Helpers {
                copy: function("tasklet_graph_copy")?,
                fill: function("tasklet_graph_fill")?,
                store: function("tasklet_graph_store")?,
                store_name: Arc::from("(a device scalar's store)"),
            });
        }
        self.user_graphs
            .helpers
            .as_ref()
            .ok_or_else(|| BackendError::new(ErrorKind::LaunchFailed, "no graph helpers"))
    }

    fn user_graph(&self, graph: u32) -> Result<&UserGraph, BackendError> {
        self.user_graphs
            .graphs
            .get(&graph)
            .ok_or_else(|| recorded::no_graph(graph))
    }

    pub(super) fn create_user_graph(&mut self, ops: &[GraphOp<'_>]) -> Result<u32, BackendError> {
        self.usable()?;
        let api = graph_api(self.drv)?;
        recorded::room_for_a_graph(self.user_graphs.graphs.len())?;
        let mut specs = Vec::with_capacity(ops.len());
        let mut launches = Vec::with_capacity(ops.len());
        let mut modules = Vec::new();
        let mut deadline = Duration::ZERO;
        for (i, op) in ops.iter().enumerate() {
            let node = |e: BackendError| {
                BackendError::new(e.kind, format!("graph node {i}: {}", e.message))
            };
            match op {
                GraphOp::Launch(l) => {
                    let (function, _) = self.check_launch(l).map_err(node)?;
                    specs.push(Spec::new(
                        function,
                        l.grid,
                        l.block,
                        l.shared_mem_bytes,
                        l.args,
                    ));
                    launches.push(Some(NodeLaunch {
                        function,
                        grid: l.grid,
                        block: l.block,
                        shared_mem_bytes: l.shared_mem_bytes,
                        args_len: l.args.len(),
                    }));
                    if !modules.contains(&l.module) {
                        modules.push(l.module);
                    }
                    deadline = deadline.saturating_add(l.deadline);
                }
                &GraphOp::Copy { dst, src, len } => {
                    self.mem.check_range(src, len).map_err(node)?;
                    self.mem.check_range(dst, len).map_err(node)?;
                    let copy = self.helpers()?.copy;
                    specs.push(Spec::helper(copy, len, &[dst, src, len]));
                    launches.push(None);
                    deadline = deadline.saturating_add(HELPER_DEADLINE);
                }
                &GraphOp::Fill { addr, len, value } => {
                    self.mem.check_range(addr, len).map_err(node)?;
                    if !addr.is_multiple_of(4) || !len.is_multiple_of(4) {
                        return Err(node(BackendError::new(
                            ErrorKind::InvalidArgument,
                            "a fill's address and length are multiples of 4",
                        )));
                    }
                    let fill = self.helpers()?.fill;
                    let words = len / 4;
                    specs.push(Spec::helper(fill, words, &[addr, u64::from(value), words]));
                    launches.push(None);
                    deadline = deadline.saturating_add(HELPER_DEADLINE);
                }
            }
        }
        let id = recorded::next_graph_id(&mut self.user_graphs.last_id)?;
        let label: Arc<str> =
            Arc::from(format!("a replay of graph {id} ({} operations)", ops.len()));
        let mut graph: CuGraph = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let r = unsafe { (api.create)(&mut graph, 0) };
        if r != CUDA_SUCCESS {
            return Err(refused(self.drv, "creating a graph", r));
        }
        let mut g = UserGraph {
            graph,
            exec: std::ptr::null_mut(),
            nodes: Vec::with_capacity(specs.len()),
            launches,
            modules,
            deadline,
            label,
        };
        for (i, spec) in specs.iter_mut().enumerate() {
            let (mut extra, mut size) = ([std::ptr::null_mut(); 5], 0usize);
            let p = spec.params(&mut extra, &mut size);
            let (deps, n_deps) = match g.nodes.last() {
                Some(prev) => (prev as *const CuGraphNode, 1),
                None => (std::ptr::null(), 0),
            };
            let mut node: CuGraphNode = std::ptr::null_mut();
            // SAFETY: valid out-pointer; `deps` a node of this graph (or none); `p` and what it
            // points to live across the call, which copies the argument block.
            let r = unsafe { (api.add_kernel_node)(&mut node, graph, deps, n_deps, &p) };
            if r != CUDA_SUCCESS {
                destroy(api, g);
                return Err(refused(self.drv, &format!("graph node {i}"), r));
            }
            g.nodes.push(node);
        }
        // SAFETY: valid out-pointer; a complete graph.
        let r = unsafe { (api.instantiate)(&mut g.exec, graph, 0) };
        if r != CUDA_SUCCESS {
            g.exec = std::ptr::null_mut();
            destroy(api, g);
            return Err(refused(self.drv, "instantiating a graph", r));
        }
        self.user_graphs.graphs.insert(id, g);
        Ok(id)
    }

    pub(super) fn set_user_graph_args(
        &mut self,
        graph: u32,
        node: u32,
        args: &[u8],
    ) -> Result<(), BackendError> {
        self.usable()?;
        let api = graph_api(self.drv)?;
        let g = self.user_graph(graph)?;
        let Some((Some(l), &handle)) = g
            .launches
            .get(node as usize)
            .zip(g.nodes.get(node as usize))
        else {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("graph {graph} has no launch at node {node}"),
            ));
        };
        if args.len() != l.args_len {
            return Err(BackendError::new(
                ErrorKind::LaunchFailed,
                format!(
                    "graph {graph} node {node} takes a {}-byte argument block, {} bytes given",
                    l.args_len,
                    args.len()
                ),
            ));
        }
        let mut spec = Spec::new(l.function, l.grid, l.block, l.shared_mem_bytes, args);
        let (mut extra, mut size) = ([std::ptr::null_mut(); 5], 0usize);
        let p = spec.params(&mut extra, &mut size);
        // SAFETY: a node of the graph `exec` was instantiated from; `p` and what it points to
        // live across the call, which copies the argument block.
        let r = unsafe { (api.set_kernel_node)(g.exec, handle, &p) };
        if r != CUDA_SUCCESS {
            return Err(refused(
                self.drv,
                &format!("updating graph {graph} node {node}"),
                r,
            ));
        }
        Ok(())
    }

    pub(super) fn replay_user_graph(
        &mut self,
        graph: u32,
        times: u32,
        writes: &[u8],
    ) -> Result<(), BackendError> {
        self.usable()?;
        let (exec, deadline, label) = {
            let g = self.user_graph(graph)?;
            (g.exec, g.deadline, Arc::clone(&g.label))
        };
        let stores: Vec<(u64, &[u8])> = recorded::writes(writes)?.collect();
        if !stores.is_empty() {
            for &(addr, _) in &stores {
                self.mem.check_range(addr, 8)?;
            }
            let (store, name) = {
                let h = self.helpers()?;
                (h.store, Arc::clone(&h.store_name))
            };
            let mut blocks: Vec<[Chunk; 1]> = stores
                .iter()
                .map(|&(addr, value)| {
                    let mut c = Chunk([0; 16]);
                    c.0[..8].copy_from_slice(&addr.to_le_bytes());
                    c.0[8..].copy_from_slice(value);
                    [c]
                })
                .collect();
            let ready: Vec<ReadyLaunch> = blocks
                .iter_mut()
                .map(|b| ReadyLaunch {
                    function: store,
                    kernel: Arc::clone(&name),
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_mem_bytes: 0,
                    args: b.as_mut_ptr().cast(),
                    args_len: 16,
                    deadline: HELPER_DEADLINE,
                    ordinal: 0,
                })
                .collect();
            if let Err((_, why)) = self.timeline.launch_all(&ready) {
                let e = match why {
                    super::launch::Refused::Driver { code, .. } => {
                        refused(self.drv, "storing a device scalar", code)
                    }
                    super::launch::Refused::Wait(e) => e,
                };
                return Err(self.fail(e));
            }
        }
        for _ in 0..times {
            self.timeline
                .launch_graph(exec, deadline, &label, self.next_ordinal)
                .map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    pub(super) fn destroy_user_graph(&mut self, graph: u32) -> Result<(), BackendError> {
        let slot = self
            .user_graphs
            .graphs
            .remove(&graph)
            .ok_or_else(|| recorded::no_graph(graph))?;
        if let Ok(api) = graph_api(self.drv) {
            destroy(api, slot);
        }
        Ok(())
    }

    /// Destroys the graphs that launch kernels of `module` (all of them for `None`): before the
    /// module is unloaded, or at reset.
    pub(super) fn destroy_user_graphs_of(&mut self, module: Option<u32>) {
        let Ok(api) = graph_api(self.drv) else { return };
        let doomed: Vec<u32> = self
            .user_graphs
            .graphs
            .iter()
            .filter(|(_, g)| module.is_none_or(|m| g.modules.contains(&m)))
            .map(|(&id, _)| id)
            .collect();
        for id in doomed {
            if let Some(g) = self.user_graphs.graphs.remove(&id) {
                destroy(api, g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HELPERS_PTX;
    use crate::contract::Launch;
    use crate::worker::backend::{Backend, EmuBackend};
    use std::time::Duration;

    fn launch(b: &mut EmuBackend, module: u32, kernel: u32, grid: u32, args: &[u64]) {
        let bytes: Vec<u8> = args.iter().flat_map(|a| a.to_le_bytes()).collect();
        b.launch(&Launch {
            module,
            kernel,
            grid: [grid, 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
            args: &bytes,
            deadline: Duration::from_secs(5),
        })
        .expect("helper runs");
    }

    /// The GPU's graph helpers, run on the emulator: a byte copy of an odd length at odd
    /// offsets, a fill, an 8-byte store, each exactly where asked and nowhere else.
    #[test]
    fn the_graph_helpers_copy_fill_and_store_exactly_their_spans() {
        let mut b = EmuBackend::new(1 << 20, 1);
        let m = b.load_module(HELPERS_PTX).expect("the helpers load");
        let index = |name: &str| m.kernels.iter().position(|k| k.name == name).unwrap() as u32;
        let (copy, fill, store) = (
            index("tasklet_graph_copy"),
            index("tasklet_graph_fill"),
            index("tasklet_graph_store"),
        );
        let src = b.alloc(4096).unwrap();
        let dst = b.alloc(4096).unwrap();
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        b.write(src, &pattern).unwrap();
        // One block of 256 threads loops over 1001 bytes: the grid-stride path.
        launch(&mut b, m.id, copy, 1, &[dst + 5, src + 3, 1001]);
        let mut got = vec![0u8; 4096];
        b.read(dst, &mut got).unwrap();
        assert!(got[..5].iter().all(|&x| x == 0));
        assert_eq!(&got[5..1006], &pattern[3..1004]);
        assert!(got[1006..].iter().all(|&x| x == 0));

        launch(&mut b, m.id, fill, 2, &[dst + 8, 0xdead_beef, 300]);
        b.read(dst, &mut got).unwrap();
        for w in 0..1024usize {
            let word = u32::from_le_bytes(got[4 * w..4 * w + 4].try_into().unwrap());
            if (2..302).contains(&w) {
                assert_eq!(word, 0xdead_beef, "word {w}");
            } else if w >= 302 {
                assert_ne!(word, 0xdead_beef, "word {w} is past the fill");
            }
        }

        launch(&mut b, m.id, store, 1, &[dst + 4000, 0x0123_4567_89ab_cdef]);
        b.read(dst, &mut got).unwrap();
        assert_eq!(&got[4000..4008], &0x0123_4567_89ab_cdefu64.to_le_bytes());
        assert_eq!(got[4008], 0);
    }
}
