//! Graphs on a [`LocalGpu`]: a session's operations recorded once, checked as they are recorded,
//! and replayed as a whole by the lease's worker (cuda: one instantiated CUDA graph, updated in
//! place when a launch's arguments change; the emulator: the ops one by one).
//!
//! The host keeps what each node uses (its buffers, its module) and checks at every replay that
//! the session still holds them: a graph never reaches memory the session freed, nor a module it
//! unloaded. Device scalars are 8-byte slots of one buffer the graph allocates under the lease
//! (charged to it like any buffer, never handed to the tasklet); a new value is sent with the
//! next replay and written before it, in order with the session's other work.

use super::{span, LocalGpu, Session};
use crate::config::Right;
use crate::error::{invalid, GpuError};
use crate::gpu::types::{
    BufferId, GraphArg, GraphId, KernelArg, KernelRef, LaunchConfig, ModuleId, SessionId,
    MAX_GRAPH_NODES, MAX_GRAPH_REPLAYS, MAX_GRAPH_SCALARS, MAX_SESSION_GRAPHS,
    MAX_SESSION_GRAPH_ARG_BYTES,
};
use std::time::Duration;
use tasklet_worker::contract::messages::GraphOp;
use tasklet_worker::Launch;

/// A graph as the service remembers it.
#[derive(Default)]
pub(super) struct Graph {
    nodes: Vec<Node>,
    /// The worker's instantiated graph, made at the first replay and dropped when the recording
    /// changes (a node added, a module unloaded).
    worker: Option<u32>,
    /// The buffer of the graph's device scalars, once it has one, and their values.
    scalars: Option<BufferId>,
    values: Vec<u64>,
    /// Scalars set since the last replay (sent with the next).
    dirty: Vec<u32>,
}

/// One recorded op, with what it uses: buffers by id and device address (a replay checks the
/// session still holds each at that address).
struct Node {
    op: NodeOp,
    buffers: Vec<(BufferId, u64)>,
}

enum NodeOp {
    Launch {
        module: ModuleId,
        /// The worker's module id and the kernel's place in it.
        worker_module: u32,
        kernel: u32,
        config: LaunchConfig,
        block: Vec<u8>,
        deadline: Duration,
    },
    Copy {
        dst: u64,
        src: u64,
        len: u64,
    },
    Fill {
        addr: u64,
        len: u64,
        value: u32,
    },
}

impl Node {
    fn arg_bytes(&self) -> usize {
        self.op.arg_bytes()
    }
}

impl NodeOp {
    /// The bytes of launch arguments the op holds (counted against
    /// [`MAX_SESSION_GRAPH_ARG_BYTES`]).
    fn arg_bytes(&self) -> usize {
        match self {
            NodeOp::Launch { block, .. } => block.len(),
            _ => 0,
        }
    }
}

impl Session {
    /// Refuses `more` bytes of recorded launch arguments where `freed` are given back, if the
    /// session's graphs would then hold more than [`MAX_SESSION_GRAPH_ARG_BYTES`].
    fn graph_arg_room(&self, more: usize, freed: usize) -> Result<(), GpuError> {
        let held = self.graph_arg_bytes - freed;
        if held + more > MAX_SESSION_GRAPH_ARG_BYTES {
            return Err(invalid(format!(
                "the session's graphs hold {held} bytes of recorded launch arguments, and {more} more would pass the \
                 {MAX_SESSION_GRAPH_ARG_BYTES} (MAX_SESSION_GRAPH_ARG_BYTES) a session's graphs may hold; drop a graph first"
            )));
        }
        Ok(())
    }

    fn graph(&self, id: GraphId) -> Result<&Graph, GpuError> {
        self.graphs.get(&id).ok_or_else(|| foreign_graph(id))
    }

    /// A node's buffer at `offset..offset+len`: its address, checked, noted in `used`.
    fn graph_span(
        &self,
        (buffer, offset): (BufferId, u64),
        len: u64,
        used: &mut Vec<(BufferId, u64)>,
    ) -> Result<u64, GpuError> {
        let (addr, size) = self.buffer(buffer)?;
        used.push((buffer, addr));
        span(addr, size, offset, len)
    }
}

fn foreign_graph(id: GraphId) -> GpuError {
    invalid(format!(
        "graph {id} belongs to another session, or was dropped; a graph is usable only in the session that made it"
    ))
}

impl LocalGpu {
    fn session_mut(&mut self, id: SessionId) -> Result<&mut Session, GpuError> {
        self.sessions
            .get_mut(&id)
            .ok_or_else(|| invalid(format!("no session {id} here")))
    }

    pub(super) fn graph_new(&mut self, session: SessionId) -> Result<GraphId, GpuError> {
        let s = self.session(session)?;
        if s.graphs.len() >= MAX_SESSION_GRAPHS {
            return Err(invalid(format!(
                "this session holds {MAX_SESSION_GRAPHS} graphs, the most it may; drop one first"
            )));
        }
        let id = GraphId(self.ids.fresh());
        self.session_mut(session)?
            .graphs
            .insert(id, Graph::default());
        Ok(id)
    }

    /// Adds `node` to the graph (its instantiated form, if any, is given up: the next replay
    /// makes it again); the node's index.
    fn graph_push(
        &mut self,
        session: SessionId,
        graph: GraphId,
        node: Node,
    ) -> Result<u32, GpuError> {
        let stale = {
            let s = self.session(session)?;
            let g = s.graph(graph)?;
            if g.nodes.len() >= MAX_GRAPH_NODES {
                return Err(invalid(format!(
                    "graph {graph} holds {MAX_GRAPH_NODES} operations, the most one graph may"
                )));
            }
            s.graph_arg_room(node.arg_bytes(), 0)?;
            g.worker
        };
        if let Some(id) = stale {
            self.graph_uninstantiate(session, graph, id);
        }
        let s = self.session_mut(session)?;
        let g = s
            .graphs
            .get_mut(&graph)
            .ok_or_else(|| foreign_graph(graph))?;
        let bytes = node.arg_bytes();
        g.nodes.push(node);
        let index = (g.nodes.len() - 1) as u32;
        s.graph_arg_bytes += bytes;
        Ok(index)
    }

    /// Destroys the worker's form of a graph (best effort: a worker that cannot answer is given
    /// up with its lease, and its graphs with it).
    fn graph_uninstantiate(&mut self, session: SessionId, graph: GraphId, worker_graph: u32) {
        if let Some(s) = self.sessions.get_mut(&session) {
            if let Some(g) = s.graphs.get_mut(&graph) {
                g.worker = None;
            }
            let _ = self
                .manager
                .release_with(&s.lease, |w| w.graph_destroy(worker_graph));
        }
    }

    /// A launch's argument block and the buffers it uses, checked as a launch is.
    fn graph_launch_block(
        &self,
        session: SessionId,
        graph: GraphId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[GraphArg<'_>],
    ) -> Result<(NodeOp, Vec<(BufferId, u64)>), GpuError> {
        let s = self.session(session)?;
        let g = s.graph(graph)?;
        let (m, index) = s.kernel(module, kernel)?;
        let entry = &m.kernels[index];
        // A device scalar is a buffer argument into the graph's scalar buffer.
        let mut lifted = Vec::with_capacity(args.len());
        for (i, arg) in args.iter().enumerate() {
            lifted.push(match *arg {
                GraphArg::Arg(a) => a,
                GraphArg::Scalar(k) => match g.scalars {
                    Some(buffer) if (k as usize) < g.values.len() => KernelArg::Buffer {
                        buffer,
                        offset: 8 * u64::from(k),
                    },
                    _ => {
                        return Err(invalid(format!(
                            "argument {i} names device scalar {k}, and graph {graph} has {}",
                            g.values.len()
                        )))
                    }
                },
            });
        }
        let mut used = Vec::new();
        let mut block = Vec::new();
        entry.argument_block(
            &lifted,
            |id| {
                let b = s.buffer(id)?;
                used.push((id, b.0));
                Ok(b)
            },
            &mut block,
        )?;
        // Kept as long as the graph: no more memory than its bytes.
        block.shrink_to_fit();
        self.check_limits(&s.lease, &entry.info.name, config, block.len())?;
        let op = NodeOp::Launch {
            module,
            worker_module: m.id,
            kernel: index as u32,
            config: *config,
            block,
            deadline: self.usage.deadline(&s.lease, self.grant.kernel_deadline)?,
        };
        Ok((op, used))
    }

    pub(super) fn graph_record_launch(
        &mut self,
        session: SessionId,
        graph: GraphId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[GraphArg<'_>],
    ) -> Result<u32, GpuError> {
        self.need(Right::Launch)?;
        let (op, buffers) =
            self.graph_launch_block(session, graph, module, kernel, config, args)?;
        self.graph_push(session, graph, Node { op, buffers })
    }

    pub(super) fn graph_record_copy(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<u32, GpuError> {
        self.need(Right::Write)?;
        let s = self.session(session)?;
        s.graph(graph)?;
        let mut buffers = Vec::new();
        let to = s.graph_span(dst, len, &mut buffers)?;
        let from = s.graph_span(src, len, &mut buffers)?;
        if from < to.saturating_add(len) && to < from.saturating_add(len) {
            return Err(invalid(
                "a graph's copy may not overlap itself; copy through a second buffer",
            ));
        }
        let op = NodeOp::Copy {
            dst: to,
            src: from,
            len,
        };
        self.graph_push(session, graph, Node { op, buffers })
    }

    pub(super) fn graph_record_fill(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        len: u64,
        value: u32,
    ) -> Result<u32, GpuError> {
        self.need(Right::Write)?;
        if !dst.1.is_multiple_of(4) || !len.is_multiple_of(4) {
            return Err(invalid(format!(
                "a fill sets whole 32-bit words: offset {} and length {len} must be multiples of 4",
                dst.1
            )));
        }
        let s = self.session(session)?;
        s.graph(graph)?;
        let mut buffers = Vec::new();
        let addr = s.graph_span(dst, len, &mut buffers)?;
        let op = NodeOp::Fill { addr, len, value };
        self.graph_push(session, graph, Node { op, buffers })
    }

    pub(super) fn graph_new_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        value: u64,
    ) -> Result<u32, GpuError> {
        let g = self.session(session)?.graph(graph)?;
        if g.values.len() >= MAX_GRAPH_SCALARS {
            return Err(invalid(format!(
                "graph {graph} holds {MAX_GRAPH_SCALARS} device scalars, the most one graph may"
            )));
        }
        if g.scalars.is_none() {
            // One buffer for all of the graph's scalars, allocated with its first, as the
            // session's own (charged to the lease, freed with the session).
            let buffer =
                crate::gpu::GpuService::mem_alloc(self, session, 8 * MAX_GRAPH_SCALARS as u64)?;
            let s = self.session_mut(session)?;
            if let Some(g) = s.graphs.get_mut(&graph) {
                g.scalars = Some(buffer);
            }
        }
        let g = self
            .session_mut(session)?
            .graphs
            .get_mut(&graph)
            .ok_or_else(|| foreign_graph(graph))?;
        g.values.push(value);
        let k = (g.values.len() - 1) as u32;
        g.dirty.push(k);
        Ok(k)
    }

    pub(super) fn graph_set_scalar_value(
        &mut self,
        session: SessionId,
        graph: GraphId,
        scalar: u32,
        value: u64,
    ) -> Result<(), GpuError> {
        let g = self
            .session_mut(session)?
            .graphs
            .get_mut(&graph)
            .ok_or_else(|| foreign_graph(graph))?;
        let n = g.values.len();
        let slot = g.values.get_mut(scalar as usize).ok_or_else(|| {
            invalid(format!(
                "graph {graph} has {n} device scalars, no #{scalar}"
            ))
        })?;
        *slot = value;
        if !g.dirty.contains(&scalar) {
            g.dirty.push(scalar);
        }
        Ok(())
    }

    pub(super) fn graph_update_args(
        &mut self,
        session: SessionId,
        graph: GraphId,
        node: u32,
        args: &[GraphArg<'_>],
    ) -> Result<(), GpuError> {
        self.need(Right::Launch)?;
        let (module, index, config) = {
            let g = self.session(session)?.graph(graph)?;
            match g.nodes.get(node as usize).map(|n| &n.op) {
                Some(&NodeOp::Launch {
                    module,
                    kernel,
                    config,
                    ..
                }) => (module, kernel, config),
                _ => {
                    return Err(invalid(format!(
                        "graph {graph} has no launch at node {node}"
                    )))
                }
            }
        };
        let (op, buffers) =
            self.graph_launch_block(session, graph, module, KernelRef::At(index), &config, args)?;
        let s = self.session(session)?;
        let replaced = s.graph(graph)?.nodes[node as usize].arg_bytes();
        let bytes = op.arg_bytes();
        s.graph_arg_room(bytes, replaced)?;
        let worker = s.graph(graph)?.worker;
        if let (Some(id), NodeOp::Launch { block, .. }) = (worker, &op) {
            // In place: the instantiated graph takes the new block for its next replays.
            self.run(&s.lease, |w| w.graph_set_args(id, node, block))?;
        }
        let s = self.session_mut(session)?;
        let g = s
            .graphs
            .get_mut(&graph)
            .ok_or_else(|| foreign_graph(graph))?;
        g.nodes[node as usize] = Node { op, buffers };
        s.graph_arg_bytes = s.graph_arg_bytes - replaced + bytes;
        Ok(())
    }

    pub(super) fn graph_run(
        &mut self,
        session: SessionId,
        graph: GraphId,
        times: u32,
    ) -> Result<(), GpuError> {
        self.need(Right::Launch)?;
        if times == 0 || times > MAX_GRAPH_REPLAYS {
            return Err(invalid(format!(
                "a replay call runs a graph 1 to {MAX_GRAPH_REPLAYS} times, not {times}"
            )));
        }
        let s = self.session(session)?;
        let g = s.graph(graph)?;
        if g.nodes.is_empty() {
            return Err(invalid(format!(
                "graph {graph} has recorded nothing to replay"
            )));
        }
        // Everything a node uses must still be the session's, where it was.
        let mut launches = 0u64;
        let mut deadlines = Duration::ZERO;
        for (i, node) in g.nodes.iter().enumerate() {
            for &(id, addr) in &node.buffers {
                if s.buffers.get(&id).map(|b| b.0) != Some(addr) {
                    return Err(invalid(format!(
                        "node {i} of graph {graph} uses buffer {id}, which the session freed since; record the graph again"
                    )));
                }
            }
            if let NodeOp::Launch {
                module, deadline, ..
            } = &node.op
            {
                if !s.modules.contains_key(module) {
                    return Err(invalid(format!(
                        "node {i} of graph {graph} launches a kernel of module {module}, which the session unloaded or reloaded since; record the graph again"
                    )));
                }
                launches += 1;
                deadlines = deadlines.saturating_add(*deadline);
            } else {
                // A copy or a fill: far less than a second for any allocation a lease holds.
                deadlines = deadlines.saturating_add(Duration::from_secs(1));
            }
        }
        let mut writes = Vec::with_capacity(16 * g.dirty.len());
        if let Some(buffer) = g.scalars {
            let (base, _) = s.buffer(buffer)?;
            for &k in &g.dirty {
                writes.extend_from_slice(&(base + 8 * u64::from(k)).to_le_bytes());
                writes.extend_from_slice(&g.values[k as usize].to_le_bytes());
            }
        }
        let id = match g.worker {
            Some(id) => id,
            None => {
                let ops: Vec<GraphOp<'_>> = g.nodes.iter().map(|n| worker_op(&n.op)).collect();
                self.run(&s.lease, |w| w.graph_create(&ops))?
            }
        };
        let replayed = self.run(&s.lease, |w| w.graph_replay(id, times, &writes, deadlines));
        let g = self
            .session_mut(session)?
            .graphs
            .get_mut(&graph)
            .ok_or_else(|| foreign_graph(graph))?;
        g.worker = Some(id);
        replayed?;
        g.dirty.clear();
        self.usage
            .launched_n(launches.saturating_mul(u64::from(times)));
        Ok(())
    }

    pub(super) fn graph_forget(&mut self, session: SessionId, graph: GraphId) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        let Some(g) = s.graphs.remove(&graph) else {
            return;
        };
        // Its recorded arguments' room goes back to the session.
        s.graph_arg_bytes -= g.nodes.iter().map(Node::arg_bytes).sum::<usize>();
        if let Some(id) = g.worker {
            let _ = self.manager.release_with(&s.lease, |w| w.graph_destroy(id));
        }
        if let Some(buffer) = g.scalars {
            crate::gpu::GpuService::mem_free(self, session, buffer);
        }
    }

    /// Gives up the worker's form of every graph of the session that launches a kernel of
    /// `module` (about to be unloaded: an instantiated graph must not outlive its kernels).
    pub(super) fn graphs_before_unload(&mut self, session: SessionId, module: ModuleId) {
        let Some(s) = self.sessions.get(&session) else {
            return;
        };
        let stale: Vec<(GraphId, u32)> = s
            .graphs
            .iter()
            .filter(|(_, g)| {
                g.nodes
                    .iter()
                    .any(|n| matches!(n.op, NodeOp::Launch { module: m, .. } if m == module))
            })
            .filter_map(|(&id, g)| g.worker.map(|w| (id, w)))
            .collect();
        for (graph, worker_graph) in stale {
            self.graph_uninstantiate(session, graph, worker_graph);
        }
    }
}

/// A node as the worker records it.
fn worker_op(op: &NodeOp) -> GraphOp<'_> {
    match op {
        NodeOp::Launch {
            worker_module,
            kernel,
            config,
            block,
            deadline,
            ..
        } => GraphOp::Launch(Launch {
            module: *worker_module,
            kernel: *kernel,
            grid: config.grid,
            block: config.block,
            shared_mem_bytes: config.shared_mem_bytes,
            args: block,
            deadline: *deadline,
        }),
        &NodeOp::Copy { dst, src, len } => GraphOp::Copy { dst, src, len },
        &NodeOp::Fill { addr, len, value } => GraphOp::Fill { addr, len, value },
    }
}

/// The worker's graphs of a session being dropped, to destroy before its modules are unloaded.
pub(super) fn worker_graphs(s: &Session) -> impl Iterator<Item = u32> + '_ {
    s.graphs.values().filter_map(|g| g.worker)
}
