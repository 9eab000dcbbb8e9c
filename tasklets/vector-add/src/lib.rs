//! `vector-add`: a persistent session: three buffers stay on the device while several kernels run
//! on them, and only the result comes back.
//!
//! Input: a decimal element count `n` (1024 when the input is empty or whitespace).
//! On the device: `a[i] = i` and `b[i] = 2i` (`fill_linear` with k = 1 and 2), then
//! `c = a + b` (`vector_add`). Output: one line, the sum of `c` as a `u64`, followed by `\n`.

use tasklet_gpu::{input, LaunchConfig, Lease};

const VECTOR_ADD_PTX: &str = include_str!("../../../kernels/vector_add.ptx");
const DEFAULT_N: u32 = 1024;

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let n = input::count_or(&input, DEFAULT_N)?;
    let sum = if n == 0 { 0 } else { sum_of_a_plus_b(n)? };
    Ok(format!("{sum}\n").into_bytes())
}

tasklet_gpu::export!(run);

fn sum_of_a_plus_b(n: u32) -> Result<u64, tasklet_gpu::Error> {
    let len = n as usize;
    let lease = Lease::builder()
        .min_vram_for::<u32>(len.saturating_mul(3))
        .secs(30)
        .acquire()?;
    let session = lease.session()?;
    let module = session.load_ptx(VECTOR_ADD_PTX)?;
    let (a, b, c) = (
        session.alloc::<u32>(len)?,
        session.alloc::<u32>(len)?,
        session.alloc::<u32>(len)?,
    );
    let config = LaunchConfig::for_num_elems(n);
    session
        .launch(&module, "fill_linear")
        .config(config)
        .arg(&a)
        .arg(1u32)
        .arg(n)
        .run()?;
    session
        .launch(&module, "fill_linear")
        .config(config)
        .arg(&b)
        .arg(2u32)
        .arg(n)
        .run()?;
    session
        .launch(&module, "vector_add")
        .config(config)
        .arg(&a)
        .arg(&b)
        .arg(&c)
        .arg(n)
        .run()?;
    session.sync()?;
    Ok(c.read()?.into_iter().map(u64::from).sum())
}
