//! Graphs (contract 0.2's `graph` resource) through a tasklet's GPU service on this node
//! (`LocalGpu`) and through the probe tasklet (the SDK's `Graph`), on the suite's backend: a
//! replayed graph leaves exactly what its operations run one by one leave, device scalars and
//! recorded arguments change between replays without recording again, and a graph holds only
//! its session's own buffers, kernels and graphs, within its limits.

use tasklet_runtime::gpu::{
    BufferId, GpuService, GraphArg, GraphId, KernelArg, KernelRef, LaunchConfig, LeaseId, LocalGpu,
    ModuleId, SessionId, MAX_GRAPH_NODES, MAX_GRAPH_REPLAYS, MAX_GRAPH_SCALARS, MAX_LEASE_SESSIONS,
    MAX_SESSION_GRAPH_ARG_BYTES,
};
use tasklet_runtime::{GpuError, Host};
use tasklet_tests::{assert_baseline, run_probe, test_host};

/// `add_step(unsigned* x, const unsigned long long* step, unsigned n)`: `x[i] = 3 x[i] + *step`
/// (the low 32 bits of the step), so any change of order or of a step shows in the result. The
/// probe tasklet's graphs and reload steps load the same file.
pub const ADD_STEP_PTX: &str = include_str!("../../../tasklets/testing/probe/src/add_step.ptx");

/// Words in each buffer.
const N: u32 = 1000;

fn config() -> LaunchConfig {
    LaunchConfig {
        grid: [N.div_ceil(256), 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    }
}

struct Rig {
    gpu: LocalGpu,
    lease: LeaseId,
    s: SessionId,
    m: ModuleId,
}

fn rig(host: &Host) -> Rig {
    let (mut gpu, lease, s) = tasklet_tests::probe_lease_session(host, 4 << 20);
    let m = gpu.module_load(s, ADD_STEP_PTX).expect("add_step loads");
    Rig { gpu, lease, s, m }
}

impl Rig {
    /// A buffer of `N` words, `i * 7 + seed` each.
    fn words(&mut self, seed: u32) -> BufferId {
        let b = self.gpu.mem_alloc(self.s, 4 * u64::from(N)).expect("alloc");
        let data: Vec<u8> = (0..N).flat_map(|i| (i * 7 + seed).to_le_bytes()).collect();
        self.gpu.mem_write(self.s, b, 0, &data).expect("write");
        b
    }

    fn read(&mut self, b: BufferId) -> Vec<u8> {
        self.gpu.sync(self.s).expect("sync");
        self.gpu
            .mem_read(self.s, b, 0, 4 * u64::from(N))
            .expect("read")
    }

    fn add_step(&mut self, x: BufferId, step: BufferId) {
        let args = [buf(x), buf(step), KernelArg::U32(N)];
        self.gpu
            .launch_kernel(self.s, self.m, KernelRef::At(0), &config(), &args)
            .expect("launch");
    }

    fn record_add_step(&mut self, g: GraphId, x: BufferId, step: GraphArg<'static>) -> u32 {
        let args = [
            GraphArg::Arg(buf(x)),
            step,
            GraphArg::Arg(KernelArg::U32(N)),
        ];
        self.gpu
            .graph_launch(self.s, g, self.m, KernelRef::At(0), &config(), &args)
            .expect("record launch")
    }
}

fn buf(buffer: BufferId) -> KernelArg<'static> {
    KernelArg::Buffer { buffer, offset: 0 }
}

/// A graph of launches (reading a device scalar), a copy and a fill, replayed with the scalar
/// and a launch's arguments changed between replays, against the same operations one by one
/// (the scalar then an ordinary buffer written before each round).
#[test]
fn a_replayed_graph_leaves_what_its_operations_one_by_one_leave() {
    let host = test_host!();
    let mut r = rig(&host);
    let (gx, gy, gf) = (r.words(1), r.words(2), r.words(3));
    let (x, y, f) = (r.words(1), r.words(2), r.words(3));
    let step = r.gpu.mem_alloc(r.s, 8).expect("alloc");

    let g = r.gpu.graph_create(r.s).expect("graph");
    let k = r.gpu.graph_scalar(r.s, g, 1).expect("scalar");
    r.record_add_step(g, gx, GraphArg::Scalar(k));
    r.gpu
        .graph_copy(r.s, g, (gy, 0), (gx, 0), 4 * u64::from(N))
        .expect("record copy");
    let second = r.record_add_step(g, gy, GraphArg::Scalar(k));
    r.gpu
        .graph_fill(r.s, g, (gf, 40), 400, 0xdead_beef)
        .expect("record fill");

    // The same, one by one: `rounds` times with the step `value`.
    let one_by_one = |r: &mut Rig, value: u64, rounds: u32, second_on: BufferId| {
        r.gpu
            .mem_write(r.s, step, 0, &value.to_le_bytes())
            .expect("write step");
        for _ in 0..rounds {
            r.add_step(x, step);
            r.gpu
                .mem_copy(r.s, (y, 0), (x, 0), 4 * u64::from(N))
                .expect("copy");
            r.add_step(second_on, step);
            let fill: Vec<u8> = (0..100)
                .flat_map(|_| 0xdead_beefu32.to_le_bytes())
                .collect();
            r.gpu.mem_write(r.s, f, 40, &fill).expect("fill");
        }
    };

    let launches = |r: &Rig| r.gpu.usage().stats().launches;
    let before = launches(&r);
    r.gpu.graph_replay(r.s, g, 3).expect("replay");
    // The holder's figures (`run --stats`) count each launch of each replay.
    assert_eq!(launches(&r) - before, 2 * 3);
    one_by_one(&mut r, 1, 3, y);
    r.gpu.graph_set_scalar(r.s, g, k, 10).expect("set scalar");
    r.gpu.graph_replay(r.s, g, 2).expect("replay");
    one_by_one(&mut r, 10, 2, y);
    // The second launch now works on x instead of y, for the next replays.
    let moved = [
        GraphArg::Arg(buf(gx)),
        GraphArg::Scalar(k),
        GraphArg::Arg(KernelArg::U32(N)),
    ];
    r.gpu
        .graph_set_args(r.s, g, second, &moved)
        .expect("set args");
    r.gpu
        .graph_set_scalar(r.s, g, k, 1 << 20)
        .expect("set scalar");
    r.gpu.graph_replay(r.s, g, 4).expect("replay");
    one_by_one(&mut r, 1 << 20, 4, x);

    for (graph, plain, what) in [(gx, x, "x"), (gy, y, "y"), (gf, f, "the filled buffer")] {
        let (a, b) = (r.read(graph), r.read(plain));
        assert!(
            a == b,
            "{what} differs between the graph and the operations one by one"
        );
    }
    // Not vacuous: the words moved.
    assert_ne!(r.read(x)[..8], 1u32.to_le_bytes().repeat(2)[..]);
    r.gpu.graph_drop(r.s, g);
    drop(r);
    assert_baseline(&host);
}

fn refused(r: Result<impl std::fmt::Debug, GpuError>, says: &str) {
    match r {
        Err(GpuError::InvalidArgument(m)) | Err(GpuError::OutOfBounds(m)) if m.contains(says) => {}
        other => panic!("expected a refusal saying {says:?}, got {other:?}"),
    }
}

/// A graph holds only its session's own buffers, kernels and graphs; what it recorded must still
/// be the session's at replay; and its limits bite.
#[test]
fn a_graph_holds_only_its_sessions_own_things_within_its_limits() {
    let host = test_host!();
    let mut r = rig(&host);
    let mut other = rig(&host);
    let mine = r.words(0);
    let theirs = other.words(0);
    let g = r.gpu.graph_create(r.s).expect("graph");
    let k = r.gpu.graph_scalar(r.s, g, 0).expect("scalar");
    let args = |b| {
        [
            GraphArg::Arg(buf(b)),
            GraphArg::Scalar(k),
            GraphArg::Arg(KernelArg::U32(N)),
        ]
    };
    // Another session's buffer, kernel (its module), graph.
    refused(
        r.gpu
            .graph_launch(r.s, g, r.m, KernelRef::At(0), &config(), &args(theirs)),
        "another session",
    );
    refused(
        r.gpu
            .graph_launch(r.s, g, other.m, KernelRef::At(0), &config(), &args(mine)),
        "another session",
    );
    refused(
        r.gpu.graph_copy(r.s, g, (mine, 0), (theirs, 0), 4),
        "another session",
    );
    let their_graph = other.gpu.graph_create(other.s).expect("their graph");
    refused(r.gpu.graph_replay(r.s, their_graph, 1), "another session");
    refused(
        r.gpu.graph_launch(
            r.s,
            their_graph,
            r.m,
            KernelRef::At(0),
            &config(),
            &args(mine),
        ),
        "another session",
    );
    // A scalar the graph does not have; spans and shapes a graph refuses.
    refused(
        r.gpu.graph_launch(
            r.s,
            g,
            r.m,
            KernelRef::At(0),
            &config(),
            &[
                GraphArg::Arg(buf(mine)),
                GraphArg::Scalar(5),
                GraphArg::Arg(KernelArg::U32(N)),
            ],
        ),
        "device scalar 5",
    );
    refused(
        r.gpu.graph_copy(r.s, g, (mine, 8), (mine, 0), 16),
        "overlap",
    );
    refused(r.gpu.graph_fill(r.s, g, (mine, 2), 8, 0), "multiples of 4");
    refused(
        r.gpu.graph_fill(r.s, g, (mine, 0), 4 * u64::from(N) + 4, 0),
        "outside",
    );
    refused(r.gpu.graph_replay(r.s, g, 1), "recorded nothing");

    // Recorded, then freed or unloaded: the replay is refused, nothing runs.
    let doomed = r.words(0);
    r.record_add_step(g, mine, GraphArg::Scalar(k));
    r.gpu.graph_replay(r.s, g, 1).expect("replay");
    let spare = r.gpu.graph_create(r.s).expect("graph");
    r.gpu
        .graph_fill(r.s, spare, (doomed, 0), 16, 1)
        .expect("record");
    r.gpu.mem_free(r.s, doomed);
    refused(r.gpu.graph_replay(r.s, spare, 1), "freed");
    let before = r.read(mine);
    r.gpu.module_unload(r.s, r.m);
    refused(r.gpu.graph_replay(r.s, g, 1), "unloaded");
    assert_eq!(r.read(mine), before, "no refused replay ran");

    // The limits.
    refused(r.gpu.graph_replay(r.s, g, 0), "1 to");
    refused(r.gpu.graph_replay(r.s, g, MAX_GRAPH_REPLAYS + 1), "1 to");
    for _ in 1..MAX_GRAPH_SCALARS {
        r.gpu.graph_scalar(r.s, g, 0).expect("scalar");
    }
    refused(r.gpu.graph_scalar(r.s, g, 0), "device scalars, the most");
    let full = r.gpu.graph_create(r.s).expect("graph");
    for _ in 0..MAX_GRAPH_NODES {
        r.gpu
            .graph_fill(r.s, full, (mine, 0), 4, 0)
            .expect("record");
    }
    refused(
        r.gpu.graph_fill(r.s, full, (mine, 0), 4, 0),
        "the most one graph may",
    );
    drop(r);
    drop(other);
    assert_baseline(&host);
}

/// Bytes of `big_args`'s one by-value parameter.
const BIG: usize = 16 << 10;

/// `big_args(struct of BIG bytes)`: a kernel whose every recorded launch holds `BIG` bytes of
/// arguments on the host. Parameters past 4 KiB need PTX 8.1 and sm_70 (the driver's JIT
/// refuses them in older PTX: "uses too much parameter space").
fn big_args_ptx() -> String {
    format!(
        ".version 8.1\n.target sm_70\n.address_size 64\n\n\
         .visible .entry big_args(\n\t.param .align 8 .b8 big_args_p[{BIG}]\n)\n{{\n\tret;\n}}\n"
    )
}

/// A session's graphs hold at most `MAX_SESSION_GRAPH_ARG_BYTES` of recorded launch arguments
/// (a full graph of launches of `BIG` bytes each fits), and a dropped graph gives its room back;
/// a lease has at most `MAX_LEASE_SESSIONS` sessions open, and a dropped one gives its place back.
#[test]
fn sessions_and_their_graphs_recorded_arguments_are_bounded() {
    let host = test_host!();
    let mut r = rig(&host);
    let big = r
        .gpu
        .module_load(r.s, &big_args_ptx())
        .expect("big_args loads");
    let bytes = vec![7u8; BIG];
    let args = [GraphArg::Arg(KernelArg::Bytes(&bytes))];
    let one = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    let fits = MAX_SESSION_GRAPH_ARG_BYTES / BIG;
    assert!(fits <= MAX_GRAPH_NODES, "one full graph fits the budget");
    let full = r.gpu.graph_create(r.s).expect("graph");
    for _ in 0..fits {
        r.gpu
            .graph_launch(r.s, full, big, KernelRef::At(0), &one, &args)
            .expect("a launch within the budget records");
    }
    // Replacing a launch's arguments with as many bytes needs no more room.
    r.gpu.graph_set_args(r.s, full, 0, &args).expect("set args");
    let next = r.gpu.graph_create(r.s).expect("graph");
    refused(
        r.gpu
            .graph_launch(r.s, next, big, KernelRef::At(0), &one, &args),
        "MAX_SESSION_GRAPH_ARG_BYTES",
    );
    // Launches without arguments to keep, copies and fills still record.
    let x = r.words(0);
    r.gpu.graph_fill(r.s, next, (x, 0), 4, 0).expect("fill");
    r.gpu.graph_drop(r.s, full);
    let node = r
        .gpu
        .graph_launch(r.s, next, big, KernelRef::At(0), &one, &args)
        .expect("the dropped graph's room came back");
    r.gpu.graph_replay(r.s, next, 1).expect("replay");
    assert_eq!(node, 1);

    // Sessions per lease: the rig's own is one of them.
    let lease = r.lease;
    let mut more: Vec<SessionId> = (1..MAX_LEASE_SESSIONS)
        .map(|_| {
            r.gpu
                .session_open(lease)
                .expect("a session within the limit")
        })
        .collect();
    refused(r.gpu.session_open(lease), "drop a session first");
    r.gpu.session_drop(more.pop().expect("a session"));
    more.push(
        r.gpu
            .session_open(lease)
            .expect("the dropped session's place came back"),
    );
    for s in more {
        r.gpu.session_drop(s);
    }
    drop(r);
    assert_baseline(&host);
}

/// The probe's `graph` command: the SDK's `Graph` from a tasklet, against the CPU's answer.
#[test]
fn a_tasklet_replays_a_graph_with_a_device_scalar() {
    let host = test_host!();
    let lines = run_probe(&host, "graph 5");
    let text: Vec<String> = lines
        .iter()
        .map(|(a, b, c)| format!("{a} {b} {c}"))
        .collect();
    assert_eq!(text, ["ok graph 5 replays", "ok matches "], "{lines:?}");
    assert_baseline(&host);
}

/// A graph of the most operations a graph may hold goes to the worker whole (one request, larger
/// than most) and replays as its launches one by one would.
#[test]
fn a_graph_of_the_most_operations_replays_whole() {
    let host = test_host!();
    let mut r = rig(&host);
    let x = r.gpu.mem_alloc(r.s, 4 * 32).expect("alloc");
    let ones: Vec<u8> = (0..32u32).flat_map(|i| i.to_le_bytes()).collect();
    r.gpu.mem_write(r.s, x, 0, &ones).expect("write");
    let g = r.gpu.graph_create(r.s).expect("graph");
    let k = r.gpu.graph_scalar(r.s, g, 1).expect("scalar");
    let small = LaunchConfig {
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        GraphArg::Arg(buf(x)),
        GraphArg::Scalar(k),
        GraphArg::Arg(KernelArg::U32(32)),
    ];
    for _ in 0..MAX_GRAPH_NODES {
        r.gpu
            .graph_launch(r.s, g, r.m, KernelRef::At(0), &small, &args)
            .expect("record");
    }
    r.gpu.graph_replay(r.s, g, 1).expect("replay");
    r.gpu.sync(r.s).expect("sync");
    let got = r.gpu.mem_read(r.s, x, 0, 4 * 32).expect("read");
    let want: Vec<u8> = (0..32u32)
        .map(|v| (0..MAX_GRAPH_NODES).fold(v, |v, _| v.wrapping_mul(3).wrapping_add(1)))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert!(got == want, "1024 launches of x = 3x + 1, in order");
    drop(r);
    assert_baseline(&host);
}
