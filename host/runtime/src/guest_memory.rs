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
//! Memories are reused: when an instance's memory is dropped it is zeroed and kept idle (see
//! [`MemoryPool`]), so that the next instance gets an existing mapping instead of a new memfd,
//! mapping and page faults, and its old one is not unmapped (which on a multi-core machine is a
//! TLB shootdown). A memory a worker still maps, or may still write, is never reused.
//!
//! Besides the worker, the host itself writes into linear memory in one place: a `mem-read-into`
//! too small for a worker round trip through the shared mapping is read into a host buffer and
//! copied in with [`copy_into_guest`], through the memory's own mutable base pointer (never
//! through a reference wasmtime handed out).

pub mod staging;

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};
use tasklet_worker::guest_memory::{locate, SharedMemory};
use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

/// The reservation when wasmtime leaves it to us and the memory has no maximum: all of a 32-bit
/// memory's address space, as wasmtime's own default.
const DEFAULT_RESERVATION: usize = 4 << 30;

/// Idle memories a creator keeps for reuse. A node runs about as many tasklets at once as it has
/// blocking threads busy with them; past this, dropped memories are unmapped.
pub const DEFAULT_IDLE_MEMORIES: usize = 32;

/// Bytes of zeroed pages an idle memory keeps (the rest of what its last user touched is given
/// back to the kernel): enough for a small tasklet's data, stack and heap, so that its next run
/// takes no page faults, while idle memories together hold at most
/// `DEFAULT_IDLE_MEMORIES × DEFAULT_KEEP_RESIDENT` (64 MiB).
pub const DEFAULT_KEEP_RESIDENT: usize = 2 << 20;

/// Creates every linear memory of an engine as a [`SharedMemory`], reusing those of instances
/// that are gone. Install it with [`wasmtime::Config::with_host_memory`], together with
/// `memory_init_cow(false)`: a copy-on-write image would be mapped over the memory, replacing
/// the shared pages with private ones.
#[derive(Debug, Default)]
pub struct GuestMemoryCreator {
    pool: Arc<MemoryPool>,
}

impl GuestMemoryCreator {
    /// A creator whose pool keeps up to `idle` memories, each with up to `keep_resident` bytes
    /// of zeroed pages.
    pub fn new(idle: usize, keep_resident: usize) -> GuestMemoryCreator {
        GuestMemoryCreator {
            pool: Arc::new(MemoryPool::new(idle, keep_resident)),
        }
    }

    /// The pool dropped memories go back to.
    pub fn pool(&self) -> &Arc<MemoryPool> {
        &self.pool
    }
}

/// Idle linear memories, zeroed, waiting for an instance of the same layout (reservation and
/// guard: an engine's memories all have the same).
///
/// # Why reuse is safe
///
/// A memory is zeroed when it comes back ([`SharedMemory::clear`]) — every page that holds data,
/// swapped-out ones included — so no instance ever sees what an earlier one (another tenant's
/// run) left in it, and idle memories hold no tenant's data. Only memories nothing else refers to
/// come back ([`SharedMemory::is_exclusive`]): one that a GPU worker mapped for a zero-copy
/// transfer and has not yet let go of (a worker is reset, detaching every memory, when its lease
/// ends; a worker given up is killed, but keeps the memory until it is reaped) is unmapped
/// instead, so that nothing can write into it once it is someone else's. Whatever is past the
/// next instance's size is made inaccessible again ([`SharedMemory::shrink_to`]), as wasmtime's
/// elided bounds checks require.
#[derive(Debug)]
pub struct MemoryPool {
    max_idle: usize,
    keep_resident: usize,
    idle: Mutex<Vec<Idle>>,
}

#[derive(Debug)]
struct Idle {
    shared: SharedMemory,
    guard: usize,
}

impl Default for MemoryPool {
    fn default() -> MemoryPool {
        MemoryPool::new(DEFAULT_IDLE_MEMORIES, DEFAULT_KEEP_RESIDENT)
    }
}

impl MemoryPool {
    fn new(max_idle: usize, keep_resident: usize) -> MemoryPool {
        MemoryPool {
            max_idle,
            keep_resident,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// How many zeroed memories wait for reuse.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    /// An idle memory of this layout, sized to `size` bytes (a page multiple).
    fn take(&self, size: usize, reserve: usize, guard: usize) -> Option<SharedMemory> {
        let mut shared = {
            let mut idle = self.lock();
            let at = idle
                .iter()
                .rposition(|m| m.guard == guard && m.shared.capacity() == reserve)?;
            idle.swap_remove(at).shared
        };
        let resized = if size <= shared.size() {
            shared.shrink_to(size)
        } else {
            shared.grow_to(size)
        };
        // A memory that cannot be resized is dropped (unmapped); the caller makes a new one.
        resized.ok().map(|()| shared)
    }

    /// Takes back the memory of an instance that is gone: zeroed and kept, or dropped.
    fn give(&self, mut shared: SharedMemory, guard: usize) {
        if self.max_idle == 0 || self.lock().len() >= self.max_idle {
            return;
        }
        // Not exclusive (a worker may still map it), or not zeroed: unmapped, never reused.
        if shared.clear(self.keep_resident).is_err() {
            return;
        }
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push(Idle { shared, guard });
        }
    }

    /// The lock guards a plain list, consistent between statements: taken even if poisoned.
    fn lock(&self) -> MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A linear memory over a [`SharedMemory`]. `size` is the wasm-visible size in bytes; the mapping
/// is that rounded up to whole host pages.
struct GuestMemory {
    /// Taken out only by `drop`, which hands it back to the pool.
    shared: ManuallyDrop<SharedMemory>,
    size: usize,
    maximum: Option<usize>,
    guard: usize,
    pool: Arc<MemoryPool>,
}

/// Base pointers of the live memories by id, so that [`copy_into_guest`] writes through the
/// mapping's own `*mut` (whose provenance covers the memory) rather than one derived from a slice.
/// Idle memories are not in it.
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

// SAFETY: memories are zero-filled (a fresh memfd, or a reused one that was cleared; growth maps
// new, zeroed file pages), exactly `reserved_size_in_bytes` (when given) plus
// `guard_size_in_bytes` of address space is reserved with everything past the accessible size
// PROT_NONE (a reused memory is of the same layout and shrunk to the size), and the base never
// moves.
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
        let shared = match self.pool.take(mapped, reserve, guard_size_in_bytes) {
            Some(shared) => shared,
            None => SharedMemory::create(mapped, reserve, guard_size_in_bytes).map_err(|e| {
                format!("cannot map a shared linear memory of {minimum} bytes (reserving {reserve} + {guard_size_in_bytes}): {e}")
            })?,
        };
        bases()
            .get_or_insert_with(HashMap::new)
            .insert(shared.id(), Base(shared.as_ptr()));
        Ok(Box::new(GuestMemory {
            shared: ManuallyDrop::new(shared),
            size: minimum,
            maximum,
            guard: guard_size_in_bytes,
            pool: Arc::clone(&self.pool),
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
        // SAFETY: taken once, here; `self.shared` is not used again.
        let shared = unsafe { ManuallyDrop::take(&mut self.shared) };
        if let Some(map) = bases().as_mut() {
            map.remove(&shared.id());
        }
        // wasmtime is done with the memory (the instance is gone): back to the pool.
        self.pool.give(shared, self.guard);
    }
}

/// The creator to install on an engine, its pool sized by default.
pub fn creator() -> Arc<dyn MemoryCreator> {
    Arc::new(GuestMemoryCreator::default())
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
        engine_with(Arc::new(GuestMemoryCreator::default()))
    }

    fn engine_with(creator: Arc<GuestMemoryCreator>) -> Engine {
        let mut c = Config::new();
        c.with_host_memory(creator).memory_init_cow(false);
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
        // No pool: every memory here is a new one.
        let c = GuestMemoryCreator::new(0, 0);
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

    /// One instance writes all over its memory (data, heap, memory it grew), then goes; the
    /// next instance of the module gets the very same memory back (same base address), and sees
    /// nothing of what the first wrote: its data segment, zeros elsewhere, its own initial size.
    /// Once with pages kept resident (zeroed in place) and once with none (all punched out).
    #[test]
    fn a_reused_memory_shows_nothing_of_its_last_user() {
        for keep in [DEFAULT_KEEP_RESIDENT, 0] {
            let creator = Arc::new(GuestMemoryCreator::new(4, keep));
            let engine = engine_with(Arc::clone(&creator));
            let module = module(&engine, 2, None);
            let secrets: [i32; 5] = [
                0,
                40,
                WASM_PAGE as i32 + 3,
                2 * WASM_PAGE as i32 - 1,
                3 * WASM_PAGE as i32 + 5,
            ];
            let first_base = {
                let mut store = store(&engine, 1 << 30);
                let inst = Instance::new(&mut store, &module, &[]).unwrap();
                let grow = inst.get_typed_func::<i32, i32>(&mut store, "grow").unwrap();
                let store8 = inst
                    .get_typed_func::<(i32, i32), ()>(&mut store, "store")
                    .unwrap();
                assert_eq!(grow.call(&mut store, 3).unwrap(), 2);
                for at in secrets {
                    store8.call(&mut store, (at, 0x5a)).unwrap();
                }
                let mem = inst.get_memory(&mut store, "mem").unwrap();
                mem.data_mut(&mut store)[1000..1000 + 4096].fill(0xa5);
                mem.data_ptr(&store)
            };
            assert_eq!(
                creator.pool().idle(),
                1,
                "the memory came back (keep {keep})"
            );

            let mut store = store(&engine, 1 << 30);
            let inst = Instance::new(&mut store, &module, &[]).unwrap();
            let mem = inst.get_memory(&mut store, "mem").unwrap();
            assert_eq!(mem.data_ptr(&store), first_base, "the same memory, reused");
            assert_eq!(creator.pool().idle(), 0);
            assert_eq!(mem.data_size(&store), 2 * WASM_PAGE, "its own initial size");
            let data = mem.data(&store);
            assert_eq!(&data[16..19], b"seg", "its data segment");
            let stale = data[..16].iter().chain(&data[19..]).position(|&b| b != 0);
            assert_eq!(stale, None, "a byte the last user wrote (keep {keep})");
            let load = inst.get_typed_func::<i32, i32>(&mut store, "load").unwrap();
            let grow = inst.get_typed_func::<i32, i32>(&mut store, "grow").unwrap();
            // Past its size it traps again, though the last user had grown it.
            assert!(load.call(&mut store, 2 * WASM_PAGE as i32).is_err());
            // Grown again, the pages the last user wrote read as zeros.
            assert_eq!(grow.call(&mut store, 3).unwrap(), 2);
            for at in secrets {
                assert_eq!(
                    load.call(&mut store, at).unwrap(),
                    0,
                    "at {at} (keep {keep})"
                );
            }
            let data = mem.data(&store);
            assert!(data[2 * WASM_PAGE..].iter().all(|&b| b == 0));
        }
    }

    /// A memory something else still refers to (here a span, as a worker's transfer holds; a
    /// worker that attached it holds it the same way until it lets go) is not reused: whoever
    /// holds it could still write into it.
    #[test]
    fn a_memory_still_referred_to_is_not_reused() {
        let creator = GuestMemoryCreator::new(4, DEFAULT_KEEP_RESIDENT);
        let ty = MemoryType::new(1, None);
        let m = creator
            .new_memory(ty.clone(), WASM_PAGE, None, Some(16 * WASM_PAGE), 0)
            .unwrap();
        let span = locate(m.as_ptr(), WASM_PAGE).expect("a shared memory");
        drop(m);
        assert_eq!(
            creator.pool().idle(),
            0,
            "held by a span: unmapped, not pooled"
        );
        drop(span);
        let m = creator
            .new_memory(ty, WASM_PAGE, None, Some(16 * WASM_PAGE), 0)
            .unwrap();
        drop(m);
        assert_eq!(
            creator.pool().idle(),
            1,
            "referred to by nothing else: pooled"
        );
    }

    /// The pool holds at most its bound; memories of another layout are not handed out.
    #[test]
    fn the_pool_is_bounded_and_keyed_by_layout() {
        let creator = GuestMemoryCreator::new(2, DEFAULT_KEEP_RESIDENT);
        let ty = MemoryType::new(1, None);
        let make = |reserve: usize| {
            creator
                .new_memory(ty.clone(), WASM_PAGE, None, Some(reserve), 0)
                .unwrap()
        };
        let (a, b, c) = (
            make(16 * WASM_PAGE),
            make(16 * WASM_PAGE),
            make(16 * WASM_PAGE),
        );
        drop((a, b, c));
        assert_eq!(creator.pool().idle(), 2);
        let other = make(32 * WASM_PAGE);
        assert_eq!(other.byte_capacity(), 32 * WASM_PAGE);
        assert_eq!(creator.pool().idle(), 2, "none of the pooled ones fits");
        let same = make(16 * WASM_PAGE);
        assert_eq!(same.byte_capacity(), 16 * WASM_PAGE);
        assert_eq!(creator.pool().idle(), 1);
    }
}
