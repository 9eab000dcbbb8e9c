//! Pinning a worker's serving thread to a CPU near its GPU.
//!
//! The cost of every driver call that reaches the GPU (a launch's doorbell, a completion poll)
//! depends on which CPU makes it: on the GPU VMs we run on, launch + sync of an empty kernel is
//! consistently slower from some vCPUs than from others (`benches/probes/sync_paths.rs` under
//! `taskset` shows it), though the VM reports a single NUMA node. An operator who knows the good
//! CPUs lists them in `TASKLET_WORKER_CPUS` (the host's environment, which its workers inherit):
//! each worker then pins its serving thread — the one that makes the driver calls — to one of them,
//! chosen by its process id so that workers spread over the list. The driver's own threads and the
//! kernel watchdog stay unpinned. Unset (the default), workers run where the scheduler puts them.

use std::io;

/// The environment variable naming the CPUs workers' serving threads may be pinned to.
pub const ENV: &str = "TASKLET_WORKER_CPUS";

/// Parses a CPU list as the kernel prints them (`0-3,8,10-11`): the CPUs, ascending, no repeats.
pub fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&c| c < libc::CPU_SETSIZE as usize)
                .ok_or_else(|| format!("`{s}` is not a CPU number below {}", libc::CPU_SETSIZE))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None if part.is_empty() => return Err(format!("empty entry in the CPU list `{text}`")),
            None => (num(part)?, num(part)?),
        };
        if lo > hi {
            return Err(format!("the range `{part}` runs backwards"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The CPU this worker's serving thread should run on, from [`ENV`]: None when unset or empty.
/// A value that does not parse is an error for the operator (the worker refuses to start).
pub fn from_env(pid: u32) -> Result<Option<usize>, String> {
    let Some(text) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    let text = text.to_string_lossy();
    if text.trim().is_empty() {
        return Ok(None);
    }
    let cpus = parse_list(&text)
        .map_err(|e| format!("{ENV}={text}: {e} (expected a CPU list such as `0-3,8`)"))?;
    Ok(cpus.get(pid as usize % cpus.len()).copied())
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is past CPU_SETSIZE"),
        ));
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays in bounds (checked above);
    // sched_setaffinity(0) acts on the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_the_kernel_prints_them() {
        assert_eq!(
            parse_list("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_list(" 5 , 2,2 ").unwrap(), vec![2, 5]);
        for bad in ["", "a", "3-1", "1,,2", "-1", "99999", "1-"] {
            assert!(parse_list(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn pinning_moves_the_thread_there() {
        // Whatever CPU this thread may run on now is a CPU it may be pinned to.
        let cpu = unsafe { libc::sched_getcpu() };
        assert!(cpu >= 0);
        std::thread::spawn(move || {
            pin_current_thread(cpu as usize).unwrap();
            for _ in 0..1000 {
                assert_eq!(unsafe { libc::sched_getcpu() }, cpu);
                std::thread::yield_now();
            }
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(libc::CPU_SETSIZE as usize).is_err());
    }
}
