//! `jacobi`: a fixed number of Jacobi sweeps of the 1-D Laplace equation as a replayed graph.
//!
//! Input: `<n> <steps>` (grid points, at least 3; sweeps, even, at most 8192), default `64 100`.
//! The field starts at 1 on the left end and 0 everywhere else; the ends stay fixed. A graph of
//! two launches of `jacobi_step` (a → b, then b → a) is recorded once and replayed `steps / 2`
//! times; two device scalars hold the numbers of the sweeps a replay makes, set before each
//! replay without recording again, and each sweep stores the midpoint's new value at its number
//! in a history buffer. Output: `history` and the midpoint after each sweep, then `field` and the
//! final field, values in Rust's shortest round-trip form, space-separated, one line each.

use tasklet_gpu::{input, Error, GraphArgs, LaunchConfig, Lease};

const JACOBI_PTX: &str = include_str!("jacobi.ptx");
const MAX_STEPS: u32 = 8192;

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut words = input::text(&input)
        .map_err(|e| e.to_string())?
        .split_whitespace();
    let n: u32 = parse(words.next(), 64, "n")?;
    let steps: u32 = parse(words.next(), 100, "steps")?;
    if n < 3 || !steps.is_multiple_of(2) || steps > MAX_STEPS {
        return Err(format!(
            "need n >= 3 and an even number of steps up to {MAX_STEPS}; got n = {n}, steps = {steps}"
        ));
    }
    let (history, field) = solve(n, steps).map_err(|e| e.to_string())?;
    Ok(format!("history {}\nfield {}\n", join(&history), join(&field)).into_bytes())
}

tasklet_gpu::export!(run);

fn parse(word: Option<&str>, default: u32, what: &str) -> Result<u32, String> {
    word.map_or(Ok(default), |w| {
        w.parse()
            .map_err(|_| format!("{what} must be a whole number, not {w:?}"))
    })
}

fn join(values: &[f32]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn solve(n: u32, steps: u32) -> Result<(Vec<f32>, Vec<f32>), Error> {
    let len = n as usize;
    let lease = Lease::builder()
        .min_vram(4 * (2 * u64::from(n) + u64::from(steps)) + (1 << 20))
        .secs(30)
        .acquire()?;
    let session = lease.session()?;
    let module = session.load_ptx(JACOBI_PTX)?;
    let step = module.kernel("jacobi_step")?;
    let mut start = vec![0.0f32; len];
    start[0] = 1.0;
    // Both buffers hold the fixed ends, as every sweep copies them.
    let (a, b) = (session.alloc_from(&start)?, session.alloc_from(&start)?);
    let history = session.alloc::<f32>(steps.max(1) as usize)?;

    let graph = session.graph()?;
    let (even, odd) = (graph.scalar(0)?, graph.scalar(1)?);
    let config = LaunchConfig::for_num_elems(n);
    graph.launch(
        &step,
        config,
        GraphArgs::new()
            .arg(&a)
            .arg(&b)
            .arg(n)
            .scalar(even)
            .arg(&history),
    )?;
    graph.launch(
        &step,
        config,
        GraphArgs::new()
            .arg(&b)
            .arg(&a)
            .arg(n)
            .scalar(odd)
            .arg(&history),
    )?;
    for pair in 0..u64::from(steps / 2) {
        graph.set_scalar(even, 2 * pair)?;
        graph.set_scalar(odd, 2 * pair + 1)?;
        graph.replay(1)?;
    }
    session.sync()?;
    let history = if steps == 0 {
        Vec::new()
    } else {
        history.read()?
    };
    Ok((history, a.read()?))
}
