//! The line that says where and from what a table was measured: CPU, cores, load, date,
//! commit, backend and device.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// The commit measured: `--commit`, else `TASKLET_COMMIT` (at run time, then at build time),
/// else `git rev-parse --short HEAD` in the checkout, marked `-dirty` when it has uncommitted
/// changes; `unknown` when none of these answers.
pub fn commit(given: Option<&str>, repo: &Path) -> String {
    if let Some(commit) = given {
        return commit.to_owned();
    }
    if let Some(commit) = std::env::var("TASKLET_COMMIT")
        .ok()
        .or(option_env!("TASKLET_COMMIT").map(str::to_owned))
        .filter(|c| !c.is_empty())
    {
        return commit;
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        None => "unknown".into(),
        Some(out) => {
            let head = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|out| !out.stdout.is_empty());
            if dirty {
                format!("{head}-dirty")
            } else {
                head
            }
        }
    }
}

/// The CPU's model name, from /proc/cpuinfo.
pub fn cpu() -> String {
    tasklet_tests::cpu_model()
}

/// The 1-minute load average, from /proc/loadavg: on a shared machine, how busy it was.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The most UDP socket buffer the kernel grants a program (`net.core.rmem_max`, `wmem_max`): what
/// the fabric's 4 MiB and the bare settings' 8 MiB asks are cut to. Small buffers overflow when a
/// receiving thread is late, and a lost packet halves the sender's rate.
pub fn socket_limits() -> String {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|_| "?".into())
    };
    format!(
        "socket buffers the kernel grants at most: receive {} bytes, send {} bytes",
        read("rmem_max"),
        read("wmem_max")
    )
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Today in UTC, `YYYY-MM-DD`.
pub fn date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (Howard Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
