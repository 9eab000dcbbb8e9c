//! The floor under a warm deployed run: the same component instantiated and called on bare
//! wasmtime engines, configured as the deployer's runner is and otherwise, so that what each
//! configuration choice costs per run can be read side by side.
//!
//! The component is `iota`, called with input `0` (it returns at once, touching no GPU). Its
//! GPU imports are linked to functions that trap, since no call reaches them; WASI is wasmtime's
//! own, set up per run as the runtime sets it up.
//!
//! - `runner config`: on-demand instances, every linear memory a memfd mapping
//!   (`tasklet_runtime::guest_memory`) reused by the next run once zeroed, data segments copied
//!   in: the runner's configuration.
//! - `on-demand, wasmtime memories`: the same without the memory creator; copy-on-write images.
//! - `pooling allocator`: instance, memory and table slots reused across runs (copy-on-write
//!   images, memory kept resident up to a bound).
//!
//! Run: `cargo bench -p tasklet-deploy --bench engine_floor [-- RUNS]` (20,000 by default).

use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let iota = tasklet_tests::tasklet_dir("iota");
    let component = tasklet_runtime::Manifest::load(&iota)
        .expect("iota's manifest parses")
        .component;
    let wasm = std::fs::read(&component).expect("iota was built");

    println!(
        "iota, input 0, {runs} runs each after {} warm-up runs; medians of each phase in µs",
        runs / 10
    );
    println!(
        "{:<34} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}",
        "engine", "setup", "inst", "call", "teardown", "p50 all", "p99 all", "runs/s"
    );
    for (name, config) in [
        ("runner config (memfd memories)", runner_config()),
        ("on-demand, wasmtime memories", on_demand_config()),
        ("pooling allocator", pooling_config()),
    ] {
        let engine = Engine::new(&config).expect("engine");
        let phases = measure(&engine, &wasm, runs);
        let median = |pick: fn(&Phases) -> f64| percentile(phases.iter().map(pick), 0.5);
        let total = |p: &Phases| p.setup + p.instantiate + p.call + p.teardown;
        let sum: f64 = phases.iter().map(total).sum();
        println!(
            "{name:<34} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>8.1} {:>8.0}",
            median(|p| p.setup),
            median(|p| p.instantiate),
            median(|p| p.call),
            median(|p| p.teardown),
            percentile(phases.iter().map(total), 0.5),
            percentile(phases.iter().map(total), 0.99),
            runs as f64 / (sum / 1e6),
        );
    }
}

/// One run's phases, in µs: WASI and the store set up; instantiation; the call; dropping the
/// store (the instance's memories and tables released).
struct Phases {
    setup: f64,
    instantiate: f64,
    call: f64,
    teardown: f64,
}

fn percentile(samples: impl Iterator<Item = f64>, q: f64) -> f64 {
    let mut sorted: Vec<f64> = samples.collect();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}
fn runner_config() -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .with_host_memory(tasklet_runtime::guest_memory::creator())
        .memory_init_cow(false);
    config
}

fn on_demand_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true).epoch_interruption(true);
    config
}

fn pooling_config() -> Config {
    let mut pool = PoolingAllocationConfig::default();
    // Slots for a few runs at once; a warm run's memory is reset by `madvise` up to this much
    // and kept mapped.
    pool.total_component_instances(16)
        .total_core_instances(64)
        .total_memories(32)
        .total_tables(64)
        .linear_memory_keep_resident(128 << 10)
        .table_keep_resident(16 << 10);
    let mut config = on_demand_config();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Each run's phases, as the runner's: WASI set up, a fresh store, instantiate, call
/// `run(b"0")`, drop the store.
fn measure(engine: &Engine, wasm: &[u8], runs: usize) -> Vec<Phases> {
    let component = Component::new(engine, wasm).expect("iota compiles");
    let mut linker = Linker::<State>::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("WASI links");
    linker
        .define_unknown_imports_as_traps(&component)
        .expect("GPU imports stubbed");
    let pre = linker.instantiate_pre(&component).expect("iota links");
    let once = || {
        let t0 = Instant::now();
        let wasi = WasiCtxBuilder::new()
            .stdout(wasmtime_wasi::cli::stderr())
            .inherit_stderr()
            .build();
        let state = State {
            wasi,
            table: ResourceTable::new(),
        };
        let mut store = Store::new(engine, state);
        store.set_epoch_deadline(u64::MAX / 2);
        let t1 = Instant::now();
        let instance = pre.instantiate(&mut store).expect("instantiates");
        let t2 = Instant::now();
        let run = instance
            .get_typed_func::<(&[u8],), (Result<Vec<u8>, String>,)>(&mut store, "run")
            .expect("exports run");
        let (result,) = run.call(&mut store, (b"0",)).expect("runs");
        assert_eq!(result, Ok(Vec::new()));
        let t3 = Instant::now();
        drop(store);
        let t4 = Instant::now();
        Phases {
            setup: micros(t1 - t0),
            instantiate: micros(t2 - t1),
            call: micros(t3 - t2),
            teardown: micros(t4 - t3),
        }
    };
    for _ in 0..runs / 10 {
        once();
    }
    (0..runs).map(|_| once()).collect()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
