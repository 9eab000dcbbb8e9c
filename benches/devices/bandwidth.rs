//! Copies on each device alone, then on both at once: a `MiB`-sized write (to the device) and
//! read (back), each device through its own lease and worker, from and into memory a worker maps
//! as it maps a tasklet's linear memory (the node's staging memory): one DMA each way on cuda,
//! as a tasklet's large `mem-write` and `mem-read-into` move.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use tasklet_runtime::gpu::{BufferId, GpuService, LocalGpu, SessionId};
use tasklet_runtime::guest_memory::staging::{StagingBuffer, StagingPool};
use tasklet_runtime::Host;

use crate::{gbps, median, new_gpu, session_on, verdict, Options, MIB};

/// One device's lease, its buffer, the bytes written to it (`source`, in mapped memory, and
/// `data`, the same bytes to check against) and the mapped memory reads land in (`sink`).
struct Copier {
    gpu: LocalGpu,
    session: SessionId,
    buffer: BufferId,
    data: Vec<u8>,
    source: StagingBuffer,
    sink: StagingBuffer,
    zeros: Vec<u8>,
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
        let pool = StagingPool::new(data.len(), 2);
        let take = || -> Result<StagingBuffer, String> {
            pool.try_take()
                .map_err(|e| format!("mapped memory: {e}"))?
                .ok_or_else(|| "mapped memory: the pool is empty".to_string())
        };
        let mut source = take()?;
        source.fill_from(&data);
        let sink = take()?;
        Ok(Copier {
            gpu,
            session,
            buffer,
            zeros: vec![0; data.len()],
            data,
            source,
            sink,
        })
    }

    fn write(&mut self) -> Result<Duration, String> {
        let t = Instant::now();
        self.gpu
            .mem_write(self.session, self.buffer, 0, self.source.as_ref())
            .map_err(|e| format!("write: {e}"))?;
        Ok(t.elapsed())
    }

    /// A read into `sink`, cleared first (untimed) so that bytes left from the last read cannot
    /// pass the check.
    fn read(&mut self) -> Result<Duration, String> {
        let len = self.data.len();
        self.sink.clear();
        self.sink.fill_from(&self.zeros);
        let t = Instant::now();
        let into = self.sink.guest_bytes(len);
        self.gpu
            .mem_read_into(self.session, self.buffer, 0, into)
            .map_err(|e| format!("read: {e}"))?;
        let took = t.elapsed();
        if self.sink.as_ref() != self.data.as_slice() {
            return Err("the bytes read back differ from those written".into());
        }
        Ok(took)
    }

    /// `reps` writes then `reps` reads (after one of each untimed: the worker maps and, on cuda,
    /// page-locks the memory on first use), each begun when every copier at `start` is ready.
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
        "## bandwidth: {} MiB copies on each device alone, then on both at once (from and into mapped memory, as a tasklet's)",
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
