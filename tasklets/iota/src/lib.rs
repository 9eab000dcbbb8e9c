//! `iota`: the whole path once: lease → session → alloc → module load → launch → sync → read.
//!
//! Input: a decimal element count `n` (256 when the input is empty or whitespace).
//! Output: `n` lines, the integers `1..=n`, each followed by `\n`, computed on the device by the
//! `iota` kernel (`out[i] = i + 1`).

use std::fmt::Write as _;

use tasklet_gpu::{input, LaunchConfig, Lease};

const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
const DEFAULT_N: u32 = 256;

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let n = input::count_or(&input, DEFAULT_N)?;
    let values = if n == 0 { Vec::new() } else { iota(n)? };
    let mut out = String::with_capacity(values.len() * 8);
    for v in values {
        writeln!(out, "{v}").expect("writing to a String cannot fail");
    }
    Ok(out.into_bytes())
}

tasklet_gpu::export!(run);

fn iota(n: u32) -> Result<Vec<u32>, tasklet_gpu::Error> {
    let lease = Lease::builder()
        .min_vram_for::<u32>(n as usize)
        .secs(30)
        .acquire()?;
    let session = lease.session()?;
    let out = session.alloc::<u32>(n as usize)?;
    let module = session.load_ptx(IOTA_PTX)?;
    session
        .launch(&module, "iota")
        .config(LaunchConfig::for_num_elems(n))
        .arg(&out)
        .arg(n)
        .run()?;
    session.sync()?;
    out.read()
}
