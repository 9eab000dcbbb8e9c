//! The pool with real worker processes (null backend: no device needed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use tasklet_worker::{Pool, WorkerCommand, WorkerError};

fn wait_idle(pool: &Pool, n: usize) {
    assert!(
        eventually(Duration::from_secs(10), || pool.idle() == n),
        "idle stayed {}",
        pool.idle()
    );
}

#[test]
fn warm_workers_start_in_the_background() {
    let pool = Pool::start(pool_config(true, 3, 4)).unwrap();
    wait_idle(&pool, 3);
    assert_eq!(pool.busy(), 0);
    // Acquire is a hand-over, not a process start.
    let t = Instant::now();
    let mut w = pool.acquire().unwrap();
    // A process start with its context takes seconds; a hand-over well under 500 ms even on a
    // loaded machine.
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    w.ping().unwrap();
    assert_eq!(pool.busy(), 1);
    // The replacement tops the warm set back up.
    wait_idle(&pool, 3);
    pool.release(w);
    assert_eq!(pool.busy(), 0);
    assert_eq!(pool.idle(), 3);
}

#[test]
fn no_capacity_when_max_workers_are_busy() {
    let pool = Pool::start(pool_config(true, 1, 2)).unwrap();
    let a = pool.acquire().unwrap();
    let b = pool.acquire().unwrap();
    assert_ne!(a.pid(), b.pid());
    match pool.acquire() {
        Err(WorkerError::NoCapacity(m)) => assert!(m.contains('2'), "{m}"),
        other => panic!("{other:?}"),
    }
    pool.release(a);
    let mut c = pool.acquire().unwrap();
    c.ping().unwrap();
    // Dropping a leased worker without release also gives its slot back (and kills it).
    let pid = b.pid();
    drop(b);
    assert!(!pid_exists(pid));
    assert_eq!(pool.busy(), 1);
    let mut d = pool.acquire().unwrap();
    d.ping().unwrap();
    assert_eq!(pool.busy(), 2);
}

#[test]
fn healthy_workers_are_reused_after_release() {
    let pool = Pool::start(pool_config(true, 1, 1)).unwrap();
    let w = pool.acquire().unwrap();
    let pid = w.pid();
    wait_idle(&pool, 1);
    pool.release(w);
    assert_eq!(pool.idle(), 1);
    let mut w = pool.acquire().unwrap();
    assert_eq!(w.pid(), pid, "the released worker is handed out again");
    w.ping().unwrap();
}

#[test]
fn killed_worker_is_lost_and_replaced() {
    let pool = Pool::start(pool_config(true, 1, 1)).unwrap();
    let mut w = pool.acquire().unwrap();
    w.ping().unwrap();
    let pid = w.pid();
    kill9(pid);
    let t = Instant::now();
    assert!(matches!(w.ping(), Err(WorkerError::Lost(_))));
    assert!(t.elapsed() < Duration::from_millis(200));
    pool.release(w);
    assert_eq!(pool.busy(), 0);
    let mut w = pool.acquire().unwrap();
    assert_ne!(w.pid(), pid);
    w.ping().unwrap();
}

#[test]
fn idle_worker_killed_from_outside_is_skipped_and_replaced() {
    let pool = Pool::start(pool_config(true, 2, 2)).unwrap();
    let w = pool.acquire().unwrap();
    let dead = w.pid();
    wait_idle(&pool, 2);
    pool.release(w); // goes to the front of the idle set
    kill9(dead);
    wait_dead(dead);
    let mut w = pool.acquire().unwrap();
    assert_ne!(w.pid(), dead);
    w.ping().unwrap();
    // The background sweep also notices idle deaths and restores the warm count.
    pool.release(w);
    wait_idle(&pool, 2);
}

#[test]
fn hung_worker_is_lost_after_op_timeout_and_replaced() {
    let mut cfg = pool_config(true, 1, 1);
    cfg.op_timeout = Duration::from_millis(200);
    let pool = Pool::start(cfg).unwrap();
    let mut w = pool.acquire().unwrap();
    let pid = w.pid();
    w.signal_for_test(libc::SIGSTOP);
    let t = Instant::now();
    assert!(matches!(w.ping(), Err(WorkerError::Lost(_))));
    assert!(t.elapsed() < Duration::from_millis(700));
    assert!(!pid_exists(pid));
    pool.release(w);
    let mut w = pool.acquire().unwrap();
    w.ping().unwrap();
}

#[test]
fn spawn_failure_reaches_acquire() {
    let mut cfg = pool_config(true, 0, 1);
    cfg.command = WorkerCommand {
        program: "/nonexistent/tasklet".into(),
        args: vec![],
    };
    let pool = Pool::start(cfg).unwrap();
    let t = Instant::now();
    match pool.acquire() {
        Err(WorkerError::Spawn(m)) => assert!(m.contains("/nonexistent/tasklet"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(pool.busy(), 0);
}

/// The pool's worker command run through a shell that first sleeps `secs`: a start slow
/// enough to be killed while it starts (the shell execs the worker, which keeps its pid).
fn slow_start(secs: &str) -> tasklet_worker::PoolConfig {
    let mut cfg = pool_config(true, 0, 1);
    let mut args = vec![
        "-c".to_string(),
        format!("sleep {secs}; exec \"$0\" \"$@\""),
        cfg.command.program.to_string_lossy().into_owned(),
    ];
    args.extend(cfg.command.args.iter().cloned());
    cfg.command = WorkerCommand {
        program: "/bin/sh".into(),
        args,
    };
    cfg
}

/// Kills (SIGKILL) each process the pool lists as starting, until `until` says stop or 20 s
/// pass; the pids killed.
fn kill_starts(
    pool: &Arc<Pool>,
    until: impl Fn(usize) -> bool + Send + 'static,
) -> std::thread::JoinHandle<Vec<u32>> {
    let pool = Arc::clone(pool);
    std::thread::spawn(move || {
        let (began, mut killed) = (Instant::now(), Vec::new());
        while !until(killed.len()) && began.elapsed() < Duration::from_secs(20) {
            for pid in pool.census().starting {
                if !killed.contains(&pid) {
                    kill9(pid);
                    killed.push(pid);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        killed
    })
}

/// A worker killed from outside while it starts (an operator, the OOM killer) is no failed
/// start: the acquire waiting for it gets the next worker the pool starts.
#[test]
fn an_acquire_outlives_a_worker_killed_while_starting() {
    let pool = Arc::new(Pool::start(slow_start("0.3")).unwrap());
    let killer = kill_starts(&pool, |killed| killed == 1);
    let mut w = pool.acquire().expect("the next start's worker");
    let killed = killer.join().unwrap();
    assert_eq!(killed.len(), 1, "{killed:?}");
    assert_ne!(w.pid(), killed[0]);
    w.ping().unwrap();
}

/// Something that kills every worker as it starts is reported, not retried forever: the
/// acquire fails saying how the last one ended.
#[test]
fn workers_killed_at_every_start_fail_the_acquire_saying_so() {
    let pool = Arc::new(Pool::start(slow_start("0.2")).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let killer = kill_starts(&pool, move |_| {
        stopped.load(std::sync::atomic::Ordering::Relaxed)
    });
    let t = Instant::now();
    let r = pool.acquire();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let killed = killer.join().unwrap();
    match r {
        Err(WorkerError::Spawn(m)) => {
            assert!(m.contains("killed by signal 9 before it was ready"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert!(killed.len() > 1, "{killed:?}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}

#[test]
fn shutdown_kills_idle_and_leased_workers() {
    let pool = Pool::start(pool_config(true, 2, 2)).unwrap();
    let mut w = pool.acquire().unwrap();
    wait_idle(&pool, 2);
    let leased = w.pid();
    pool.shutdown();
    assert_eq!(pool.idle(), 0);
    assert!(matches!(w.ping(), Err(WorkerError::Lost(_))));
    assert!(!pid_exists(leased));
    assert!(matches!(pool.acquire(), Err(WorkerError::NoCapacity(_))));
    pool.release(w);
    assert_eq!(pool.busy(), 0);
}

#[test]
fn many_threads_share_a_pool() {
    let pool = Pool::start(pool_config(true, 2, 4)).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let pool: Arc<Pool> = pool.clone();
            std::thread::spawn(move || {
                let mut got = 0;
                for _ in 0..20 {
                    match pool.acquire() {
                        Ok(mut w) => {
                            for _ in 0..50 {
                                w.ping().unwrap();
                            }
                            pool.release(w);
                            got += 1;
                        }
                        Err(WorkerError::NoCapacity(_)) => {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                got
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(total > 0);
    assert_eq!(pool.busy(), 0);
    assert!(pool.idle() <= 2);
}

#[test]
fn cold_pool_starts_workers_on_demand() {
    let pool = Pool::start(pool_config(true, 0, 2)).unwrap();
    let mut w = pool.acquire().unwrap();
    w.ping().unwrap();
    assert_eq!(pool.idle(), 0);
    pool.release(w);
    // warm = 0: nothing is kept.
    assert_eq!(pool.idle(), 0);
    assert_eq!(pool.busy(), 0);
}

#[test]
fn handles_are_thread_safe() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<tasklet_worker::Worker>();
    send_sync::<Pool>();
    send_sync::<Arc<Pool>>();
}

#[test]
fn without_reuse_every_released_worker_is_replaced() {
    let mut cfg = pool_config(true, 1, 2);
    cfg.reuse = false;
    let pool = Pool::start(cfg).unwrap();
    let w = pool.acquire().unwrap();
    let pid = w.pid();
    pool.release(w);
    wait_dead(pid);
    let w = pool.acquire().unwrap();
    assert_ne!(w.pid(), pid);
    pool.release(w);
}

#[test]
fn limits_can_change_after_start() {
    let pool = Pool::start(pool_config(true, 3, 4)).unwrap();
    wait_idle(&pool, 3);
    pool.set_limits(1, 1);
    assert_eq!(pool.limits(), (1, 1));
    assert!(
        eventually(Duration::from_secs(5), || pool.idle() == 1),
        "idle {}",
        pool.idle()
    );
    let w = pool.acquire().unwrap();
    assert!(
        matches!(pool.acquire(), Err(WorkerError::NoCapacity(_))),
        "max is now 1"
    );
    pool.release(w);
}

/// The census says where the pool holds each worker's process: idle, then leased, then (given
/// up) on its way out until it is reaped, then nowhere.
#[test]
fn the_census_follows_a_worker_from_idle_to_reaped() {
    let pool = Pool::start(pool_config(true, 1, 2)).unwrap();
    wait_idle(&pool, 1);
    let c = pool.census();
    assert_eq!(c.idle.len(), 1, "{c:?}");
    let pid = c.idle[0];
    assert!(
        c.leased.is_empty() && c.to_reap.is_empty() && c.ending.is_empty(),
        "{c:?}"
    );
    let w = pool.acquire().unwrap();
    assert_eq!(w.pid(), pid);
    let c = pool.census();
    assert_eq!(c.leased, vec![pid], "{c:?}");
    assert!(!c.idle.contains(&pid), "{c:?}");
    // The replacement the spawner starts for the warm set is listed as starting (a process of
    // its own) until its handshake, then idle.
    assert!(
        eventually(Duration::from_secs(10), || {
            let c = pool.census();
            assert!(
                c.starting.iter().all(|&p| p != pid && pid_exists(p)),
                "{c:?}"
            );
            c.idle.iter().any(|&p| p != pid)
        }),
        "{:?}",
        pool.census()
    );
    assert!(pool.census().starting.is_empty());
    pool.discard(w);
    let c = pool.census();
    assert!(!c.leased.contains(&pid) && !c.idle.contains(&pid), "{c:?}");
    assert!(
        c.to_reap.contains(&pid) || c.ending.contains(&pid) || !pid_exists(pid),
        "a given-up worker is on its way out or gone: {c:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            let c = pool.census();
            !pid_exists(pid) && !c.to_reap.contains(&pid) && !c.ending.contains(&pid)
        }),
        "{:?}",
        pool.census()
    );
}
