//! `stream-pipeline`: chunked writes, kernels and reads pipelined over two streams.
//!
//! Input: `<chunks> <chunk-len>` (default `8 4096`; at most 64 chunks of at most 1 Mi elements).
//! Element `i` of the data is `i % 1000`. Chunk by chunk, a copy stream writes the chunk to the
//! device and records an event; a compute stream waits for it, scales the chunk by 3 (`scale`)
//! and records a second event; the copy stream waits for that and reads the chunk back. While
//! the compute stream works on one chunk, the copy stream is free to write the next. Output:
//! `chunks <n> elements <total> sum <sum of the results>` and `elapsed-ns <ns>` (the compute
//! stream's device time between two events around the whole run), one line each.

use tasklet_gpu::{input, Error, LaunchConfig, Lease};

const SCALE_PTX: &str = include_str!("../../../kernels/scale.ptx");
const FACTOR: f32 = 3.0;

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut words = input::text(&input)?.split_whitespace();
    let chunks: usize = parse(words.next(), 8, "chunks")?;
    let chunk: usize = parse(words.next(), 4096, "chunk-len")?;
    if chunks == 0 || chunks > 64 || chunk == 0 || chunk > 1 << 20 {
        return Err(format!(
            "need 1 to 64 chunks of 1 to 1048576 elements; got {chunks} of {chunk}"
        ));
    }
    let (sum, elapsed) = pipeline(chunks, chunk).map_err(|e| e.to_string())?;
    Ok(format!(
        "chunks {chunks} elements {} sum {sum}\nelapsed-ns {}\n",
        chunks * chunk,
        elapsed.as_nanos()
    )
    .into_bytes())
}

tasklet_gpu::export!(run);

fn parse(word: Option<&str>, default: usize, what: &str) -> Result<usize, String> {
    word.map_or(Ok(default), |w| {
        w.parse()
            .map_err(|_| format!("{what} must be a whole number, not {w:?}"))
    })
}

fn pipeline(chunks: usize, chunk: usize) -> Result<(u64, core::time::Duration), Error> {
    let total = chunks * chunk;
    let lease = Lease::builder()
        .min_vram_for::<f32>(total)
        .secs(30)
        .acquire()?;
    let session = lease.session()?;
    let module = session.load_ptx(SCALE_PTX)?;
    let scale = module.kernel("scale")?;
    let x = session.alloc::<f32>(total)?;
    let (copies, compute) = (session.stream()?, session.stream()?);
    let (written, scaled) = (session.event()?, session.event()?);
    let (start, end) = (session.event()?, session.event()?);
    let data: Vec<f32> = (0..total).map(|i| (i % 1000) as f32).collect();

    compute.record(&start)?;
    let mut sum = 0u64;
    for c in 0..chunks {
        let at = c * chunk;
        copies.write(&x, at, &data[at..at + chunk])?;
        copies.record(&written)?;
        compute.wait(&written)?;
        session
            .launch_kernel(&scale)
            .on(&compute)
            .config(LaunchConfig::for_num_elems(chunk as u32))
            .arg_at_elem(&x, at)
            .arg(FACTOR)
            .arg(chunk as u32)
            .run()?;
        compute.record(&scaled)?;
        copies.wait(&scaled)?;
        // Whole numbers below 3000: exact in f32.
        sum += copies
            .read(&x, at..at + chunk)?
            .into_iter()
            .map(|v| v as u64)
            .sum::<u64>();
    }
    compute.record(&end)?;
    compute.synchronize()?;
    Ok((sum, end.elapsed_since(&start)?))
}
