use super::*;
use crate::contract::channel::{HostEnd, SharedRegion, DEFAULT_DATA_SIZE};
use crate::contract::codec::{decode_response, encode_request};
use crate::contract::{LoadedModule, WorkerInfo};
use std::time::{Duration, Instant};

/// The kernels of the one module the tests launch from (module 1), in index order.
fn kernels() -> Vec<String> {
    ["a", "b", "bad", "c", "d"]
        .into_iter()
        .map(String::from)
        .chain((0..20).map(|i| format!("k{i}")))
        .collect()
}

/// Launches of kernel "bad" fail with `fail_kind`; every op is counted.
struct Scripted {
    fail_kind: ErrorKind,
    /// Module 1's kernels ([`kernels`]).
    kernels: Vec<String>,
    /// Each launch run: its kernel and the ordinal the serving loop gave it.
    launched: Vec<(String, u64)>,
    /// The ordinal of the next launch, as `number_launches_from` last said.
    next: u64,
    /// The length of each slice `launch_batch` was given.
    batches: Vec<usize>,
    frees: u32,
    resets: u32,
    allocs: u32,
}

impl Backend for Scripted {
    fn info(&self) -> WorkerInfo {
        WorkerInfo::default()
    }
    fn alloc(&mut self, _bytes: u64) -> Result<u64, BackendError> {
        self.allocs += 1;
        Ok(0x1000)
    }
    fn free(&mut self, _addr: u64) -> Result<(), BackendError> {
        self.frees += 1;
        Ok(())
    }
    fn write(&mut self, _: u64, _: &[u8]) -> Result<(), BackendError> {
        Ok(())
    }
    fn read(&mut self, _: u64, _: &mut [u8]) -> Result<(), BackendError> {
        Ok(())
    }
    fn copy(&mut self, _: u64, _: u64, _: u64) -> Result<(), BackendError> {
        Ok(())
    }
    fn load_module(&mut self, _: &str) -> Result<LoadedModule, BackendError> {
        Err(BackendError::new(ErrorKind::Unsupported, "no"))
    }
    fn load_source(&mut self, _: &str, _: &[&str]) -> Result<LoadedModule, BackendError> {
        Err(BackendError::new(ErrorKind::Unsupported, "no"))
    }
    fn unload_module(&mut self, _: u32) -> Result<(), BackendError> {
        Ok(())
    }
    fn kernel_name(&self, module: u32, kernel: u32) -> Option<&str> {
        (module == 1)
            .then(|| self.kernels.get(kernel as usize))
            .flatten()
            .map(String::as_str)
    }
    fn launch(&mut self, l: &Launch<'_>) -> Result<(), BackendError> {
        let Some(name) = self.kernel_name(l.module, l.kernel).map(str::to_owned) else {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                "no such kernel",
            ));
        };
        let bad = name == "bad";
        self.launched.push((name, self.next));
        self.next += 1;
        if bad {
            return Err(BackendError::new(self.fail_kind, "refused"));
        }
        Ok(())
    }
    fn launch_batch(&mut self, launches: &[Launch<'_>]) -> Result<(), (usize, BackendError)> {
        self.batches.push(launches.len());
        for (i, l) in launches.iter().enumerate() {
            self.launch(l).map_err(|e| (i, e))?;
        }
        Ok(())
    }
    fn number_launches_from(&mut self, first: u64) {
        self.next = first;
    }
    fn sync(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
    fn reset(&mut self) -> Result<(), BackendError> {
        self.resets += 1;
        Ok(())
    }
}

/// Runs `script` as the host against `serve` on a thread; returns the backend afterwards.
fn run(fail_kind: ErrorKind, script: impl FnOnce(&mut Host)) -> Scripted {
    run_after(fail_kind, |_| {}, script)
}

/// [`run`] with `before` run as the host before the worker starts serving.
fn run_after(
    fail_kind: ErrorKind,
    before: impl FnOnce(&mut Host),
    script: impl FnOnce(&mut Host),
) -> Scripted {
    let region = SharedRegion::create(DEFAULT_DATA_SIZE).unwrap();
    // SAFETY: dup of an fd we own, mapped independently as a child would.
    let worker = SharedRegion::from_fd(unsafe { libc::dup(region.fd()) }).unwrap();
    let mut h = Host {
        end: HostEnd::new(region),
        id: 0,
        kernels: kernels(),
    };
    before(&mut h);
    let t = std::thread::spawn(move || {
        let mut b = Scripted {
            fail_kind,
            kernels: kernels(),
            launched: vec![],
            next: 0,
            batches: vec![],
            frees: 0,
            resets: 0,
            allocs: 0,
        };
        serve(&mut WorkerEnd::new(worker), &mut b, &mut || true);
        b
    });
    script(&mut h);
    h.end.close();
    t.join().unwrap()
}

struct Host {
    end: HostEnd,
    id: u64,
    /// Module 1's kernels, to launch by index as a host does.
    kernels: Vec<String>,
}

impl Host {
    fn launch(&mut self, kernel: &str) {
        let mut f = Vec::new();
        let index = self.kernels.iter().position(|k| k == kernel).unwrap();
        let l = Launch {
            module: 1,
            kernel: index as u32,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            args: &[],
            deadline: Duration::from_nanos(1),
        };
        encode_request(0, &Request::Launch(l), &mut f);
        self.end
            .post(&f, Instant::now() + Duration::from_secs(5), &mut || None)
            .unwrap();
    }

    fn call(&mut self, req: &Request<'_>) -> Response {
        self.id += 1;
        let mut f = Vec::new();
        encode_request(self.id, req, &mut f);
        let deadline = Instant::now() + Duration::from_secs(5);
        let seq = self.end.send(&f, deadline, &mut || None).unwrap();
        let mut out = Vec::new();
        self.end
            .wait(seq, deadline, &mut || None, &mut out)
            .unwrap();
        let (id, resp) = decode_response(&out).unwrap();
        assert_eq!(id, self.id);
        resp
    }
}

/// Whether `r` is the error of launch number `ordinal`, of `kernel`.
fn is_error(r: &Response, kind: ErrorKind, ordinal: u64, kernel: &str) -> bool {
    matches!(r, Response::Error { kind: k, message } if *k == kind
        && message.starts_with(&format!("launch #{ordinal} of kernel `{kernel}` failed: ")))
}

fn launched(named: &[(&str, u64)]) -> Vec<(String, u64)> {
    named.iter().map(|&(k, n)| (k.to_owned(), n)).collect()
}

#[test]
fn a_failed_launch_is_answered_to_the_next_call_instead_of_performing_it() {
    let b = run(ErrorKind::LaunchFailed, |h| {
        h.launch("a");
        h.launch("bad");
        h.launch("c");
        let r = h.call(&Request::Alloc { bytes: 16 });
        assert!(is_error(&r, ErrorKind::LaunchFailed, 2, "bad"), "{r:?}");
        // Reported once.
        assert!(matches!(
            h.call(&Request::Alloc { bytes: 16 }),
            Response::Allocated { .. }
        ));
        // `free` is performed and leaves the error to the next call.
        h.launch("bad");
        assert_eq!(h.call(&Request::Free { addr: 1 }), Response::Ok);
        assert!(is_error(
            &h.call(&Request::Ping),
            ErrorKind::LaunchFailed,
            4,
            "bad"
        ));
        // `reset` is performed and drops it.
        h.launch("bad");
        assert_eq!(h.call(&Request::Reset), Response::Ok);
        assert_eq!(h.call(&Request::Ping), Response::Ok);
        h.launch("d");
        assert_eq!(h.call(&Request::Sync), Response::Ok);
    });
    // "c" (#3) was dropped behind the failure, and counted; the first alloc was not performed;
    // reset started the count again.
    assert_eq!(
        b.launched,
        launched(&[("a", 1), ("bad", 2), ("bad", 4), ("bad", 5), ("d", 1)])
    );
    assert_eq!((b.allocs, b.frees, b.resets), (1, 1, 1));
}

#[test]
fn launches_the_host_got_ahead_with_are_handed_to_the_backend_together() {
    let names: Vec<String> = (0..20)
        .map(|i| {
            if i == 18 {
                "bad".into()
            } else {
                format!("k{i}")
            }
        })
        .collect();
    let b = run_after(
        ErrorKind::LaunchFailed,
        |h| {
            // All posted before the worker looks: it takes them POSTED_BATCH at a time.
            for name in &names {
                h.launch(name);
            }
        },
        |h| {
            assert!(is_error(
                &h.call(&Request::Ping),
                ErrorKind::LaunchFailed,
                19,
                "bad"
            ));
            assert_eq!(h.call(&Request::Ping), Response::Ok);
        },
    );
    assert_eq!(b.batches, [POSTED_BATCH, 20 - POSTED_BATCH]);
    // In order, numbered across both batches, up to and including the failed one; the one behind
    // it dropped.
    let expected: Vec<(String, u64)> = names[..19].iter().cloned().zip(1..).collect();
    assert_eq!(b.launched, expected);
}

#[test]
fn a_malformed_launch_inside_a_batch_ends_it_after_the_launches_before_it() {
    let b = run_after(
        ErrorKind::LaunchFailed,
        |h| {
            h.launch("a");
            h.launch("b");
            h.end
                .post(
                    &[9, 9, 9],
                    Instant::now() + Duration::from_secs(5),
                    &mut || None,
                )
                .unwrap();
            h.launch("c");
        },
        |h| match h.call(&Request::Ping) {
            Response::Error {
                kind: ErrorKind::InvalidArgument,
                message,
            } => assert!(
                message.starts_with("launch #3 failed: malformed posted request"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        },
    );
    assert_eq!(b.batches, [2]);
    assert_eq!(b.launched, launched(&[("a", 1), ("b", 2)]));
}

#[test]
fn a_poisoning_launch_error_answers_every_later_call_reset_included() {
    let b = run(ErrorKind::KernelFault, |h| {
        h.launch("bad");
        for req in [
            Request::Free { addr: 1 },
            Request::Reset,
            Request::Ping,
            Request::Reset,
        ] {
            let r = h.call(&req);
            assert!(
                is_error(&r, ErrorKind::KernelFault, 1, "bad"),
                "{req:?}: {r:?}"
            );
        }
    });
    assert_eq!((b.frees, b.resets), (0, 0));
}

#[test]
fn a_posted_frame_that_is_not_a_launch_is_refused_at_the_next_call() {
    run(ErrorKind::LaunchFailed, |h| {
        let mut f = Vec::new();
        encode_request(0, &Request::Reset, &mut f);
        h.end
            .post(&f, Instant::now() + Duration::from_secs(5), &mut || None)
            .unwrap();
        h.end
            .post(
                &[1, 2, 3],
                Instant::now() + Duration::from_secs(5),
                &mut || None,
            )
            .unwrap();
        match h.call(&Request::Ping) {
            Response::Error {
                kind: ErrorKind::InvalidArgument,
                message,
            } => assert!(message.contains("posted"), "{message}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(h.call(&Request::Ping), Response::Ok);
    });
}

/// A cached load's answer too large for the channel goes back without the compiled code, its
/// refusal of the host's image kept; other answers have no smaller form.
#[test]
fn an_answer_too_large_drops_only_the_compiled_code() {
    let big = Response::CachedModule {
        module: LoadedModule {
            id: 3,
            kernels: Vec::new().into(),
            variable_bytes: 7,
            text_bytes: 0,
        },
        compiled: Compiled {
            ptx: "ptx".into(),
            image: vec![1; 16],
            image_refused: true,
        },
    };
    assert_eq!(
        without_compiled(&big),
        Some(Response::CachedModule {
            module: LoadedModule {
                id: 3,
                kernels: Vec::new().into(),
                variable_bytes: 7,
                text_bytes: 0,
            },
            compiled: Compiled {
                ptx: String::new(),
                image: Vec::new(),
                image_refused: true,
            },
        })
    );
    let bare = without_compiled(&big).expect("smaller");
    assert_eq!(without_compiled(&bare), None, "nothing left to drop");
    assert_eq!(without_compiled(&Response::Ok), None);
}
