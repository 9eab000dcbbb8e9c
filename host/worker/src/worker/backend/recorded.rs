//! Recorded graphs replayed op by op: how a backend without a graph API of its own (the
//! emulator) serves `graph-create` and `graph-replay`, through its own `launch`, `copy` and
//! `fill`, so a replay does exactly what the ops one by one would.

use super::{Backend, BackendError};
use crate::contract::messages::GraphOp;
use crate::contract::{ErrorKind, Launch};
use std::collections::HashMap;
use std::time::Duration;

/// Graphs a worker may hold at once (each holds host memory the device cap does not count).
pub const MAX_GRAPHS: usize = 1024;

/// One op as recorded: a launch with its own copy of its argument block.
#[derive(Debug, Clone)]
pub enum Op {
    Launch {
        module: u32,
        kernel: u32,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        args: Vec<u8>,
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

impl Op {
    pub fn record(op: &GraphOp<'_>) -> Op {
        match op {
            GraphOp::Launch(l) => Op::Launch {
                module: l.module,
                kernel: l.kernel,
                grid: l.grid,
                block: l.block,
                shared_mem_bytes: l.shared_mem_bytes,
                args: l.args.to_vec(),
                deadline: l.deadline,
            },
            &GraphOp::Copy { dst, src, len } => Op::Copy { dst, src, len },
            &GraphOp::Fill { addr, len, value } => Op::Fill { addr, len, value },
        }
    }

    /// Runs the op on `b`, as the op of the same name would.
    pub fn run(&self, b: &mut dyn Backend) -> Result<(), BackendError> {
        match self {
            Op::Launch {
                module,
                kernel,
                grid,
                block,
                shared_mem_bytes,
                args,
                deadline,
            } => b.launch(&Launch {
                module: *module,
                kernel: *kernel,
                grid: *grid,
                block: *block,
                shared_mem_bytes: *shared_mem_bytes,
                args,
                deadline: *deadline,
            }),
            &Op::Copy { dst, src, len } => b.copy(dst, src, len),
            &Op::Fill { addr, len, value } => b.fill(addr, len, value),
        }
    }
}

/// The graphs of one worker, by id (from 1, never reused). Held by id, so a worker whose tenants
/// make and drop many graphs over a long lease holds only the live ones.
#[derive(Default)]
pub struct Recorded {
    graphs: HashMap<u32, Vec<Op>>,
    last_id: u32,
}

/// The next graph id after `last`: from 1, never reused within a worker's life.
pub fn next_graph_id(last: &mut u32) -> Result<u32, BackendError> {
    *last = last
        .checked_add(1)
        .ok_or_else(|| BackendError::new(ErrorKind::OutOfMemory, "graph ids ran out"))?;
    Ok(*last)
}

/// Refused when a worker holds `live` graphs already.
pub fn room_for_a_graph(live: usize) -> Result<(), BackendError> {
    if live >= MAX_GRAPHS {
        return Err(BackendError::new(
            ErrorKind::OutOfMemory,
            format!("this worker holds {MAX_GRAPHS} graphs, the most it may; destroy one first"),
        ));
    }
    Ok(())
}

impl Recorded {
    /// Records `ops`; its id.
    pub fn create(&mut self, ops: &[GraphOp<'_>]) -> Result<u32, BackendError> {
        room_for_a_graph(self.graphs.len())?;
        let id = next_graph_id(&mut self.last_id)?;
        self.graphs.insert(id, ops.iter().map(Op::record).collect());
        Ok(id)
    }

    fn slot(&mut self, graph: u32) -> Result<&mut Vec<Op>, BackendError> {
        self.graphs.get_mut(&graph).ok_or_else(|| no_graph(graph))
    }

    /// Replaces launch `node`'s argument block.
    pub fn set_args(&mut self, graph: u32, node: u32, new: &[u8]) -> Result<(), BackendError> {
        match self.slot(graph)?.get_mut(node as usize) {
            Some(Op::Launch { args, .. }) => {
                args.clear();
                args.extend_from_slice(new);
                Ok(())
            }
            _ => Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("graph {graph} has no launch at node {node}"),
            )),
        }
    }

    /// Takes graph `graph`'s ops out (for a replay that runs them on the backend holding this),
    /// to be put back with [`Recorded::put_back`].
    pub fn take(&mut self, graph: u32) -> Result<Vec<Op>, BackendError> {
        Ok(std::mem::take(self.slot(graph)?))
    }

    pub fn put_back(&mut self, graph: u32, ops: Vec<Op>) {
        if let Ok(slot) = self.slot(graph) {
            *slot = ops;
        }
    }

    pub fn destroy(&mut self, graph: u32) -> Result<(), BackendError> {
        self.graphs
            .remove(&graph)
            .map(drop)
            .ok_or_else(|| no_graph(graph))
    }

    /// Forgets every graph (a reset). Ids stay unused.
    pub fn clear(&mut self) {
        self.graphs.clear();
    }
}

pub fn no_graph(graph: u32) -> BackendError {
    BackendError::new(ErrorKind::InvalidArgument, format!("no graph {graph} here"))
}

/// Runs `ops` `times` times on `b`: the first failure stops it, naming the replay and the node.
pub fn replay(b: &mut dyn Backend, graph: u32, ops: &[Op], times: u32) -> Result<(), BackendError> {
    for t in 0..times {
        for (i, op) in ops.iter().enumerate() {
            op.run(b).map_err(|e| {
                BackendError::new(
                    e.kind,
                    format!("replay {} of graph {graph}, node {i}: {}", t + 1, e.message),
                )
            })?;
        }
    }
    Ok(())
}

/// The records of a replay's writes, (address, value bytes) each; a length that is not whole
/// records is refused.
pub fn writes(records: &[u8]) -> Result<impl Iterator<Item = (u64, &[u8])>, BackendError> {
    if !records.len().is_multiple_of(16) {
        return Err(BackendError::new(
            ErrorKind::InvalidArgument,
            "a replay's writes are 16-byte records",
        ));
    }
    Ok(records.chunks_exact(16).map(|w| {
        let (addr, value) = w.split_at(8);
        let mut a = [0u8; 8];
        a.copy_from_slice(addr);
        (u64::from_le_bytes(a), value)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids are never reused, a destroyed graph is gone, and the live ones are bounded: a tenant
    /// that makes and drops graphs for a whole lease holds only what is live.
    #[test]
    fn graph_ids_are_fresh_and_only_live_graphs_are_held() {
        let mut r = Recorded::default();
        let mut last = 0;
        for _ in 0..3 * MAX_GRAPHS {
            let id = r.create(&[]).expect("room");
            assert!(id > last, "id {id} after {last}");
            last = id;
            r.destroy(id).expect("destroyed");
            assert!(r.take(id).is_err(), "a destroyed graph is gone");
        }
        assert!(r.graphs.is_empty());
        for _ in 0..MAX_GRAPHS {
            r.create(&[]).expect("room");
        }
        let full = r.create(&[]).expect_err("one past the most live graphs");
        assert_eq!(full.kind, ErrorKind::OutOfMemory);
        r.clear();
        assert!(r.create(&[]).expect("room again") > last);
    }
}
