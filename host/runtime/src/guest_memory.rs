//! Tasklet linear memories a GPU worker can reach: every memory wasmtime creates for this host's
//! engine is a [`SharedMemory`] (a memfd mapping a worker maps too), so a bulk `mem-write` or
//! `mem-read-into` moves bytes between the device and linear memory in one copy (one DMA on cuda),
//! with no host-side staging.
//!
//! wasmtime's compiled code elides bounds checks from the reservation and guard it asked for, so
//! both are honoured exactly; the memory never moves, so growth past the reservation fails (which
//! wasmtime reports as a failed `memory.grow`, or a trap under the store's limiter). The store's
//! [`wasmtime::StoreLimits`] is consulted by wasmtime before every creation and growth, so it bites
//! exactly as it does for wasmtime's own memories.
//!
//! Besides the worker, the host itself writes into linear memory in one place: a `mem-read-into`
//! too small for a worker round trip through the shared mapping is read into a host buffer and
//! copied in with [`copy_into_guest`], through the memory's own mutable base pointer (never
//! through a reference wasmtime handed out).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tasklet_worker::guest_memory::{locate, SharedMemory};
use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

/// The reservation when wasmtime leaves it to us and the memory has no maximum: all of a 32-bit
/// memory's address space, as wasmtime's own default.
const DEFAULT_RESERVATION: usize = 4 << 30;

/// Creates every linear memory of an engine as a [`SharedMemory`]. Install it with
/// [`wasmtime::Config::with_host_memory`], together with `memory_init_cow(false)`: a copy-on-write
/// image would be mapped over the memory, replacing the shared pages with private ones.
#[derive(Debug, Default)]
pub struct GuestMemoryCreator;

/// A linear memory over a [`SharedMemory`]. `size` is the wasm-visible size in bytes; the mapping
/// is that rounded up to whole host pages.
struct GuestMemory {
    shared: SharedMemory,
    size: usize,
    maximum: Option<usize>,
}

/// Base pointers of the live memories by id, so that [`copy_into_guest`] writes through the
/// mapping's own `*mut` (whose provenance covers the memory) rather than one derived from a slice.
static BASES: Mutex<Option<HashMap<u64, Base>>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct Base(*mut u8);
// SAFETY: a plain address of a process-wide mapping; it is only dereferenced by `copy_into_guest`,
// whose caller guarantees that nothing else touches those bytes meanwhile.
unsafe impl Send for Base {}

fn bases() -> std::sync::MutexGuard<'static, Option<HashMap<u64, Base>>> {
    BASES.lock().unwrap_or_else(|p| p.into_inner())
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

fn round_up(n: usize, page: usize) -> Option<usize> {
    n.checked_add(page - 1).map(|n| n / page * page)
}

// SAFETY: memories are zero-filled (a fresh memfd; growth maps new, zeroed file pages), exactly
// `reserved_size_in_bytes` (when given) plus `guard_size_in_bytes` of address space is reserved
// with everything past the accessible size PROT_NONE, and the base never moves.
unsafe impl MemoryCreator for GuestMemoryCreator {
    fn new_memory(
        &self,
        _ty: MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved_size_in_bytes: Option<usize>,
        guard_size_in_bytes: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        let page = page_size();
        let mapped = round_up(minimum, page)
            .ok_or_else(|| format!("a linear memory of {minimum} bytes cannot be mapped"))?;
        let reserve = match reserved_size_in_bytes {
            // wasmtime sized its bounds-check elision by this: reserve exactly this much.
            Some(r) => r,
            None => match maximum {
                Some(m) => round_up(m, page)
                    .ok_or_else(|| format!("a maximum of {m} bytes cannot be reserved"))?,
                None => DEFAULT_RESERVATION,
            },
        }
        .max(mapped);
        if reserved_size_in_bytes.is_some_and(|r| r < mapped) {
            return Err(format!(
                "a linear memory of {minimum} bytes does not fit the engine's {reserve}-byte reservation; \
                 raise `Config::memory_reservation`"
            ));
        }
        let shared = SharedMemory::create(mapped, reserve, guard_size_in_bytes).map_err(|e| {
            format!("cannot map a shared linear memory of {minimum} bytes (reserving {reserve} + {guard_size_in_bytes}): {e}")
        })?;
        bases()
            .get_or_insert_with(HashMap::new)
            .insert(shared.id(), Base(shared.as_ptr()));
        Ok(Box::new(GuestMemory {
            shared,
            size: minimum,
            maximum,
        }))
    }
}

// SAFETY: `as_ptr` is the fixed base of a mapping of at least `byte_capacity` bytes (reserved) of
// which `byte_size` are accessible; growth never moves it.
unsafe impl LinearMemory for GuestMemory {
    fn byte_size(&self) -> usize {
        self.size
    }

    fn byte_capacity(&self) -> usize {
        self.shared.capacity()
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        if self.maximum.is_some_and(|m| new_size > m) {
            wasmtime::bail!(
                "cannot grow a linear memory past its maximum of {} bytes",
                self.maximum.unwrap_or(0)
            );
        }
        let mapped = round_up(new_size, page_size()).ok_or_else(|| {
            wasmtime::format_err!("a linear memory of {new_size} bytes cannot be mapped")
        })?;
        if mapped > self.shared.size() {
            // Fails past the reservation: the memory cannot move.
            self.shared.grow_to(mapped)?;
        }
        self.size = self.size.max(new_size);
        Ok(())
    }

    fn as_ptr(&self) -> *mut u8 {
        self.shared.as_ptr()
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        if let Some(map) = bases().as_mut() {
            map.remove(&self.shared.id());
        }
    }
}

/// The creator to install on an engine.
pub fn creator() -> Arc<dyn MemoryCreator> {
    Arc::new(GuestMemoryCreator)
}

/// Copies `data` into the linear memory at host address `dst` (which must lie, with `data.len()`
/// bytes after it, in a live memory of this creator). Returns `false`, copying nothing, where it
/// does not.
///
/// # Safety
///
/// Nothing may read or write those bytes during the call: the caller runs inside a host call of
/// the store owning the memory (so no guest code runs) and holds no reference into it (e.g. a
/// slice from `WasmList::as_le_slice`, which must be dropped first).
pub unsafe fn copy_into_guest(dst: usize, data: &[u8]) -> bool {
    let Some(span) = locate(dst as *const u8, data.len()) else {
        return false;
    };
    let Some(base) = bases()
        .as_ref()
        .and_then(|m| m.get(&span.memory_id()).copied())
    else {
        return false;
    };
    // SAFETY: `locate` found `offset..offset+len` within the memory's current size, and `base` is
    // that memory's own mutable base pointer (it never moves; the memory is live: it is in the
    // map, removed only when the memory drops, and the caller's store owns it). The caller
    // guarantees exclusive access to those bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base.0.add(span.offset()), data.len()) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Config, Engine, Instance, Module, Store, StoreLimits, StoreLimitsBuilder};

    const WASM_PAGE: usize = 64 << 10;

    fn engine() -> Engine {
        let mut c = Config::new();
        c.with_host_memory(creator()).memory_init_cow(false);
        Engine::new(&c).unwrap()
    }

    /// A module with one memory of `min` pages (max `max`), the data segment "seg" at 16, and
    /// functions `load(addr) -> u8`, `store(addr, u8)` and `grow(pages) -> old`. Encoded by hand:
    /// the workspace has no text-format parser.
    fn module(engine: &Engine, min: u32, max: Option<u32>) -> Module {
        fn leb(mut v: u32, out: &mut Vec<u8>) {
            loop {
                let byte = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    out.push(byte);
                    return;
                }
                out.push(byte | 0x80);
            }
        }
        fn section(id: u8, body: Vec<u8>, out: &mut Vec<u8>) {
            out.push(id);
            leb(body.len() as u32, out);
            out.extend(body);
        }
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        // Types: 0 = (i32) -> i32, 1 = (i32, i32) -> ().
        section(
            1,
            vec![2, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 0],
            &mut m,
        );
        section(3, vec![3, 0, 1, 0], &mut m);
        let mut mem = vec![1];
        match max {
            None => {
                mem.push(0);
                leb(min, &mut mem);
            }
            Some(max) => {
                mem.push(1);
                leb(min, &mut mem);
                leb(max, &mut mem);
            }
        }
        section(5, mem, &mut m);
        let mut exports = vec![4];
        for (name, kind, index) in [
            ("mem", 2u8, 0u8),
            ("load", 0, 0),
            ("store", 0, 1),
            ("grow", 0, 2),
        ] {
            exports.push(name.len() as u8);
            exports.extend(name.as_bytes());
            exports.extend([kind, index]);
        }
        section(7, exports, &mut m);
        let bodies: [&[u8]; 3] = [
            &[0, 0x20, 0, 0x2d, 0, 0, 0x0b],          // local.get 0; i32.load8_u
            &[0, 0x20, 0, 0x20, 1, 0x3a, 0, 0, 0x0b], // local.get 0; local.get 1; i32.store8
            &[0, 0x20, 0, 0x40, 0, 0x0b],             // local.get 0; memory.grow
        ];
        let mut code = vec![3];
        for b in bodies {
            code.push(b.len() as u8);
            code.extend(b);
        }
        section(10, code, &mut m);
        section(11, vec![1, 0, 0x41, 16, 0x0b, 3, b's', b'e', b'g'], &mut m);
        Module::new(engine, &m).unwrap()
    }

    struct Ctx {
        limits: StoreLimits,
    }

    fn store(engine: &Engine, limit: usize) -> Store<Ctx> {
        let mut s = Store::new(
            engine,
            Ctx {
                limits: StoreLimitsBuilder::new().memory_size(limit).build(),
            },
        );
        s.limiter(|c| &mut c.limits);
        s
    }

    #[test]
    fn memories_are_shared_zeroed_and_initialised() {
        let engine = engine();
        let mut store = store(&engine, 1 << 30);
        let inst = Instance::new(&mut store, &module(&engine, 2, None), &[]).unwrap();
        let mem = inst.get_memory(&mut store, "mem").unwrap();
        assert_eq!(mem.data_size(&store), 2 * WASM_PAGE);
        let data = mem.data(&store);
        assert_eq!(
            &data[16..19],
            b"seg",
            "the data segment is copied in (no copy-on-write image)"
        );
        assert!(data[..16].iter().chain(&data[19..]).all(|&b| b == 0));
        let ptr = mem.data_ptr(&store);
        let span = locate(ptr, 2 * WASM_PAGE).expect("the memory is a SharedMemory");
        assert_eq!((span.offset(), span.len()), (0, 2 * WASM_PAGE));
        assert!(
            locate(ptr, 2 * WASM_PAGE + 1).is_none(),
            "past the size is not part of the memory"
        );
    }

    #[test]
    fn growth_is_in_place_zeroed_and_visible_to_locate() {
        let engine = engine();
        let mut store = store(&engine, 1 << 30);
        let inst = Instance::new(&mut store, &module(&engine, 1, Some(8)), &[]).unwrap();
        let mem = inst.get_memory(&mut store, "mem").unwrap();
        let grow = inst.get_typed_func::<i32, i32>(&mut store, "grow").unwrap();
        let store8 = inst
            .get_typed_func::<(i32, i32), ()>(&mut store, "store")
            .unwrap();
        let load = inst.get_typed_func::<i32, i32>(&mut store, "load").unwrap();
        let before = mem.data_ptr(&store);
        assert_eq!(grow.call(&mut store, 3).unwrap(), 1);
        assert_eq!(
            mem.data_ptr(&store),
            before,
            "growth never moves the memory"
        );
        assert_eq!(mem.data_size(&store), 4 * WASM_PAGE);
        let at = 3 * WASM_PAGE as i32 + 5;
        assert_eq!(
            load.call(&mut store, at).unwrap(),
            0,
            "new pages read as zeros"
        );
        store8.call(&mut store, (at, 7)).unwrap();
        assert!(
            locate(before, 4 * WASM_PAGE).is_some(),
            "grown pages are located"
        );
        // Past the size, accesses trap (bounds checks are elided: the PROT_NONE pages fault).
        assert!(load.call(&mut store, 4 * WASM_PAGE as i32).is_err());
        // The maximum bites: 4 + 5 > 8 pages.
        assert_eq!(grow.call(&mut store, 5).unwrap(), -1);
        assert_eq!(mem.data_size(&store), 4 * WASM_PAGE);
    }

    #[test]
    fn the_store_limit_bites() {
        let engine = engine();
        let mut store = store(&engine, 3 * WASM_PAGE);
        let inst = Instance::new(&mut store, &module(&engine, 1, None), &[]).unwrap();
        let grow = inst.get_typed_func::<i32, i32>(&mut store, "grow").unwrap();
        assert_eq!(grow.call(&mut store, 2).unwrap(), 1);
        assert_eq!(
            grow.call(&mut store, 1).unwrap(),
            -1,
            "a fourth page is over the store's limit"
        );
        // And a memory whose minimum is over it is never created.
        let mut small = self::store(&engine, WASM_PAGE);
        assert!(Instance::new(&mut small, &module(&engine, 2, None), &[]).is_err());
    }

    #[test]
    fn the_guard_and_reservation_are_honoured() {
        let page = page_size();
        let c = GuestMemoryCreator;
        let ty = MemoryType::new(1, None);
        let (reserve, guard) = (16 * WASM_PAGE, 4 * page);
        let mut m = c
            .new_memory(ty.clone(), WASM_PAGE, None, Some(reserve), guard)
            .unwrap();
        assert_eq!((m.byte_size(), m.byte_capacity()), (WASM_PAGE, reserve));
        let base = m.as_ptr();
        m.grow_to(reserve).unwrap();
        assert_eq!(m.as_ptr(), base);
        assert!(
            m.grow_to(reserve + WASM_PAGE).is_err(),
            "the memory cannot grow past its reservation"
        );
        // Past the reservation lies the guard, inaccessible (the compiled code relies on it
        // faulting), and `locate` (what the worker paths use) never reports it as memory.
        assert!(locate(base, reserve).is_some());
        assert!(locate(base, reserve + 1).is_none());
        let guard_at = base as usize + reserve;
        assert_eq!(inaccessible_bytes(guard_at, guard_at + guard), guard);
        // No maximum and no reservation: 4 GiB; a maximum bounds it.
        let m = c.new_memory(ty.clone(), WASM_PAGE, None, None, 0).unwrap();
        assert_eq!(m.byte_capacity(), DEFAULT_RESERVATION);
        let m = c
            .new_memory(ty.clone(), WASM_PAGE, Some(3 * WASM_PAGE), None, 0)
            .unwrap();
        assert_eq!(m.byte_capacity(), 3 * WASM_PAGE);
        // A minimum beyond the engine's reservation is refused, not silently over-reserved.
        assert!(c
            .new_memory(ty, 2 * WASM_PAGE, None, Some(WASM_PAGE), 0)
            .is_err());
    }

    /// Bytes of `start..end` that /proc/self/maps shows mapped with no access at all.
    fn inaccessible_bytes(start: usize, end: usize) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mut covered = 0;
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let (range, perms) = (f.next().unwrap(), f.next().unwrap());
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                usize::from_str_radix(a, 16).unwrap(),
                usize::from_str_radix(b, 16).unwrap(),
            );
            let (lo, hi) = (a.max(start), b.min(end));
            if lo < hi && perms.starts_with("---") {
                covered += hi - lo;
            }
        }
        covered
    }

    #[test]
    fn copy_into_guest_writes_only_live_memory() {
        let engine = engine();
        let mut store = store(&engine, 1 << 30);
        let inst = Instance::new(&mut store, &module(&engine, 1, None), &[]).unwrap();
        let mem = inst.get_memory(&mut store, "mem").unwrap();
        let base = mem.data_ptr(&store) as usize;
        // SAFETY: no reference into the memory is live and no guest code runs.
        assert!(unsafe { copy_into_guest(base + 100, b"abc") });
        assert_eq!(&mem.data(&store)[100..103], b"abc");
        // SAFETY: as above; these ranges are refused before anything is written.
        assert!(!unsafe { copy_into_guest(base + WASM_PAGE - 1, b"ab") });
        let host = [0u8; 8];
        assert!(!unsafe { copy_into_guest(host.as_ptr() as usize, b"ab") });
    }
}
