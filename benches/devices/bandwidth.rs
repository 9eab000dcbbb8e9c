//! Copies on each device alone, then on both at once: a `MiB`-sized write (tasklet memory to
//! device) and read (back), each device through its own lease and worker.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use tasklet_runtime::gpu::{BufferId, GpuService, LocalGpu, SessionId};
use tasklet_runtime::Host;

use crate::{gbps, median, new_gpu, session_on, verdict, Options, MIB};

/// One device's lease, its buffer and the bytes written to it.
struct Copier {
    gpu: LocalGpu,
    session: SessionId,
    buffer: BufferId,
    data: Vec<u8>,
}

impl Copier {
    fn new(host: &Host, o: &Options, device: u32) -> Result<Copier, String> {
        let bytes = o.mib * MIB;
        let mut gpu = new_gpu(host, o);
        let (_, session) = session_on(&mut gpu, device, bytes)?;
        let buffer = gpu
            .mem_alloc(session, bytes)
            .map_err(|e| format!("alloc on device {device}: {e}"))?;
        let data: Vec<u8> = (0..bytes).map(|i| (i * 31 + device as u64) as u8).collect();
        Ok(Copier {
            gpu,
            session,
            buffer,
            data,
        })
    }

    fn write(&mut self) -> Result<Duration, String> {
        let t = Instant::now();
        self.gpu
            .mem_write(self.session, self.buffer, 0, &self.data)
            .map_err(|e| format!("write: {e}"))?;
        Ok(t.elapsed())
    }

    fn read(&mut self) -> Result<Duration, String> {
        let t = Instant::now();
        let back = self
            .gpu
            .mem_read(self.session, self.buffer, 0, self.data.len() as u64)
            .map_err(|e| format!("read: {e}"))?;
        let took = t.elapsed();
        if back != self.data {
            return Err("the bytes read back differ from those written".into());
        }
        Ok(took)
    }

    /// `reps` writes then `reps` reads (after one of each untimed), each begun when every
    /// copier at `start` is ready.
    fn run(&mut self, reps: usize, start: &Barrier) -> Result<(Duration, Duration), String> {
        self.write()?;
        self.read()?;
        let mut writes = Vec::with_capacity(reps);
        for _ in 0..reps {
            start.wait();
            writes.push(self.write()?);
        }
        let mut reads = Vec::with_capacity(reps);
        for _ in 0..reps {
            start.wait();
            reads.push(self.read()?);
        }
        Ok((median(writes), median(reads)))
    }
}

pub fn measure(host: &Host, o: &Options) -> Result<(), String> {
    println!(
        "## bandwidth: {} MiB copies on each device alone, then on both at once",
        o.mib
    );
    let bytes = o.mib * MIB;
    let mut copiers = [Copier::new(host, o, 0)?, Copier::new(host, o, 1)?];
    let alone: Vec<(Duration, Duration)> = copiers
        .iter_mut()
        .map(|c| c.run(o.reps, &Barrier::new(1)))
        .collect::<Result<_, _>>()?;
    let start = Barrier::new(2);
    let together: Vec<(Duration, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = copiers
            .iter_mut()
            .map(|c| {
                let start = &start;
                s.spawn(move || c.run(o.reps, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a copier panicked".into())))
            .collect::<Result<_, _>>()
    })?;
    println!("| device | write alone | write, both at once | ÷ alone | read alone | read, both at once | ÷ alone |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut worst = f64::INFINITY;
    for (i, ((wa, ra), (wt, rt))) in alone.iter().zip(&together).enumerate() {
        let (w, r) = (
            gbps(bytes, *wt) / gbps(bytes, *wa),
            gbps(bytes, *rt) / gbps(bytes, *ra),
        );
        worst = worst.min(w).min(r);
        println!(
            "| {i} | {:.2} GB/s | {:.2} GB/s | {w:.2}× | {:.2} GB/s | {:.2} GB/s | {r:.2}× |",
            gbps(bytes, *wa),
            gbps(bytes, *wt),
            gbps(bytes, *ra),
            gbps(bytes, *rt),
        );
    }
    println!(
        "target: each device at once ≥ 0.9× alone (medians of {} copies): worst {worst:.2}×: {}",
        o.reps,
        verdict(worst >= 0.9)
    );
    println!();
    Ok(())
}
