//! `probe`: misuses the GPU interface on purpose, for the host's test suite.
//!
//! It calls the WIT bindings directly (`tasklet_gpu::raw`) wherever the SDK's types would forbid
//! the misuse. Input: `<command> [arg]`. Output: one line per checked step, either
//! `ok <detail>` or `error <kind> <message>`, `<kind>` being the WIT `gpu-error` case name in
//! kebab case (`quota-exceeded`). When a setup step (a lease, a session, an allocation that the
//! command only needs) fails, its `error` line is printed and the command stops there.
//!
//! | command | steps (each `→` prints a line) |
//! | --- | --- |
//! | `alloc-past-lease` | lease 1 MiB for 10 s; session; alloc 2 MiB → `ok alloc 2097152` |
//! | `foreign-buffer` | two 1 MiB leases, a session on each, a 64-byte buffer in A; B reads 4 bytes of it → ; B writes 4 bytes to it → ; B launches `iota` (loaded in B) with it → (`ok read 4`, `ok write 4`, `ok launch iota`) |
//! | `expire` | lease 1 MiB for 1 s; session; alloc 4096 → `ok alloc 4096`; sleep 1500 ms; read it → `ok read 4096`; lease info → `ok info granted=<B> used=<B> remaining_ms=<ms>` |
//! | `trap` | lease 1 MiB, session, alloc 4096, then `panic!("probe trap")` (a wasm trap; no output) |
//! | `oob-read` | alloc 16 bytes; read 16 bytes at offset 8 → `ok read 16` |
//! | `bad-ptx` | load a module whose line 7 is `bogus.instr %r1;` → `ok load <kernels>` |
//! | `fault` | load `faults.ptx`; alloc 64; launch `write_out_of_bounds(buf, 1 << 40)` on 1×1 → `ok launch write_out_of_bounds`; sync → `ok sync` |
//! | `spin` | load `faults.ptx`; alloc 4; launch `spin_forever(buf)` on 1×32 → `ok launch spin_forever`; sync → `ok sync` |
//! | `printf` | load `misc.ptx`; alloc 4; launch `lookup(buf, 1)` on 1×1, which prints `lookup: n=1 lut[5]=9 pi~3.142 ok` with `printf` → `ok launch lookup`; sync → `ok sync` |
//! | `hold <secs>` | lease 1 MiB for 60 s; session; alloc 4096; write it; sync and sleep 20 ms until an op fails or `<secs>` passed → `ok held` or the error |
//! | `sleep <secs>` | `std::thread::sleep` for `<secs>` (a wait on the WASI monotonic clock, no GPU) → `ok slept <ms>` (in whole milliseconds) |
//! | `leases <n>` | acquire `n` leases of 1 MiB for 60 s, keeping them all → `ok lease <i> device=<d>` per acquire (failures do not stop it) |
//! | `grow <mib>` | fill a `<mib>` MiB vector in linear memory → `ok grew <mib>` (or a trap past the memory limit) |
//! | `verify <secs>` | lease 1 MiB; session; load `iota`; alloc 16 KiB; until `<secs>` pass: zero it, launch `iota(buf, n)` with `n` varying, sync, read it all and check `i + 1` below `n` and zeros above, sleep 5 ms → `ok verified <rounds>`, or the first failing step's `error` line, or `error wrong-result <where>` |
//! | `pattern <mib>` | lease `<mib>` MiB; alloc it all; write `0xa5` everywhere (1 MiB writes); read it back and check → `ok pattern <bytes>`; then drop everything |
//! | `zeros <mib>` | lease `<mib>` MiB; alloc it all; read it back (1 MiB reads) and check every byte is 0 → `ok zeros <bytes>` or `error nonzero offset <o> byte <b>` |
//! | `spin-big <mib>` | lease `<mib>` MiB + 1 MiB; alloc `<mib>` MiB; then as `spin` (its lines) |
//! | `lease <mib>` | acquire one lease of `<mib>` MiB for 10 s → `ok lease <granted bytes>` |
//! | `tiny-allocs` | lease 1 MiB; allocate 1-byte buffers, keeping them all, until one fails → `ok allocs <count>` then that failure |
//! | `big-read <mib>` | lease and allocate `<mib>` MiB; read all of it → `ok read <bytes>` (or the error) |
//! | `read-into <kib>` | lease; alloc `<kib>` KiB; write a pattern from a guest `Vec` (one `mem-write`); `DeviceBuffer::read_into` a zeroed guest buffer → `ok read-into <bytes>` or `error mismatch <first offset>` |
//! | `read-into-grown` | lease 32 MiB; a 1 MiB write + read-into round trip (`ok first 1048576`); then a 16 MiB guest buffer at least 15 MiB of which lie in memory grown since (`ok grown <pages before> <pages after>` or `error not-grown ..`); write a pattern from it, zero it, read into it, check → `ok round-trip 16777216` or `error mismatch ..` |
//! | `read-into-misuse` | a 16-byte buffer: `mem-read-into` of 16 bytes at 8 into a 16-byte and into a 128 KiB guest buffer filled with `0x5a` → (out of bounds, both), then `ok untouched` or `error touched <offset>`; a buffer of another session read into (128 KiB) → |
//! | `spin-then <step>` | lease 1 MiB for 60 s; session; load `faults.ptx`; alloc 4 bytes (the flag) and 4096 (the spare); launch `spin_forever(flag)` on 1×32 → `ok launch spin_forever`; then, while it runs, one step: `sync`, `read` (4 bytes of the spare), `write` (4 bytes to it), `alloc` (4096), `copy` (4 bytes, spare to spare) or `load` (`iota.ptx`) → its line; or drop the `buffer` (the spare), the `module`, the `session` or the `lease` → `ok dropped <step>`; then → `ok took <ms>` (the step alone, in whole milliseconds). `trap` traps instead (no output), `return` returns at once holding everything (no step line) |
//! | `one-shots <secs>` | until `<secs>` pass: `GpuCall` `scale` over 256 numbers by a factor that varies, each result checked → `ok one-shots <count>`, or the first failing call's `error` line, or `error wrong-result call <c> index <i>` |
//! | `gpu-time <n>` | lease `4n` bytes + 1 MiB; session; load `iota`; alloc `4n` bytes; read the lease's GPU time; launch `iota(buf, n)` on 256-thread blocks; sync; read it again → `ok gpu-time <ns>` (the second reading less the first: the launch's device time in nanoseconds) |
//! | `burst <n>` | lease; `n` rows of 256 ones; one SDK `Burst` of `scale`, launch `r` on row `r` by `r + 1` → `ok burst <n> first <ordinal>` (or the error, e.g. past 4096 launches); sync, read → `ok rows <n>` or `error wrong-result row <r> index <i>` |
//! | `burst-misuse` | raw `launch-burst`s of `scale` the host must refuse whole: a change of argument 3 (`index`), launch 2 with another session's buffer (`foreign`), launch 1 at offset 1025 of a 1 KiB buffer (`offset`), no launch (`empty`) → a line each; then the buffer → `ok untouched` or `error touched <byte>` |
//! | `graph <n>` | lease; 256 words `0..256`; an SDK `Graph` of `add_step(x, scalar, 256)` (`x = 3x + scalar`), replayed `n` times with the scalar set to 1, 2, … before each → `ok graph <n> replays`; sync, read, against the CPU → `ok matches` or `error mismatch index <i>` |
//! | `reload` | lease; 256 words `0..256`, a step of 7; `add_step` (`x = 3x + step`) launched; the module reloaded with `x = 5x + step` → `ok reloaded`; launched again (the kernel resolved anew); a reload with PTX that does not load → its `error` line; launched again; sync, read, against the CPU → `ok matches` or `error mismatch index <i>` |
//! | `streams <n>` | lease; `n` chunks of 256 floats (chunk `c` all `c + 1`), each written on a copy stream, an event recorded after it, waited on by a compute stream that scales the chunk by 2 → `ok pipelined <n> chunks`; `ok query true`; the compute stream's device time between two events → `ok elapsed <ns>`; read → `ok matches` or `error mismatch index <i>`; streams, then events, made until refused → `ok stream limit <held> <kind>`, `ok event limit <held> <kind>`; another session's event recorded on the copy stream → `ok foreign event refused <kind>` |
//! | `actor <n>` | lease; an inbox and an outbox of 64 messages of 16 floats; `actor_scale` (`x * 2 + 1`) started on one block through the SDK; `n` messages sent, every answer checked → `ok served <n>` (or `error wrong-answer <k>`, `error stalled <got> of <n>`); stopped → `ok processed <count>` (the kernel's count), `ok stopped <returned\|failed\|running>` |
//! | `actor-misuse` | rings and actors misused, one line each, `ok <what> <kind>` or `error <what> accepted`: `message-size` (6 bytes), `capacity` (3), `too-large` (1024 × 16 KiB), `no-config` (a persistent launch without one), `foreign-ring` (another session's rings in a raw launch), `second-actor` (past `max-persistent`), `send-wrong-way` (send on a from-device ring), `recv-too-long` (11 s), `stop-too-long` (11 s); then → `ok stopped <how>` |
//! | `bench <n>` | `n` calls each of lease info, sync (idle session) and 4 KiB write+read pairs, timed in batches of 100 → `info_ns <ns>`, `sync_ns <ns>`, `rw4k_ns <ns>`: the median over batches of the mean time per call, in whole nanoseconds |
//!
//! An unknown command, or a missing or malformed argument, is an `Err`.

mod actors;
mod bursts;
mod graphs;
mod streams;

use std::fmt::Write as _;
use std::thread::sleep;
use std::time::{Duration, Instant};

use tasklet_gpu::raw::leases::{Lease, LeaseRequest};
use tasklet_gpu::raw::sessions::{BufferArg, KernelArg, LaunchConfig, Session};
use tasklet_gpu::{input, Error, GpuCall};

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");
const SCALE_PTX: &str = include_str!("../../../../kernels/scale.ptx");
const MISC_PTX: &str = include_str!("../../../../kernels/misc.ptx");

/// Valid up to line 6; line 7 is an instruction that does not exist.
const BAD_PTX: &str = "\
.version 7.0
.target sm_80
.address_size 64
.visible .entry bad()
{
\t.reg .b32 %r<2>;
\tbogus.instr %r1;
\tret;
}
";

const MIB: u64 = 1 << 20;

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut words = input::text(&input)?.split_whitespace();
    let command = words.next().unwrap_or("");
    let arg = words.next();
    let mut out = Out::default();
    // `Err(Stopped)` only means a setup step failed and printed its line.
    let _ = match command {
        "alloc-past-lease" => alloc_past_lease(&mut out),
        "foreign-buffer" => foreign_buffer(&mut out),
        "expire" => expire(&mut out),
        "trap" => trap(&mut out),
        "oob-read" => oob_read(&mut out),
        "bad-ptx" => bad_ptx(&mut out),
        "fault" => fault(&mut out),
        "spin" => spin(&mut out),
        "printf" => printf(&mut out),
        "hold" => hold(&mut out, input::argument(command, arg)?),
        "sleep" => nap(&mut out, input::argument(command, arg)?),
        "leases" => leases(&mut out, input::argument(command, arg)?),
        "grow" => grow(&mut out, input::argument(command, arg)?),
        "tiny-allocs" => tiny_allocs(&mut out),
        "big-read" => big_read(&mut out, input::argument(command, arg)?),
        "bench" => bench(&mut out, input::argument::<u32>(command, arg)?.max(1)),
        "verify" => verify(&mut out, input::argument(command, arg)?),
        "pattern" => pattern(&mut out, input::argument(command, arg)?),
        "zeros" => zeros(&mut out, input::argument(command, arg)?),
        "spin-big" => spin_big(&mut out, input::argument(command, arg)?),
        "lease" => lease_mib(&mut out, input::argument(command, arg)?),
        "read-into" => read_into(&mut out, input::argument(command, arg)?),
        "read-into-grown" => read_into_grown(&mut out),
        "read-into-misuse" => read_into_misuse(&mut out),
        "spin-then" => spin_then(&mut out, arg.unwrap_or(""))?,
        "one-shots" => one_shots(&mut out, input::argument(command, arg)?),
        "gpu-time" => gpu_time(&mut out, input::argument(command, arg)?),
        "burst" => bursts::burst(&mut out, input::argument(command, arg)?),
        "burst-misuse" => bursts::burst_misuse(&mut out),
        "graph" => graphs::graph(&mut out, input::argument(command, arg)?),
        "reload" => graphs::reload(&mut out),
        "streams" => streams::streams(&mut out, input::argument(command, arg)?),
        "actor" => actors::actor(&mut out, input::argument(command, arg)?),
        "actor-misuse" => actors::actor_misuse(&mut out),
        _ => {
            return Err(format!(
                "unknown command {command:?}; expected one of alloc-past-lease, foreign-buffer, \
                 expire, trap, oob-read, bad-ptx, fault, spin, printf, hold <secs>, sleep <secs>, leases <n>, bench <n>, \
                 verify <secs>, pattern <mib>, zeros <mib>, spin-big <mib>, lease <mib>, read-into <kib>, \
                 read-into-grown, read-into-misuse, spin-then <step>, one-shots <secs>, gpu-time <n>, burst <n>, burst-misuse, graph <n>, reload, streams <n>, actor <n>, actor-misuse"
            ))
        }
    };
    Ok(out.0.into_bytes())
}

tasklet_gpu::export!(run);

/// The output being built.
#[derive(Default)]
struct Out(String);

/// A setup step failed; its line is printed.
struct Stopped;

impl Out {
    fn ok(&mut self, detail: impl std::fmt::Display) {
        writeln!(self.0, "ok {detail}").unwrap();
    }

    /// A line as is (a check's own `error` line).
    fn line(&mut self, line: String) {
        writeln!(self.0, "{line}").unwrap();
    }

    fn error(&mut self, e: &Error) {
        let message = e.message().replace(['\n', '\r'], " ");
        writeln!(self.0, "error {} {message}", e.kind().as_str()).unwrap();
    }

    /// Prints the result of a checked step.
    fn step<T, E: Into<Error>>(
        &mut self,
        r: Result<T, E>,
        detail: impl FnOnce(&T) -> String,
    ) -> Option<T> {
        match r {
            Ok(v) => {
                let d = detail(&v);
                self.ok(d);
                Some(v)
            }
            Err(e) => {
                self.error(&e.into());
                None
            }
        }
    }

    /// Passes a setup step's value through, or prints its error and stops the command.
    fn setup<T, E: Into<Error>>(&mut self, r: Result<T, E>) -> Result<T, Stopped> {
        r.map_err(|e| {
            self.error(&e.into());
            Stopped
        })
    }
}

type Step = Result<(), Stopped>;

fn acquire(out: &mut Out, bytes: u64, secs: u32) -> Result<Lease, Stopped> {
    out.setup(Lease::acquire(LeaseRequest {
        min_vram: bytes,
        secs,
        device: None,
    }))
}

fn config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: (grid, 1, 1),
        block: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn buffer_arg(buffer: &tasklet_gpu::raw::sessions::Buffer) -> KernelArg<'_> {
    KernelArg::Buffer(BufferArg { buffer, offset: 0 })
}

fn alloc_past_lease(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 10)?;
    let session = out.setup(Session::open(&lease))?;
    out.step(session.mem_alloc(2 * MIB), |b| {
        format!("alloc {}", b.size())
    });
    Ok(())
}

fn foreign_buffer(out: &mut Out) -> Step {
    let lease_a = acquire(out, MIB, 10)?;
    let lease_b = acquire(out, MIB, 10)?;
    let a = out.setup(Session::open(&lease_a))?;
    let b = out.setup(Session::open(&lease_b))?;
    let buf_a = out.setup(a.mem_alloc(64))?;
    out.step(b.mem_read(&buf_a, 0, 4), |d| format!("read {}", d.len()));
    out.step(b.mem_write(&buf_a, 0, &[0; 4]), |_| "write 4".into());
    let module = out.setup(b.module_load(IOTA_PTX))?;
    let args = [buffer_arg(&buf_a), KernelArg::U32(16)];
    out.step(b.launch(&module, "iota", config(1, 16), &args), |_| {
        "launch iota".into()
    });
    Ok(())
}

fn expire(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 1)?;
    let session = out.setup(Session::open(&lease))?;
    let Some(buf) = out.step(session.mem_alloc(4096), |b| format!("alloc {}", b.size())) else {
        return Ok(());
    };
    sleep(Duration::from_millis(1500));
    out.step(session.mem_read(&buf, 0, 4096), |d| {
        format!("read {}", d.len())
    });
    out.step(lease.info(), |i| {
        format!(
            "info granted={} used={} remaining_ms={}",
            i.granted_bytes, i.used_bytes, i.remaining_ms
        )
    });
    Ok(())
}

fn trap(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 10)?;
    let session = out.setup(Session::open(&lease))?;
    let buf = out.setup(session.mem_alloc(4096))?;
    let _held = (&lease, &session, &buf);
    panic!("probe trap");
}

fn grow(out: &mut Out, mib: usize) -> Step {
    // Touch every page, so the memory is really there.
    let block = vec![1u8; mib << 20];
    let sum: usize = block.iter().step_by(4096).map(|&b| b as usize).sum();
    writeln!(out.0, "ok grew {}", (sum * 4096) >> 20).unwrap();
    Ok(())
}

fn tiny_allocs(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 30)?;
    let session = out.setup(Session::open(&lease))?;
    let mut held = Vec::new();
    let failure = loop {
        match session.mem_alloc(1) {
            Ok(buf) => held.push(buf),
            Err(e) => break e,
        }
        if held.len() > 4 * MIB as usize {
            break tasklet_gpu::raw::types::GpuError::InvalidArgument("no limit reached".into());
        }
    };
    writeln!(out.0, "ok allocs {}", held.len()).unwrap();
    out.error(&failure.into());
    Ok(())
}

fn big_read(out: &mut Out, mib: u64) -> Step {
    let lease = acquire(out, mib * MIB, 30)?;
    let session = out.setup(Session::open(&lease))?;
    let buf = out.setup(session.mem_alloc(mib * MIB))?;
    out.step(session.mem_read(&buf, 0, mib * MIB), |d| {
        format!("read {}", d.len())
    });
    Ok(())
}

fn oob_read(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 10)?;
    let session = out.setup(Session::open(&lease))?;
    let buf = out.setup(session.mem_alloc(16))?;
    out.step(session.mem_read(&buf, 8, 16), |d| {
        format!("read {}", d.len())
    });
    Ok(())
}

fn bad_ptx(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 10)?;
    let session = out.setup(Session::open(&lease))?;
    out.step(session.module_load(BAD_PTX), |m| {
        format!("load {}", m.kernels().join(","))
    });
    Ok(())
}

fn fault(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 10)?;
    let session = out.setup(Session::open(&lease))?;
    let module = out.setup(session.module_load(FAULTS_PTX))?;
    let buf = out.setup(session.mem_alloc(64))?;
    let args = [buffer_arg(&buf), KernelArg::U64(1 << 40)];
    out.step(
        session.launch(&module, "write_out_of_bounds", config(1, 1), &args),
        |_| "launch write_out_of_bounds".into(),
    );
    out.step(session.sync(), |_| "sync".into());
    Ok(())
}

/// `lookup` of misc.ptx prints one line with `printf` (`lookup: n=1 lut[5]=9 pi~3.142 ok`),
/// which the device prints when the worker next waits for it.
fn printf(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 10)?;
    let session = out.setup(Session::open(&lease))?;
    let module = out.setup(session.module_load(MISC_PTX))?;
    let buf = out.setup(session.mem_alloc(4))?;
    let args = [buffer_arg(&buf), KernelArg::U32(1)];
    out.step(
        session.launch(&module, "lookup", config(1, 1), &args),
        |_| "launch lookup".into(),
    );
    out.step(session.sync(), |_| "sync".into());
    Ok(())
}

fn spin(out: &mut Out) -> Step {
    let lease = acquire(out, MIB, 10)?;
    let session = out.setup(Session::open(&lease))?;
    let module = out.setup(session.module_load(FAULTS_PTX))?;
    let buf = out.setup(session.mem_alloc(4))?;
    let args = [buffer_arg(&buf)];
    out.step(
        session.launch(&module, "spin_forever", config(1, 32), &args),
        |_| "launch spin_forever".into(),
    );
    out.step(session.sync(), |_| "sync".into());
    Ok(())
}

/// What `spin-then` does while its kernel runs.
const SPIN_THEN_STEPS: &str =
    "sync, read, write, alloc, copy, load, buffer, module, session, lease, trap, return";

/// Launches a kernel that never ends, then takes one `step` while it runs and says how long the
/// step took (see the table above). An unknown step is an `Err`, before anything is leased.
fn spin_then(out: &mut Out, step: &str) -> Result<Step, String> {
    if !SPIN_THEN_STEPS.split(", ").any(|s| s == step) {
        return Err(format!(
            "spin-then: unknown step {step:?}; expected one of {SPIN_THEN_STEPS}"
        ));
    }
    Ok(spin_then_step(out, step))
}

fn spin_then_step(out: &mut Out, step: &str) -> Step {
    let lease = acquire(out, MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let module = out.setup(session.module_load(FAULTS_PTX))?;
    let flag = out.setup(session.mem_alloc(4))?;
    let spare = out.setup(session.mem_alloc(4096))?;
    out.setup(session.launch(&module, "spin_forever", config(1, 32), &[buffer_arg(&flag)]))?;
    out.ok("launch spin_forever");
    let start = Instant::now();
    match step {
        "sync" => {
            out.step(session.sync(), |_| "sync".into());
        }
        "read" => {
            out.step(session.mem_read(&spare, 0, 4), |d| {
                format!("read {}", d.len())
            });
        }
        "write" => {
            out.step(session.mem_write(&spare, 0, &[1; 4]), |_| "write 4".into());
        }
        "alloc" => {
            out.step(session.mem_alloc(4096), |b| format!("alloc {}", b.size()));
        }
        "copy" => {
            out.step(session.mem_copy(&spare, 0, &spare, 8, 4), |_| {
                "copy 4".into()
            });
        }
        "load" => {
            // PTX no lease has loaded before (a comment makes it new), so that the load goes to
            // the driver: one the worker finds in its cache by content does not wait for the
            // runaway kernel at all.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let fresh = format!("{IOTA_PTX}\n// spin-then load {nanos}\n");
            out.step(session.module_load(&fresh), |m| {
                format!("load {}", m.kernels().join(","))
            });
        }
        "buffer" => drop(spare),
        "module" => drop(module),
        "session" => drop(session),
        "lease" => drop(lease),
        "trap" => panic!("probe trap while a kernel runs"),
        // `return`: everything is still held, and dropped as the tasklet returns.
        _ => return Ok(()),
    }
    let took = start.elapsed().as_millis();
    if matches!(step, "buffer" | "module" | "session" | "lease") {
        out.ok(format!("dropped {step}"));
    }
    out.ok(format!("took {took}"));
    Ok(())
}

/// `secs` as a duration, for `command`; a negative or overlong one prints an `invalid-input` line.
fn seconds(out: &mut Out, command: &str, secs: f64) -> Result<Duration, Stopped> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        out.error(&Error::InvalidInput(format!(
            "{command}: {secs} is not a duration in seconds"
        )));
        Stopped
    })
}

fn gpu_time(out: &mut Out, n: u32) -> Step {
    let bytes = 4 * u64::from(n.max(1));
    let lease = acquire(out, bytes + MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let module = out.setup(session.module_load(IOTA_PTX))?;
    let buf = out.setup(session.mem_alloc(bytes))?;
    let before = out.setup(lease.gpu_time())?;
    let args = [buffer_arg(&buf), KernelArg::U32(n)];
    out.setup(session.launch(&module, "iota", config(n.div_ceil(256), 256), &args))?;
    out.setup(session.sync())?;
    let after = out.setup(lease.gpu_time())?;
    out.ok(format!("gpu-time {}", after.saturating_sub(before)));
    Ok(())
}

fn one_shots(out: &mut Out, secs: f64) -> Step {
    let limit = seconds(out, "one-shots", secs)?;
    let xs: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < limit {
        // Small integers times a small factor: exact in f32, on every device.
        let factor = (calls % 7 + 1) as f32;
        let call = GpuCall::new(SCALE_PTX, "scale")
            .data()
            .arg(factor)
            .len_arg();
        let ys = out.setup(call.run(&xs))?;
        if let Some(i) = (0..xs.len()).find(|&i| ys.get(i) != Some(&(xs[i] * factor))) {
            writeln!(out.0, "error wrong-result call {calls} index {i}").unwrap();
            return Ok(());
        }
        calls += 1;
    }
    out.ok(format!("one-shots {calls}"));
    Ok(())
}

fn hold(out: &mut Out, secs: f64) -> Step {
    let limit = seconds(out, "hold", secs)?;
    let lease = acquire(out, MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let buf = out.setup(session.mem_alloc(4096))?;
    out.setup(session.mem_write(&buf, 0, &[0xa5; 4096]))?;
    let start = Instant::now();
    loop {
        if let Err(e) = session.sync() {
            out.error(&e.into());
            return Ok(());
        }
        if start.elapsed() >= limit {
            break;
        }
        sleep(Duration::from_millis(20));
    }
    out.ok("held");
    Ok(())
}

fn nap(out: &mut Out, secs: f64) -> Step {
    let limit = seconds(out, "sleep", secs)?;
    let start = Instant::now();
    sleep(limit);
    out.ok(&format!("slept {}", start.elapsed().as_millis()));
    Ok(())
}

fn verify(out: &mut Out, secs: f64) -> Step {
    const N: u32 = 4096;
    let limit = seconds(out, "verify", secs)?;
    let lease = acquire(out, MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let module = out.setup(session.module_load(IOTA_PTX))?;
    let buf = out.setup(session.mem_alloc(4 * u64::from(N)))?;
    let zeros = vec![0u8; 4 * N as usize];
    let start = Instant::now();
    let mut rounds = 0u32;
    while start.elapsed() < limit {
        let n = 1 + rounds.wrapping_mul(37) % N;
        out.setup(session.mem_write(&buf, 0, &zeros))?;
        let args = [buffer_arg(&buf), KernelArg::U32(n)];
        out.setup(session.launch(&module, "iota", config(n.div_ceil(128), 128), &args))?;
        out.setup(session.sync())?;
        let data = out.setup(session.mem_read(&buf, 0, 4 * u64::from(N)))?;
        for (i, c) in data.chunks_exact(4).enumerate() {
            let got = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let want = if (i as u32) < n { i as u32 + 1 } else { 0 };
            if got != want {
                writeln!(
                    out.0,
                    "error wrong-result round {rounds} n={n} index {i}: got {got}, want {want}"
                )
                .unwrap();
                return Ok(());
            }
        }
        rounds += 1;
        sleep(Duration::from_millis(5));
    }
    out.ok(format!("verified {rounds}"));
    Ok(())
}

fn pattern(out: &mut Out, mib: u64) -> Step {
    let lease = acquire(out, mib * MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let buf = out.setup(session.mem_alloc(mib * MIB))?;
    let chunk = vec![0xa5u8; MIB as usize];
    for i in 0..mib {
        out.setup(session.mem_write(&buf, i * MIB, &chunk))?;
    }
    for i in 0..mib {
        let data = out.setup(session.mem_read(&buf, i * MIB, MIB))?;
        if let Some(at) = data.iter().position(|&b| b != 0xa5) {
            writeln!(
                out.0,
                "error wrong-result offset {} byte {}",
                i * MIB + at as u64,
                data[at]
            )
            .unwrap();
            return Ok(());
        }
    }
    out.ok(format!("pattern {}", mib * MIB));
    Ok(())
}

fn zeros(out: &mut Out, mib: u64) -> Step {
    let lease = acquire(out, mib * MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let buf = out.setup(session.mem_alloc(mib * MIB))?;
    for i in 0..mib {
        let data = out.setup(session.mem_read(&buf, i * MIB, MIB))?;
        if let Some(at) = data.iter().position(|&b| b != 0) {
            writeln!(
                out.0,
                "error nonzero offset {} byte {}",
                i * MIB + at as u64,
                data[at]
            )
            .unwrap();
            return Ok(());
        }
    }
    out.ok(format!("zeros {}", mib * MIB));
    Ok(())
}

fn spin_big(out: &mut Out, mib: u64) -> Step {
    let lease = acquire(out, (mib + 1) * MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let _big = out.setup(session.mem_alloc(mib * MIB))?;
    let module = out.setup(session.module_load(FAULTS_PTX))?;
    let buf = out.setup(session.mem_alloc(4))?;
    let args = [buffer_arg(&buf)];
    out.step(
        session.launch(&module, "spin_forever", config(1, 32), &args),
        |_| "launch spin_forever".into(),
    );
    out.step(session.sync(), |_| "sync".into());
    Ok(())
}

fn lease_mib(out: &mut Out, mib: u64) -> Step {
    let r = Lease::acquire(LeaseRequest {
        min_vram: mib.saturating_mul(MIB),
        secs: 10,
        device: None,
    });
    out.step(r, |l| match l.info() {
        Ok(info) => format!("lease {}", info.granted_bytes),
        Err(_) => "lease".into(),
    });
    Ok(())
}

fn leases(out: &mut Out, n: u32) -> Step {
    let mut held = Vec::new();
    for i in 0..n {
        let r = Lease::acquire(LeaseRequest {
            min_vram: MIB,
            secs: 60,
            device: None,
        });
        if let Some(lease) = out.step(r, |l| match l.info() {
            Ok(info) => format!("lease {i} device={}", info.device),
            Err(_) => format!("lease {i}"),
        }) {
            held.push(lease);
        }
    }
    drop(held);
    Ok(())
}

fn bench(out: &mut Out, n: u32) -> Step {
    let lease = acquire(out, MIB, 60)?;
    let session = out.setup(Session::open(&lease))?;
    let buf = out.setup(session.mem_alloc(4096))?;
    let data = [0x5au8; 4096];
    let results = [
        ("info_ns", time_calls(n, || lease.info().map(drop))),
        ("sync_ns", time_calls(n, || session.sync())),
        (
            "rw4k_ns",
            time_calls(n, || {
                session.mem_write(&buf, 0, &data)?;
                session.mem_read(&buf, 0, 4096).map(drop)
            }),
        ),
    ];
    for (name, r) in results {
        match r {
            Ok(ns) => writeln!(out.0, "{name} {ns}").unwrap(),
            Err(e) => out.error(&e.into()),
        }
    }
    Ok(())
}

/// Calls `f` `n` times in batches of 100 and returns the median over batches of the mean time
/// per call, in nanoseconds; stops at the first error.
fn time_calls<E>(n: u32, mut f: impl FnMut() -> Result<(), E>) -> Result<u64, E> {
    const BATCH: u32 = 100;
    let mut means = Vec::new();
    let mut left = n;
    while left > 0 {
        let size = left.min(BATCH);
        let start = Instant::now();
        for _ in 0..size {
            f()?;
        }
        means.push(start.elapsed().as_nanos() / u128::from(size));
        left -= size;
    }
    means.sort_unstable();
    let mid = means.len() / 2;
    let median = if means.len() % 2 == 1 {
        means[mid]
    } else {
        (means[mid - 1] + means[mid]) / 2
    };
    Ok(u64::try_from(median).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_ptx_fails_on_line_7() {
        let line7 = BAD_PTX.lines().nth(6).unwrap();
        assert_eq!(line7.trim(), "bogus.instr %r1;");
    }

    #[test]
    fn time_calls_counts_every_call_and_stops_at_errors() {
        for n in [1, 99, 100, 101, 250] {
            let mut calls = 0;
            time_calls::<()>(n, || {
                calls += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(calls, n);
        }
        let mut calls = 0;
        let r = time_calls(500, || {
            calls += 1;
            if calls == 150 {
                Err("boom")
            } else {
                Ok(())
            }
        });
        assert_eq!((r, calls), (Err("boom"), 150));
    }

    #[test]
    fn errors_print_one_line_with_the_kebab_kind() {
        let mut out = Out::default();
        out.error(&Error::QuotaExceeded("no\nroom".into()));
        out.ok("alloc 16");
        assert_eq!(out.0, "error quota-exceeded no room\nok alloc 16\n");
    }

    #[test]
    fn unknown_commands_and_missing_arguments_are_errors() {
        assert!(run(b"frobnicate".to_vec())
            .unwrap_err()
            .starts_with("unknown command \"frobnicate\""));
        assert!(run(b"".to_vec())
            .unwrap_err()
            .starts_with("unknown command"));
        assert!(run(b"hold".to_vec())
            .unwrap_err()
            .contains("needs a number"));
        assert!(run(b"leases x".to_vec())
            .unwrap_err()
            .contains("\"x\" is not a number"));
    }
}

/// A pattern that differs between neighbouring bytes and between pages.
fn pattern_bytes(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + seed + i / 4096) % 251) as u8)
        .collect()
}

/// `ok <what>` when `got` equals `want`, else `error mismatch <what> at <first differing offset>`.
fn compare(out: &mut Out, what: &str, got: &[u8], want: &[u8]) {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None if got.len() == want.len() => out.ok(what),
        at => writeln!(
            out.0,
            "error mismatch {what} at {}",
            at.unwrap_or(got.len().min(want.len()))
        )
        .unwrap(),
    }
}

fn read_into(out: &mut Out, kib: usize) -> Step {
    let bytes = kib << 10;
    let lease = out.setup(tasklet_gpu::Lease::acquire((bytes as u64).max(MIB), 10))?;
    let session = out.setup(lease.session())?;
    let buf = out.setup(session.alloc::<u8>(bytes))?;
    let data = pattern_bytes(bytes, 1);
    out.setup(buf.write(0, &data))?;
    let mut back = vec![0u8; bytes];
    out.setup(buf.read_into(&mut back))?;
    compare(out, &format!("read-into {bytes}"), &back, &data);
    Ok(())
}

/// The size of the tasklet's linear memory, in 64 KiB pages.
#[cfg(target_arch = "wasm32")]
fn memory_pages() -> usize {
    core::arch::wasm32::memory_size(0)
}

/// Off wasm (the unit tests on the build machine) there is no linear memory to measure.
#[cfg(not(target_arch = "wasm32"))]
fn memory_pages() -> usize {
    0
}

fn read_into_grown(out: &mut Out) -> Step {
    let lease = out.setup(tasklet_gpu::Lease::acquire(32 * MIB, 10))?;
    let session = out.setup(lease.session())?;
    let buf = out.setup(session.alloc::<u8>(16 << 20))?;
    let first = pattern_bytes(1 << 20, 2);
    out.setup(buf.write(0, &first))?;
    let mut back = vec![0u8; 1 << 20];
    out.setup(buf.read_into(&mut back))?;
    compare(out, "first 1048576", &back, &first);

    let pages_before = memory_pages();
    let mut big = vec![0u8; 16 << 20];
    let pages_after = memory_pages();
    // The allocator may start it in free space at the old end; most of it must be new memory.
    let old_end = pages_before * 65536;
    let grown =
        (big.as_ptr() as usize + big.len()).saturating_sub(old_end.max(big.as_ptr() as usize));
    if grown < 15 << 20 {
        writeln!(out.0, "error not-grown only {grown} bytes of the 16 MiB buffer lie past the memory's earlier end").unwrap();
        return Ok(());
    }
    writeln!(out.0, "ok grown {pages_before} {pages_after}").unwrap();
    big.copy_from_slice(&pattern_bytes(16 << 20, 3));
    let want = big.clone();
    out.setup(buf.write(0, &big))?;
    big.fill(0);
    out.setup(buf.read_into(&mut big))?;
    compare(out, "round-trip 16777216", &big, &want);
    Ok(())
}

fn read_into_misuse(out: &mut Out) -> Step {
    let lease_a = acquire(out, MIB, 10)?;
    let lease_b = acquire(out, MIB, 10)?;
    let a = out.setup(Session::open(&lease_a))?;
    let b = out.setup(Session::open(&lease_b))?;
    let buf = out.setup(a.mem_alloc(16))?;
    // Below and above the host's direct-transfer threshold: both paths check bounds.
    let mut small = vec![0x5au8; 16];
    let mut large = vec![0x5au8; 128 << 10];
    out.step(tasklet_gpu::mem_read_into(&a, &buf, 8, &mut small), |_| {
        "read-into 16".into()
    });
    out.step(tasklet_gpu::mem_read_into(&a, &buf, 8, &mut large), |_| {
        "read-into 131072".into()
    });
    match small.iter().chain(&large).position(|&x| x != 0x5a) {
        None => out.ok("untouched"),
        Some(at) => writeln!(out.0, "error touched {at}").unwrap(),
    }
    out.step(
        tasklet_gpu::mem_read_into(&b, &buf, 0, &mut large[..16]),
        |_| "read-into foreign 16".into(),
    );
    out.step(tasklet_gpu::mem_read_into(&b, &buf, 0, &mut large), |_| {
        "read-into foreign 131072".into()
    });
    Ok(())
}
