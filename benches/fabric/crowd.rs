//! Many clients at once: each on a thread and a connection of its own, with its own lease,
//! session and module, all starting their launch + sync loops together.

use crate::rig::Rig;
use crate::session::Session;
use crate::stats::Samples;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// What the crowd measured.
#[derive(Debug, Default)]
pub struct Crowd {
    /// Every client's launch + sync pairs.
    pub samples: Samples,
    /// Each failed client's error, in client order.
    pub errors: Vec<String>,
    /// From the start line until the last client finished.
    pub wall: Duration,
}

impl Crowd {
    pub fn pairs_per_second(&self) -> f64 {
        self.samples.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// `clients` clients, each `warmup` untimed pairs and then up to `count` timed ones, for at
/// most `budget` after the start line.
pub fn run(rig: &Rig, clients: usize, warmup: usize, count: usize, budget: Duration) -> Crowd {
    let start_line = Barrier::new(clients + 1);
    let mut crowd = Crowd::default();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..clients)
            .map(|i| {
                let start_line = &start_line;
                std::thread::Builder::new()
                    .name(format!("crowd-{i}"))
                    .spawn_scoped(scope, move || {
                        let opened = rig.remote_gpu().and_then(|gpu| Session::open(gpu, 1 << 20));
                        // Every client reaches the start line, ready or not, so none waits
                        // forever.
                        start_line.wait();
                        let mut session = opened?;
                        session.launch_sync(warmup, count, budget, Duration::ZERO)
                    })
            })
            .collect();
        let mut handles = Vec::new();
        for (i, thread) in threads.into_iter().enumerate() {
            match thread {
                Ok(handle) => handles.push((i, handle)),
                Err(e) => {
                    crowd.errors.push(format!("client {i}: no thread: {e}"));
                    // Stands in at the start line for the client that never started.
                    scope.spawn(|| start_line.wait());
                }
            }
        }
        start_line.wait();
        let start = Instant::now();
        for (i, handle) in handles {
            match handle.join() {
                Ok(Ok(samples)) => crowd.samples.extend(samples),
                Ok(Err(e)) => crowd.errors.push(format!("client {i}: {e}")),
                Err(_) => crowd.errors.push(format!("client {i}: panicked")),
            }
        }
        crowd.wall = start.elapsed();
    });
    crowd
}
