//! Streams and events (contract 0.2): a pipeline through the SDK's `Stream` and `Event`, and the
//! misuses the host must refuse, through the raw bindings where the SDK would refuse first.

use tasklet_gpu::{Error, LaunchConfig};

use super::{Out, Step, MIB, SCALE_PTX};

/// Elements in each chunk.
const CHUNK: usize = 256;

/// `streams <n>`: `n` chunks, chunk `c` all `c + 1`: each written on a copy stream, an event
/// recorded after it, waited on by a compute stream that scales the chunk by 2 →
/// `ok pipelined <n> chunks`; the compute stream's work timed between two events →
/// `ok elapsed <ns>`; read back → `ok matches` or `error mismatch index <i>`; new streams until
/// refused → `ok stream limit <count>` (with the refusal's kind) or the unexpected line; the same
/// for events → `ok event limit <count>`; another session's event recorded on this session's
/// stream → `ok foreign event refused <kind>` or `error foreign event accepted`.
pub(super) fn streams(out: &mut Out, n: usize) -> Step {
    let n = n.max(1);
    let lease = out.setup(tasklet_gpu::Lease::acquire(
        (n * CHUNK * 4) as u64 + MIB,
        60,
    ))?;
    let session = out.setup(lease.session())?;
    let module = out.setup(session.load_ptx(SCALE_PTX))?;
    let scale = out.setup(module.kernel("scale"))?;
    let x = out.setup(session.alloc::<f32>(n * CHUNK))?;
    let (copies, compute) = (out.setup(session.stream())?, out.setup(session.stream())?);
    let written = [out.setup(session.event())?, out.setup(session.event())?];
    let (start, end) = (out.setup(session.event())?, out.setup(session.event())?);

    out.setup(compute.record(&start))?;
    for c in 0..n {
        let ev = &written[c % 2];
        out.setup(copies.write(&x, c * CHUNK, &[(c + 1) as f32; CHUNK]))?;
        out.setup(copies.record(ev))?;
        out.setup(compute.wait(ev))?;
        out.setup(
            session
                .launch_kernel(&scale)
                .on(&compute)
                .config(LaunchConfig::for_num_elems(CHUNK as u32))
                .arg_at_elem(&x, c * CHUNK)
                .arg(2.0f32)
                .arg(CHUNK as u32)
                .run(),
        )?;
    }
    out.setup(compute.record(&end))?;
    out.setup(compute.synchronize())?;
    out.ok(format!("pipelined {n} chunks"));
    if out.step(end.query(), |r| format!("query {r}")).is_none() {
        return Ok(());
    }
    out.step(end.elapsed_since(&start), |d| {
        format!("elapsed {}", d.as_nanos())
    });
    let got = out.setup(compute.read(&x, ..))?;
    match (0..n * CHUNK).find(|&i| got[i] != ((i / CHUNK + 1) * 2) as f32) {
        Some(i) => out.line(format!("error mismatch index {i}")),
        None => out.ok("matches"),
    }

    // Limits: two streams and four events are held already.
    let mut more = Vec::new();
    let refusal = loop {
        match session.stream() {
            Ok(s) if more.len() < 64 => more.push(s),
            Ok(_) => break None,
            Err(e) => break Some(e),
        }
    };
    limit_line(out, "stream", more.len() + 2, refusal);
    drop(more);
    let mut more = Vec::new();
    let refusal = loop {
        match session.event() {
            Ok(e) if more.len() < 256 => more.push(e),
            Ok(_) => break None,
            Err(e) => break Some(e),
        }
    };
    limit_line(out, "event", more.len() + 4, refusal);
    drop(more);

    // Another session's event named on this session's stream: the host refuses it.
    let other = out.setup(lease.session())?;
    let theirs = out.setup(other.event())?;
    match copies.raw().record(theirs.raw()) {
        Err(e) => out.ok(format!(
            "foreign event refused {}",
            Error::from(e).kind().as_str()
        )),
        Ok(()) => out.line("error foreign event accepted".into()),
    }
    Ok(())
}

fn limit_line(out: &mut Out, what: &str, held: usize, refusal: Option<Error>) {
    match refusal {
        Some(e) => out.ok(format!("{what} limit {held} {}", e.kind().as_str())),
        None => out.line(format!("error no {what} limit past {held}")),
    }
}
