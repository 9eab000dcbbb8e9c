//! A worker process's life: read its command line, map the channel the host made, open the
//! backend, say it is ready, serve until the host goes, and exit with a status the host reads.
//!
//! Any binary can become a worker by calling [`serve_main`] with the arguments the pool appended
//! (the CLI runs itself as `tasklet worker …`; this crate ships `tasklet-worker`).

use std::os::fd::{FromRawFd, OwnedFd};
use std::panic::catch_unwind;

use super::attach::Attachments;
use super::backend::{self, BackendOptions};
use super::serve::{panic_message, serve_guests};
use crate::contract::channel::{SharedRegion, WorkerEnd};
use crate::contract::command_line::{WorkerArgs, EXIT_OK, EXIT_START_FAILED, EXIT_USAGE, USAGE};

/// Runs a worker process: parses `args` (the flags only: strip the program name and any
/// subcommand first), serves requests until the host closes the channel or dies, and returns
/// the process exit code.
pub fn serve_main(args: impl Iterator<Item = String>) -> i32 {
    let mut args = args.peekable();
    if args.peek().is_some_and(|a| a == "--inventory") {
        return crate::nvml::inventory_main();
    }
    let a = match WorkerArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tasklet worker: {e}\n{USAGE}");
            return EXIT_USAGE;
        }
    };
    // A host that dies takes its workers with it; one that died before this was armed is seen
    // by the parent check below.
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let host_alive = move || a.host_pid.is_none_or(|p| unsafe { libc::getppid() } == p);
    if !host_alive() {
        return EXIT_OK;
    }
    let region = match SharedRegion::from_fd(a.shm_fd) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tasklet worker: {e}");
            return EXIT_START_FAILED;
        }
    };
    let ctl = match a.ctl_fd.map(owned_socket).transpose() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tasklet worker: --ctl-fd: {e}");
            return EXIT_START_FAILED;
        }
    };
    let mut end = WorkerEnd::new(region);
    let cpu = match super::cpus::from_env(std::process::id()) {
        Ok(cpu) => cpu,
        Err(msg) => {
            end.fail(&msg);
            return EXIT_START_FAILED;
        }
    };
    let (data_ptr, data_len) = end.data_region();
    let opts = BackendOptions {
        device_memory: a.device_memory,
        emu_threads: a.emu_threads,
        null: a.null_backend,
        data_region: Some((data_ptr as usize, data_len)),
        completion_word: Some(end.completion_word()),
    };
    let mut backend = match catch_unwind(|| backend::open(a.backend, &opts)) {
        Ok(Ok(b)) => b,
        Ok(Err(msg)) => {
            end.fail(&msg);
            return EXIT_START_FAILED;
        }
        Err(p) => {
            end.fail(&format!(
                "{} backend panicked while starting: {}",
                a.backend.as_str(),
                panic_message(&*p)
            ));
            return EXIT_START_FAILED;
        }
    };
    // Only the serving thread: the driver's threads and the watchdog, started by now, stay free.
    if let Some(cpu) = cpu {
        if let Err(e) = super::cpus::pin_current_thread(cpu) {
            end.fail(&format!(
                "{}: cannot pin the worker to CPU {cpu}: {e}",
                super::cpus::ENV
            ));
            return EXIT_START_FAILED;
        }
    }
    end.ready();
    let mut guests = Attachments::new(ctl);
    serve_guests(&mut end, backend.as_mut(), &mut guests, &mut { host_alive });
    if backend.persistent_running() {
        // A persistent kernel still runs and may be using attached memory: unmapping it would
        // fault the kernel (the emulator's threads: the whole process) on its next access. The
        // memory stays mapped until the process ends, with the kernel, as this returns.
        std::mem::forget(guests);
        return EXIT_OK;
    }
    // Before the backend goes: it is told to forget each mapping before it is unmapped.
    guests.detach_all(backend.as_mut());
    EXIT_OK
}

/// Takes ownership of the inherited control socket `fd`, checking it is an open socket.
fn owned_socket(fd: i32) -> Result<OwnedFd, String> {
    // SAFETY: fstat on an arbitrary number is harmless; ownership is taken only once it is known
    // to be an open socket.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if fd < 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(format!("fd {fd} is not open"));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(format!("fd {fd} is not a socket"));
    }
    // SAFETY: open, and handed to this process for good.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_main_refuses_bad_usage() {
        assert_eq!(serve_main(["--nope".to_string()].into_iter()), EXIT_USAGE);
    }
}
