//! How long each step of a worker's start took (`TASKLET_WORKER_START_TIMES`).

use std::time::{Duration, Instant};

/// How long each step of a worker's start took, printed to stderr (the host's) when
/// `TASKLET_WORKER_START_TIMES` is set: a machine's driver may take a CUDA process's start
/// one at a time and seconds each, and this says which step.
pub(super) struct StartSteps {
    began: Instant,
    last: Instant,
    steps: Vec<(&'static str, Duration)>,
}

impl StartSteps {
    pub fn new() -> StartSteps {
        let now = Instant::now();
        StartSteps {
            began: now,
            last: now,
            steps: Vec::new(),
        }
    }

    pub fn done(&mut self, step: &'static str) {
        let now = Instant::now();
        self.steps.push((step, now - self.last));
        self.last = now;
    }

    pub fn report(&self, uuid: &str) {
        if std::env::var_os("TASKLET_WORKER_START_TIMES").is_none() {
            return;
        }
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(step, took)| format!("{step} {:.1} ms", took.as_secs_f64() * 1e3))
            .collect();
        eprintln!(
            "tasklet worker {}: started on {uuid} in {:.1} ms: {}",
            std::process::id(),
            self.began.elapsed().as_secs_f64() * 1e3,
            steps.join(", ")
        );
    }
}
