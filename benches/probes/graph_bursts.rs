//! Probe: what a burst of launches costs the CPU when it goes to the driver as one CUDA graph of
//! kernel nodes instead of one `cuLaunchKernel` each (the question behind coalescing a worker's
//! batch of ready launches). Raw driver calls on one thread, no worker, no channel.
//!
//! ```text
//! cargo bench -p tasklet-benches --bench graph_bursts [-- BATCHES ROUNDS]
//! ```
//!
//! Rows, µs per launch of `empty()` (1×1) from `kernels/faults.ptx`, median over rounds; each
//! round is BATCHES batches, then one wait for the stream:
//! - `stream`: K × `cuLaunchKernel`;
//! - `stream + event/8`: the same with a `cuEventRecord` after every 8 (what the worker does);
//! - `graph, no update`: one `cuGraphLaunch` of an instantiated chain of K kernel nodes;
//! - `graph, K updates`: `cuGraphExecKernelNodeSetParams` on every node (same values), then launch;
//! - `graph, K changes`: the same with the grid alternating 1 and 2 (an update that changes something);
//! - the one-time cost of building and instantiating a chain of K nodes.
//!
//! Then one launch followed by `cuStreamSynchronize`, pair by pair: through `cuLaunchKernel`,
//! through a one-node graph, and through a one-node graph updated before each launch.

use std::ffi::{c_void, CString};
use std::time::Instant;

use cudarc::driver::{result, sys};

const PTX: &str = include_str!("../../kernels/faults.ptx");

fn check(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

fn params(f: sys::CUfunction, grid: u32) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: f,
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 1,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

struct Chain {
    exec: sys::CUgraphExec,
    nodes: Vec<sys::CUgraphNode>,
}

/// A graph of `k` kernel nodes, each depending on the one before, instantiated.
fn chain(f: sys::CUfunction, k: usize) -> Chain {
    let mut g = std::ptr::null_mut();
    let mut nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(k);
    // SAFETY: valid out-pointers; each dependency is a node of this graph.
    unsafe {
        check(sys::cuGraphCreate(&mut g, 0), "cuGraphCreate");
        for i in 0..k {
            let mut n = std::ptr::null_mut();
            let p = params(f, 1);
            let (deps, ndeps) = if i == 0 {
                (std::ptr::null(), 0)
            } else {
                (&nodes[i - 1] as *const _, 1)
            };
            check(
                sys::cuGraphAddKernelNode_v2(&mut n, g, deps, ndeps, &p),
                "cuGraphAddKernelNode",
            );
            nodes.push(n);
        }
        let mut exec = std::ptr::null_mut();
        check(
            sys::cuGraphInstantiateWithFlags(&mut exec, g, 0),
            "cuGraphInstantiate",
        );
        Chain { exec, nodes }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let batches: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(7);
    if let Err(e) = result::init() {
        println!("skipped: no CUDA device ({e:?})");
        return;
    }
    // SAFETY: device 0's primary context, made current on this thread; valid PTX and names.
    let (stream, f, ev) = unsafe {
        let dev = result::device::get(0).expect("device 0");
        let ctx = result::primary_ctx::retain(dev).expect("primary context");
        result::ctx::set_current(ctx).expect("set current");
        let stream =
            result::stream::create(result::stream::StreamKind::NonBlocking).expect("stream");
        let ptx = CString::new(PTX).expect("no NUL");
        let m = result::module::load_data(ptx.as_ptr() as *const c_void).expect("load PTX");
        let f = result::module::get_function(m, CString::new("empty").unwrap()).expect("empty()");
        let ev = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).expect("event");
        (stream, f, ev)
    };
    let wait = || unsafe { check(sys::cuStreamSynchronize(stream), "sync") };
    let launch = |grid: u32| unsafe {
        check(
            sys::cuLaunchKernel(
                f,
                grid,
                1,
                1,
                1,
                1,
                1,
                0,
                stream,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ),
            "launch",
        )
    };
    println!("{batches} batches a round, {rounds} rounds; µs per launch (median over rounds)");
    println!("| K | stream | stream + event/8 | graph, no update | graph, K updates | graph, K changes | build + instantiate (µs) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for k in [1usize, 2, 4, 8, 16, 32] {
        let t0 = Instant::now();
        let c = chain(f, k);
        let build_us = t0.elapsed().as_secs_f64() * 1e6;
        let mut rows: Vec<Vec<f64>> = vec![Vec::new(); 5];
        for r in 0..rounds + 1 {
            let mut t = [0f64; 5];
            for (row, slot) in t.iter_mut().enumerate() {
                let start = Instant::now();
                for b in 0..batches {
                    match row {
                        0 => (0..k).for_each(|_| launch(1)),
                        1 => {
                            for i in 0..k {
                                launch(1);
                                if (b * k + i) % 8 == 7 {
                                    // SAFETY: a live event, our stream.
                                    unsafe { check(sys::cuEventRecord(ev, stream), "record") };
                                }
                            }
                        }
                        _ => {
                            if row >= 3 {
                                let grid = if row == 4 { 1 + (b as u32 & 1) } else { 1 };
                                for n in &c.nodes {
                                    let p = params(f, grid);
                                    // SAFETY: a node of the graph `exec` was instantiated from.
                                    unsafe {
                                        check(
                                            sys::cuGraphExecKernelNodeSetParams_v2(c.exec, *n, &p),
                                            "set params",
                                        )
                                    };
                                }
                            }
                            // SAFETY: an instantiated graph, our stream.
                            unsafe { check(sys::cuGraphLaunch(c.exec, stream), "graph launch") };
                        }
                    }
                }
                wait();
                *slot = start.elapsed().as_secs_f64() * 1e6 / (batches * k) as f64;
            }
            if r > 0 {
                for (row, v) in t.iter().enumerate() {
                    rows[row].push(*v);
                }
            }
        }
        let m: Vec<String> = rows
            .into_iter()
            .map(|v| format!("{:.2}", median(v)))
            .collect();
        println!("| {k} | {} | {:.0} |", m.join(" | "), build_us);
    }

    // Latency: one launch, then `cuStreamSynchronize`, timed pair by pair.
    let one = chain(f, 1);
    println!();
    println!(
        "one launch + cuStreamSynchronize, µs per pair (p50 of {} pairs, per round)",
        batches * 10
    );
    println!("| round | stream | graph, no update | graph, changed each time |");
    println!("| --- | --- | --- | --- |");
    for r in 0..rounds {
        let mut cols = Vec::new();
        for how in 0..3 {
            let mut t = Vec::with_capacity(batches * 10);
            for i in 0..batches * 10 + 100 {
                let start = Instant::now();
                if how == 0 {
                    launch(1);
                } else {
                    if how == 2 {
                        let p = params(f, 1 + (i as u32 & 1));
                        // SAFETY: the graph's own node.
                        unsafe {
                            check(
                                sys::cuGraphExecKernelNodeSetParams_v2(one.exec, one.nodes[0], &p),
                                "set params",
                            )
                        };
                    }
                    // SAFETY: an instantiated graph, our stream.
                    unsafe { check(sys::cuGraphLaunch(one.exec, stream), "graph launch") };
                }
                wait();
                if i >= 100 {
                    t.push(start.elapsed().as_secs_f64() * 1e6);
                }
            }
            cols.push(format!("{:.2}", median(t)));
        }
        println!("| {r} | {} |", cols.join(" | "));
    }
}
