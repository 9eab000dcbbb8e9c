//! `sdk-check`: uses the guest SDK as a tasklet author would, one feature per command, for the
//! host's test suite. It depends on `tasklet-gpu` alone, so that it also shows what the SDK is
//! enough for (deriving `Pod` among it).
//!
//! Input: `<command> [arg]`. Output: one line per step, `ok <what> <detail>` or
//! `error <kind> <message>` (`<kind>` the WIT `gpu-error` case name, or `invalid-input`; newlines
//! in a message are written `\n`). A failing step ends the command after its line.
//!
//! | command | steps (each `→` prints a line) |
//! | --- | --- |
//! | `defaults` | `Lease::builder().acquire()` with no setter called → `ok lease granted=<bytes> remaining_ms=<ms>`; drop it; `GpuCall` of `scale` by 2 over `1 2 3` with its default lease → `ok gpucall 2 4 6` |
//! | `derive` | `cross_kernel(a, b, out, 2)` with `b = (0, 0, 1)` a `#[derive(Pod)]` `Vec3` passed by value and `a = (1, 0, 0), (0, 1, 0)` → `ok derive <x y z of out[0]> <x y z of out[1]>` |
//! | `cstruct <n>` | `digits_kernel(out, p, n)` with `p = { scale 2.5, offset 7, bias 100, tag 3 }` built with `CStruct` (24 bytes, tail padding included) → `ok cstruct size=24 <out[0]> … <out[n-1]>` |
//! | `offsets` | an 8-element `u32` buffer; `iota(buf + 3 elements, 4)` through `arg_at_elem` → `ok offsets <the 8 elements>`; `arg_at_elem(buf, 9)` → its error |
//! | `long-name <bytes>` | a module whose one kernel, named with `<bytes>` bytes, traps → `ok load <bytes>`; launch it → `ok launch`; sync → its error |
//! | `long-token <bytes>` | a module whose fourth line is one word of `<bytes>` bytes → its load error |
//! | `kernels` | loads `scale` → `ok params <name:size:align:kind …>` from `Module::kernels`; resolves `iota` as a `Kernel` and launches it twice into an 8-element buffer (n 4, then 8; `run_ordinal`) → `ok ordinals <first> <second>`, `ok handle <the 8 elements>`; a kernel of a module of another session, launched in this one → its error |
//! | `struct-pointers <n>` | `scaled_sum(out, ops, n)` with `ops = { a, b + 4 elements, scale 7 }` a `CStruct` holding two buffers (`a[i] = i`, `b[4 + i] = 1000 - 3i`) → `ok struct-pointers size=24 pointers=0,8 <out[0]> … <out[n-1]>`; the same with `b` pointing past its end → its error |
//! | `devices` | `inventory()` → `ok devices <count> <uuid:total_memory:leases …>`; a lease by the last device's UUID → `ok by-uuid device=<index>`; one requiring compute capability 99.0, one requiring model `no-such-gpu` → their errors; a `GpuCall` requiring a model → its error |
//! | `copy-between` | a lease on device 0 and one on device 1, a session on each; `[1 2 3 4]` on device 0, its elements 1.. copied into a 4-element buffer on device 1 (`Session::copy_from`) → `ok copy-between <the 4 elements>` |
//! | `group` | `Lease::builder().acquire_group(2)` → `ok group <device of the first> <device of the second>`; a session on each, `[5 6 7 8]` written on the first, copied into a 4-element buffer on the second (`Session::copy_from`) → `ok group-copy <the 4 elements>`; with the group held, another group of 2 → its error (`max-leases`); a group of 0, and a group of 2 naming device 0 → their errors |
//! | `big-module <bytes>` | a module of at least `<bytes>` bytes (a header, one empty kernel, then a comment) → `ok load <bytes of text>` or its error |

use std::fmt::Write as _;

use tasklet_gpu::{input, CStruct, Error, GpuCall, LaunchConfig, Lease, Pod, Zeroable};

const SCALE_PTX: &str = include_str!("../../../../kernels/scale.ptx");
const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");
const CALLS_PTX: &str = include_str!("../../../../kernels/calls.ptx");
const STRUCT_POINTERS_PTX: &str = include_str!("../../../../kernels/struct_pointers.ptx");

const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut words = input::text(&input)?.split_whitespace();
    let command = words.next().unwrap_or("");
    let arg = words.next();
    let mut out = Out::default();
    // `Err(Stopped)` only means a step failed and printed its line.
    let _ = match command {
        "defaults" => defaults(&mut out),
        "derive" => derive(&mut out),
        "cstruct" => cstruct(&mut out, input::argument(command, arg)?),
        "offsets" => offsets(&mut out),
        "long-name" => long_name(&mut out, input::argument(command, arg)?),
        "long-token" => long_token(&mut out, input::argument(command, arg)?),
        "big-module" => big_module(&mut out, input::argument(command, arg)?),
        "kernels" => kernels(&mut out),
        "devices" => devices(&mut out),
        "copy-between" => copy_between(&mut out),
        "group" => group(&mut out),
        "struct-pointers" => struct_pointers(&mut out, input::argument(command, arg)?),
        _ => {
            return Err(format!(
                "unknown command {command:?}; expected one of defaults, derive, cstruct <n>, \
                 offsets, long-name <bytes>, long-token <bytes>, big-module <bytes>, kernels, \
                 struct-pointers <n>, devices, copy-between, group"
            ))
        }
    };
    Ok(out.0.into_bytes())
}

tasklet_gpu::export!(run);

/// The output being built.
#[derive(Default)]
struct Out(String);

/// A step failed; its line is printed.
struct Stopped;

impl Out {
    fn ok(&mut self, what: &str, detail: impl core::fmt::Display) {
        let _ = writeln!(self.0, "ok {what} {detail}");
    }

    fn error(&mut self, e: &Error) {
        let message = e.message().replace('\n', "\\n");
        let _ = writeln!(self.0, "error {} {message}", e.kind());
    }

    /// The step's value, or its error line and a stop.
    fn step<T>(&mut self, r: Result<T, Error>) -> Result<T, Stopped> {
        r.map_err(|e| {
            self.error(&e);
            Stopped
        })
    }
}

fn defaults(out: &mut Out) -> Result<(), Stopped> {
    {
        let lease = out.step(Lease::builder().acquire())?;
        let info = out.step(lease.info())?;
        out.ok(
            "lease",
            format_args!(
                "granted={} remaining_ms={}",
                info.granted_bytes, info.remaining_ms
            ),
        );
    }
    // The first lease is dropped by now: the call takes a lease of its own.
    let ys = out.step(
        GpuCall::new(SCALE_PTX, "scale")
            .data()
            .arg(2.0f32)
            .len_arg()
            .run(&[1.0f32, 2.0, 3.0]),
    )?;
    out.ok("gpucall", join(&ys));
    Ok(())
}

fn devices(out: &mut Out) -> Result<(), Stopped> {
    let devices = tasklet_gpu::inventory();
    let listed: Vec<String> = devices
        .iter()
        .map(|d| format!("{}:{}:{}", d.uuid, d.total_memory, d.leases))
        .collect();
    out.ok(
        "devices",
        format_args!("{} {}", devices.len(), listed.join(" ")),
    );
    let Some(last) = devices.last() else {
        return Ok(());
    };
    {
        let lease = out.step(Lease::builder().uuid(last.uuid.clone()).acquire())?;
        let info = out.step(lease.info())?;
        out.ok("by-uuid", format_args!("device={}", info.device));
    }
    // Refused: every step prints its error and the next goes on.
    for refused in [
        Lease::builder().min_compute_capability(99, 0).acquire(),
        Lease::builder().model("no-such-gpu").acquire(),
    ] {
        if let Err(e) = refused {
            out.error(&e);
        }
    }
    if let Err(e) = GpuCall::new(SCALE_PTX, "scale")
        .lease(|l| l.model("emulator"))
        .data()
        .arg(2.0f32)
        .len_arg()
        .run(&[1.0f32])
    {
        out.error(&e);
    }
    Ok(())
}

fn copy_between(out: &mut Out) -> Result<(), Stopped> {
    let a = out.step(Lease::builder().device(0).acquire())?;
    let b = out.step(Lease::builder().device(1).acquire())?;
    let (sa, sb) = (out.step(a.session())?, out.step(b.session())?);
    let on_a = out.step(sa.alloc_from(&[1u32, 2, 3, 4]))?;
    let on_b = out.step(sb.alloc::<u32>(4))?;
    out.step(sb.copy_from(&on_b, 0, &on_a, 1..))?;
    let got = out.step(on_b.read())?;
    out.ok("copy-between", join(&got));
    Ok(())
}

fn group(out: &mut Out) -> Result<(), Stopped> {
    let leases = out.step(Lease::builder().acquire_group(2))?;
    let mut devices = Vec::new();
    for lease in &leases {
        devices.push(out.step(lease.info())?.device);
    }
    out.ok("group", join(&devices));
    let [first, second] = &leases[..] else {
        out.ok("group-len", leases.len());
        return Ok(());
    };
    {
        let (s0, s1) = (out.step(first.session())?, out.step(second.session())?);
        let on_first = out.step(s0.alloc_from(&[5u32, 6, 7, 8]))?;
        let on_second = out.step(s1.alloc::<u32>(4))?;
        out.step(s1.copy_from(&on_second, 0, &on_first, ..))?;
        let got = out.step(on_second.read())?;
        out.ok("group-copy", join(&got));
    }
    // Refused: every step prints its error and the next goes on.
    for refused in [
        Lease::builder().acquire_group(2),
        Lease::builder().acquire_group(0),
        Lease::builder().device(0).acquire_group(2),
    ] {
        match refused {
            Err(e) => out.error(&e),
            Ok(granted) => out.ok("granted", granted.len()),
        }
    }
    Ok(())
}

/// `struct Vec3 { float x, y, z; }`, derived with the SDK as the only dependency.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[bytemuck(crate = "tasklet_gpu::bytemuck")]
#[repr(C)]
struct Vec3 {
    x: f32,
    y: f32,
    z: f32,
}

impl Vec3 {
    const fn new(x: f32, y: f32, z: f32) -> Vec3 {
        Vec3 { x, y, z }
    }
}

fn derive(out: &mut Out) -> Result<(), Stopped> {
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    let module = out.step(session.load_ptx(CALLS_PTX))?;
    let a = out.step(session.alloc_from(&[Vec3::new(1.0, 0.0, 0.0), Vec3::new(0.0, 1.0, 0.0)]))?;
    let result = out.step(session.alloc::<Vec3>(2))?;
    // cross_kernel(const Vec3* a, Vec3 b, Vec3* out, unsigned n)
    out.step(
        session
            .launch(&module, "cross_kernel")
            .config(LaunchConfig::for_num_elems(2))
            .arg(&a)
            .arg_bytes(&Vec3::new(0.0, 0.0, 1.0))
            .arg(&result)
            .arg(2u32)
            .run(),
    )?;
    let r = out.step(result.read())?;
    let flat: Vec<f32> = r.iter().flat_map(|v| [v.x, v.y, v.z]).collect();
    out.ok("derive", join(&flat));
    Ok(())
}

fn cstruct(out: &mut Out, n: u32) -> Result<(), Stopped> {
    // struct Params { float scale; int offset; unsigned long long bias; short tag; };
    let params = CStruct::new()
        .field(2.5f32)
        .field(7i32)
        .field(100u64)
        .field(3i16);
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    let module = out.step(session.load_ptx(CALLS_PTX))?;
    let result = out.step(session.alloc::<u32>(n.max(1) as usize))?;
    // digits_kernel(unsigned* out, Params p, unsigned n)
    out.step(
        session
            .launch(&module, "digits_kernel")
            .config(LaunchConfig::for_num_elems(n))
            .arg(&result)
            .arg(&params)
            .arg(n)
            .run(),
    )?;
    let r = out.step(result.read_range(..n as usize))?;
    out.ok(
        "cstruct",
        format_args!("size={} {}", params.size(), join(&r)),
    );
    Ok(())
}

fn struct_pointers(out: &mut Out, n: u32) -> Result<(), Stopped> {
    let n = n.max(1) as usize;
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    let module = out.step(session.load_ptx(STRUCT_POINTERS_PTX))?;
    let a: Vec<i32> = (0..n as i32).collect();
    let b: Vec<i32> = (0..n as i32 + 4).map(|i| 1000 - 3 * (i - 4)).collect();
    let a = out.step(session.alloc_from(&a))?;
    let b = out.step(session.alloc_from(&b))?;
    let result = out.step(session.alloc::<i32>(n))?;
    // struct Operands { const int* a; const int* b; int scale; };
    let ops = CStruct::new().buffer(&a).buffer_at_elem(&b, 4).field(7i32);
    // scaled_sum(int* out, Operands ops, unsigned n)
    let launch = |ops: &CStruct<'_>| {
        session
            .launch(&module, "scaled_sum")
            .config(LaunchConfig::for_num_elems(n as u32))
            .arg(&result)
            .arg(ops)
            .arg(n as u32)
            .run()
    };
    out.step(launch(&ops))?;
    let r = out.step(result.read())?;
    let pointers: Vec<String> = ops.pointer_offsets().map(|at| at.to_string()).collect();
    out.ok(
        "struct-pointers",
        format_args!(
            "size={} pointers={} {}",
            ops.size(),
            pointers.join(","),
            join(&r)
        ),
    );
    let past = CStruct::new()
        .buffer(&a)
        .buffer_at_elem(&b, n + 5)
        .field(7i32);
    out.step(launch(&past))?;
    Ok(())
}

fn offsets(out: &mut Out) -> Result<(), Stopped> {
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    let module = out.step(session.load_ptx(IOTA_PTX))?;
    let buf = out.step(session.alloc::<u32>(8))?;
    // iota(unsigned* out, unsigned n): out[i] = i + 1 for i < n, from element 3 on.
    out.step(
        session
            .launch(&module, "iota")
            .config(LaunchConfig::for_num_elems(4))
            .arg_at_elem(&buf, 3)
            .arg(4u32)
            .run(),
    )?;
    let r = out.step(buf.read())?;
    out.ok("offsets", join(&r));
    // Element 9 of 8 is past the end: the SDK refuses it before the host sees it.
    out.step(
        session
            .launch(&module, "iota")
            .config(LaunchConfig::for_num_elems(1))
            .arg_at_elem(&buf, 9)
            .arg(1u32)
            .run(),
    )?;
    out.ok("launch", "past the end");
    Ok(())
}

fn long_name(out: &mut Out, bytes: usize) -> Result<(), Stopped> {
    let name = format!("k{}", "x".repeat(bytes.saturating_sub(1)));
    let ptx = format!("{HEADER}.visible .entry {name}()\n{{\n\ttrap;\n}}\n");
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    let module = out.step(session.load_ptx(&ptx))?;
    out.ok(
        "load",
        module.kernel_names().iter().map(String::len).sum::<usize>(),
    );
    out.step(
        session
            .launch(&module, &name)
            .config(LaunchConfig::linear(1, 1))
            .run(),
    )?;
    out.ok("launch", "");
    out.step(session.sync())?;
    out.ok("sync", "");
    Ok(())
}

fn long_token(out: &mut Out, bytes: usize) -> Result<(), Stopped> {
    let ptx = format!("{HEADER}{}\n", "y".repeat(bytes));
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    out.step(session.load_ptx(&ptx))?;
    out.ok("load", "");
    Ok(())
}

fn big_module(out: &mut Out, bytes: usize) -> Result<(), Stopped> {
    let mut ptx = format!("{HEADER}.visible .entry empty()\n{{\n\tret;\n}}\n// ");
    let pad = bytes.saturating_sub(ptx.len() + 1);
    ptx.push_str(&"z".repeat(pad));
    ptx.push('\n');
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    out.step(session.load_ptx(&ptx))?;
    out.ok("load", ptx.len());
    Ok(())
}

/// Values separated by spaces.
fn join<T: core::fmt::Display>(values: &[T]) -> String {
    let mut s = String::new();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{v}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_struct_is_c_sized() {
        assert_eq!(core::mem::size_of::<Vec3>(), 12);
        assert_eq!(
            tasklet_gpu::bytemuck::bytes_of(&Vec3::new(1.0, 0.0, 0.0))[..4],
            1.0f32.to_le_bytes()
        );
    }

    #[test]
    fn unknown_commands_are_errors() {
        assert!(run(b"nope".to_vec())
            .unwrap_err()
            .contains("unknown command"));
        assert_eq!(join(&[1, 2, 3]), "1 2 3");
    }
}

fn kernels(out: &mut Out) -> Result<(), Stopped> {
    let lease = out.step(Lease::builder().acquire())?;
    let session = out.step(lease.session())?;
    let scale = out.step(session.load_ptx(SCALE_PTX))?;
    let params: Vec<String> = scale
        .kernels()
        .iter()
        .filter(|k| *k == "scale")
        .flat_map(|k| k.params.iter())
        .map(|p| format!("{}:{}:{}:{:?}", p.name, p.size, p.align, p.kind))
        .collect();
    out.ok("params", params.join(" "));

    let module = out.step(session.load_ptx(IOTA_PTX))?;
    let iota = out.step(module.kernel("iota"))?;
    let buf = out.step(session.alloc::<u32>(8))?;
    let mut ordinals = Vec::new();
    for n in [4u32, 8] {
        let launch = session
            .launch_kernel(&iota)
            .config(LaunchConfig::for_num_elems(n))
            .arg(&buf)
            .arg(n)
            .run_ordinal();
        ordinals.push(out.step(launch)?);
    }
    out.ok("ordinals", format!("{} {}", ordinals[0], ordinals[1]));
    let values = out.step(buf.read())?;
    out.ok("handle", join(&values));

    // A kernel handle of another session's module, launched here through the raw bindings
    // (the typed API refuses it before the host sees it).
    let other = out.step(lease.session())?;
    let foreign_module = out.step(other.load_ptx(IOTA_PTX))?;
    let foreign = out.step(foreign_module.kernel("iota"))?;
    use tasklet_gpu::raw::sessions::KernelArg as K;
    let r = session.raw().launch_kernel(
        foreign.raw(),
        LaunchConfig::linear(1, 1).to_raw(),
        &[K::U32(1), K::U32(1)],
    );
    out.step(r.map_err(Error::from))?;
    out.ok("foreign", "launched");
    Ok(())
}
