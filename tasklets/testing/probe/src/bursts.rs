//! Bursts (contract 0.2's `launch-burst`): through the SDK's `Burst` when it is used as meant,
//! through the raw bindings for what the SDK would refuse before the host sees it.

use tasklet_gpu::raw::sessions::{BufferArg, BurstArg, KernelArg, Session};
use tasklet_gpu::{Arg, KernelArg as _, LaunchConfig};

use super::{acquire, config, Out, Step, MIB, SCALE_PTX};

/// Elements in each row a burst's launch scales.
const ROW: usize = 256;

/// `burst <n>`: `n` rows of ones, one launch of `scale` per row, each with its row's offset and
/// factor (row `r` by `r + 1`), in one burst → `ok burst <n> first <ordinal>`; synced and read
/// back → `ok rows <n>` or `error wrong-result row <r> index <i>`.
pub(super) fn burst(out: &mut Out, n: usize) -> Step {
    let bytes = (n.max(1) * ROW * 4) as u64;
    let lease = out.setup(tasklet_gpu::Lease::acquire(bytes + MIB, 60))?;
    let session = out.setup(lease.session())?;
    let module = out.setup(session.load_ptx(SCALE_PTX))?;
    let scale = out.setup(module.kernel("scale"))?;
    let rows = out.setup(session.alloc_from(&vec![1.0f32; n.max(1) * ROW]))?;
    let mut burst = session
        .burst(&scale)
        .config(LaunchConfig::for_num_elems(ROW as u32))
        .arg(&rows)
        .arg(1.0f32)
        .arg(ROW as u32);
    for r in 0..n {
        burst = burst.launch([
            (0, Arg::buffer_at_elem(&rows, r * ROW)),
            (1, ((r + 1) as f32).into_arg()),
        ]);
    }
    if out
        .step(burst.run(), |first| format!("burst {n} first {first}"))
        .is_none()
    {
        return Ok(());
    }
    out.setup(session.sync())?;
    let got = out.setup(rows.read())?;
    for r in 0..n {
        let want = (r + 1) as f32;
        if let Some(i) = (0..ROW).find(|&i| got[r * ROW + i] != want) {
            out.line(format!("error wrong-result row {r} index {i}"));
            return Ok(());
        }
    }
    out.ok(format!("rows {n}"));
    Ok(())
}

/// `burst-misuse`: bursts of `scale` over a 1 KiB buffer of ones that the host must refuse
/// whole, each → its line: a change of an argument past the kernel's three; launch 2 of 3
/// pointing at a buffer of another session; launch 1 of 2 at an offset past the buffer's end;
/// a burst with no launch; then the buffer is read back → `ok untouched` when no launch of any
/// refused burst ran, or `error touched <index>`.
pub(super) fn burst_misuse(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 30)?;
    let other_lease = acquire(out, MIB, 30)?;
    let session = out.setup(Session::open(&lease))?;
    let other = out.setup(Session::open(&other_lease))?;
    let module = out.setup(session.module_load(SCALE_PTX))?;
    let scale = out.setup(module.kernel("scale"))?;
    let ones: Vec<u8> = (0..256).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    let buf = out.setup(session.mem_alloc(1024))?;
    out.setup(session.mem_write(&buf, 0, &ones))?;
    let foreign = out.setup(other.mem_alloc(1024))?;
    let at = |buffer, offset| KernelArg::Buffer(BufferArg { buffer, offset });
    let args = [at(&buf, 0), KernelArg::F32(2.0), KernelArg::U32(256)];
    let c = config(1, 256);
    let set = |index, arg| BurstArg { index, arg };
    let cases: [(&str, Vec<Vec<BurstArg<'_>>>); 4] = [
        ("index", vec![vec![], vec![set(3, KernelArg::U32(1))]]),
        (
            "foreign",
            vec![vec![], vec![], vec![set(0, at(&foreign, 0))]],
        ),
        ("offset", vec![vec![], vec![set(0, at(&buf, 1025))]]),
        ("empty", vec![]),
    ];
    for (what, launches) in &cases {
        out.step(session.launch_burst(&scale, c, &args, launches), |first| {
            format!("burst {what} first {first}")
        });
    }
    out.setup(session.sync())?;
    let got = out.setup(session.mem_read(&buf, 0, 1024))?;
    match (0..1024).find(|&i| got[i] != ones[i]) {
        None => out.ok("untouched"),
        Some(i) => out.line(format!("error touched {i}")),
    }
    Ok(())
}
