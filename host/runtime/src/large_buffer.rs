//! Host buffers for large reads (a `mem-read` of hundreds of MiB, its data arriving from a worker
//! or a node), asked to be backed by 2 MiB pages.
//!
//! A buffer that large is fresh memory from the kernel, and every 4 KiB page of it faults when
//! first written: on the H200 virtual machines this is measured on, 256 MiB faulted in that way
//! at about 2 GB/s, slower than the copy into it and than the network a remote read arrives on,
//! so it bounded reads (a local 256 MiB `mem-read` at 1.75 GB/s, a remote one at 1.39). With
//! 2 MiB pages the same memory faults 512 times fewer and came in at 6 GB/s, and the reads at
//! 3.79 and 1.66 GB/s. Where the kernel has transparent huge pages off (or outside Linux) the
//! advice is ignored and the buffer is an ordinary one.

/// Buffers smaller than this are left alone: they hold at most a page or two of 2 MiB.
pub const ADVISED_MIN: usize = 4 << 20;

/// The size of a transparent huge page on the machines this runs on (x86-64, arm64 with 4 KiB
/// base pages).
const HUGE_PAGE: usize = 2 << 20;

/// `len` zeroed bytes.
pub fn zeroed(len: usize) -> Vec<u8> {
    let buffer = vec![0u8; len];
    advise(buffer.as_ptr(), buffer.capacity());
    buffer
}

/// An empty buffer with room for `len` bytes.
pub fn with_capacity(len: usize) -> Vec<u8> {
    let buffer = Vec::with_capacity(len);
    advise(buffer.as_ptr(), buffer.capacity());
    buffer
}

/// Advises the 2 MiB-aligned pages inside `ptr..ptr + len` to be backed by huge pages. Memory
/// that is already touched keeps its contents (the advice only changes how later faults are
/// served), so this is harmless whatever the allocator handed out.
fn advise(ptr: *const u8, len: usize) {
    if len < ADVISED_MIN {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
    if end <= start {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies inside an allocation this function's caller owns, and
    // MADV_HUGEPAGE changes no byte of it. A kernel that refuses (THP off) changes nothing.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_usable_whatever_their_size() {
        for len in [
            0,
            1,
            ADVISED_MIN - 1,
            ADVISED_MIN,
            ADVISED_MIN + 4097,
            3 * HUGE_PAGE + 5,
        ] {
            let zeros = zeroed(len);
            assert_eq!(zeros.len(), len);
            assert!(zeros.iter().all(|&b| b == 0));
            let mut filled = with_capacity(len);
            assert!(filled.capacity() >= len);
            filled.extend((0..len).map(|i| i as u8));
            assert!(filled.iter().enumerate().all(|(i, &b)| b == i as u8));
        }
    }

    /// The advice reaches the kernel: a large buffer's memory is marked for huge pages where
    /// the kernel offers them at all.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_buffer_is_marked_for_huge_pages() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !thp.contains("[always]") && !thp.contains("[madvise]") {
            println!("skipped: transparent huge pages are off on this machine ({thp:?})");
            return;
        }
        let buffer = zeroed(64 << 20);
        let at = buffer.as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        // The mapping that holds the buffer's first aligned huge page, and its flags.
        let probe = at.next_multiple_of(HUGE_PAGE);
        let mut inside = false;
        let mut flags = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= probe && probe < hi;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(vm) = line.strip_prefix("VmFlags:") {
                    flags = Some(vm.to_owned());
                    break;
                }
            }
        }
        let flags = flags.expect("the buffer's mapping in /proc/self/smaps");
        assert!(
            flags.split_whitespace().any(|f| f == "hg"),
            "no `hg` (huge pages advised) among {flags}"
        );
        drop(buffer);
    }
}
