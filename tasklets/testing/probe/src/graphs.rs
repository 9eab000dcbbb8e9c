//! Graphs (contract 0.2's `graph` resource) through the SDK's `Graph`, and hot reload of a module.

use tasklet_gpu::{GraphArgs, LaunchConfig};

use super::{Out, Step, MIB};

/// `add_step(unsigned* x, const unsigned long long* step, unsigned n)`: `x[i] = 3 x[i] + *step`.
const ADD_STEP_PTX: &str = include_str!("add_step.ptx");

const WORDS: usize = 256;

/// `graph <n>`: a graph of one `add_step` over 256 words reading a device scalar, replayed `n`
/// times with the scalar set to the replay's number (1, 2, …) before each → `ok graph <n>
/// replays`; read back against the same steps on the CPU → `ok matches` or `error mismatch
/// index <i>`.
pub(super) fn graph(out: &mut Out, n: u32) -> Step {
    let lease = out.setup(tasklet_gpu::Lease::acquire(MIB, 60))?;
    let session = out.setup(lease.session())?;
    let module = out.setup(session.load_ptx(ADD_STEP_PTX))?;
    let add_step = out.setup(module.kernel("add_step"))?;
    let start: Vec<u32> = (0..WORDS as u32).collect();
    let x = out.setup(session.alloc_from(&start))?;
    let graph = out.setup(session.graph())?;
    let step = out.setup(graph.scalar(0))?;
    let args = GraphArgs::new().arg(&x).scalar(step).arg(WORDS as u32);
    let config = LaunchConfig::for_num_elems(WORDS as u32);
    out.setup(graph.launch(&add_step, config, args))?;
    for r in 1..=n {
        out.setup(graph.set_scalar(step, u64::from(r)))?;
        out.setup(graph.replay(1))?;
    }
    out.ok(format!("graph {n} replays"));
    out.setup(session.sync())?;
    let got = out.setup(x.read())?;
    let want: Vec<u32> = start
        .iter()
        .map(|&v| (1..=n).fold(v, |v, r| v.wrapping_mul(3).wrapping_add(r)))
        .collect();
    match (0..WORDS).find(|&i| got[i] != want[i]) {
        None => out.ok("matches"),
        Some(i) => out.line(format!("error mismatch index {i}")),
    }
    Ok(())
}

/// `reload`: hot reload through the SDK. `add_step` (`x = 3x + step`) over 256 words `0..256`
/// with `step` 7; the module reloaded with `x = 5x + step` → `ok reloaded`; the kernel resolved
/// again and launched; a reload with PTX that does not load → its `error` line; the kernel
/// resolved again and launched once more; the words read back against the CPU (the buffers kept
/// through both reloads, the failed one changing nothing) → `ok matches` or `error mismatch
/// index <i>`.
pub(super) fn reload(out: &mut Out) -> Step {
    let lease = out.setup(tasklet_gpu::Lease::acquire(MIB, 60))?;
    let session = out.setup(lease.session())?;
    let mut module = out.setup(session.load_ptx(ADD_STEP_PTX))?;
    let start: Vec<u32> = (0..WORDS as u32).collect();
    let x = out.setup(session.alloc_from(&start))?;
    let step = out.setup(session.alloc_from(&[7u64]))?;
    let config = LaunchConfig::for_num_elems(WORDS as u32);
    let launch = |out: &mut Out, module: &tasklet_gpu::Module<'_>| -> Step {
        let k = out.setup(module.kernel("add_step"))?;
        out.setup(
            session
                .launch_kernel(&k)
                .config(config)
                .arg(&x)
                .arg(&step)
                .arg(WORDS as u32)
                .run(),
        )
    };
    launch(out, &module)?;
    let times_five = ADD_STEP_PTX.replace("%r7, 3, %r6", "%r7, 5, %r6");
    out.setup(module.reload_ptx(&times_five))?;
    out.ok("reloaded");
    launch(out, &module)?;
    if let Err(e) = module.reload_ptx(".version 7.0\n.target sm_50\nnot ptx at all\n") {
        out.error(&e);
    }
    launch(out, &module)?;
    out.setup(session.sync())?;
    let got = out.setup(x.read())?;
    let want: Vec<u32> = start
        .iter()
        .map(|&v| {
            let v = v.wrapping_mul(3).wrapping_add(7);
            let v = v.wrapping_mul(5).wrapping_add(7);
            v.wrapping_mul(5).wrapping_add(7)
        })
        .collect();
    match (0..WORDS).find(|&i| got[i] != want[i]) {
        None => out.ok("matches"),
        Some(i) => out.line(format!("error mismatch index {i}")),
    }
    Ok(())
}
