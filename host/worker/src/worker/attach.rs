//! Worker side of guest memories: the memfds the host sent over the control socket, mapped here,
//! and the byte ranges of them that `write-from` / `read-into` copy from and to.
//!
//! The host is trusted here but the guest's ranges are re-checked anyway, against the mapping and
//! against the memfd's *current* size (`fstat`): pages past the file's end are mapped but would
//! SIGBUS if touched. The host sealed the memfd against shrinking, so a size seen once stays valid.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};

use super::backend::{Backend, BackendError};
use crate::contract::control_socket::{file_size, recv_fd, Received};
use crate::contract::ErrorKind;

/// Every guest memory this worker has mapped, by the host's memory id.
pub struct Attachments {
    ctl: Option<OwnedFd>,
    map: BTreeMap<u64, Attachment>,
}

struct Attachment {
    fd: OwnedFd,
    base: *mut u8,
    /// Bytes mapped (the memory's capacity; at least one page's worth of address space).
    mapped: usize,
    /// Bytes last given to `Backend::map_host` (the valid size then).
    told: usize,
    /// Device addresses of the ranges of it made visible to kernels (`Backend::map_device`),
    /// undone before the memory is unmapped.
    device_maps: Vec<u64>,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `attach`; the backend was told to forget it first
        // (`Attachments::remove`), and no slice into it outlives a request.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

fn invalid(msg: String) -> BackendError {
    BackendError::new(ErrorKind::InvalidArgument, msg)
}

impl Attachments {
    /// `ctl`: the worker's end of the control socket (None: a worker started without one, which
    /// refuses every attachment).
    pub fn new(ctl: Option<OwnedFd>) -> Attachments {
        Attachments {
            ctl,
            map: BTreeMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether memory `id` is attached.
    pub fn contains(&self, id: u64) -> bool {
        self.map.contains_key(&id)
    }

    /// Maps memory `id`, taking its fd from the control socket, where the host queued it before
    /// sending the request. Packets with other tags are stale (an attach the host gave up on)
    /// and are dropped.
    pub fn attach(
        &mut self,
        b: &mut dyn Backend,
        id: u64,
        capacity: u64,
    ) -> Result<(), BackendError> {
        let ctl = self
            .ctl
            .as_ref()
            .ok_or_else(|| invalid("this worker has no control socket".into()))?;
        let fd = loop {
            match recv_fd(ctl.as_fd()) {
                Ok(Received::Fd { tag, fd }) if tag == id => break fd,
                Ok(Received::Fd { .. } | Received::Malformed) => continue,
                Ok(Received::Empty) => {
                    return Err(invalid(format!(
                        "no descriptor was sent for guest memory {id}"
                    )))
                }
                Err(e) => return Err(invalid(format!("control socket: {e}"))),
            }
        };
        let capacity = usize::try_from(capacity)
            .ok()
            .filter(|&c| c <= isize::MAX as usize)
            .ok_or_else(|| invalid(format!("guest memory capacity {capacity}")))?;
        let mapped = capacity.max(1);
        // SAFETY: a fresh shared mapping of the memfd at an address the kernel picks. NORESERVE:
        // it is only address space; the host's memfd holds the pages.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!("cannot map guest memory {id}: {e}"),
            ));
        }
        self.remove(b, id);
        let mut a = Attachment {
            fd,
            base: p.cast(),
            mapped,
            told: 0,
            device_maps: Vec::new(),
        };
        let valid = valid_size(&a)?;
        b.map_host(a.base, valid)?;
        a.told = valid;
        self.map.insert(id, a);
        Ok(())
    }

    /// Unmaps memory `id`; not attached is an error (the host's books and ours disagree).
    pub fn detach(&mut self, b: &mut dyn Backend, id: u64) -> Result<(), BackendError> {
        if self.remove(b, id) {
            Ok(())
        } else {
            Err(invalid(format!("guest memory {id} is not attached")))
        }
    }

    /// Unmaps every memory (reset).
    pub fn detach_all(&mut self, b: &mut dyn Backend) {
        let ids: Vec<u64> = self.map.keys().copied().collect();
        for id in ids {
            self.remove(b, id);
        }
    }

    fn remove(&mut self, b: &mut dyn Backend, id: u64) -> bool {
        match self.map.remove(&id) {
            Some(a) => {
                for addr in &a.device_maps {
                    // The backend forgets the mapping either way; an error here can only say it
                    // had already.
                    let _ = b.unmap_device(*addr);
                }
                b.unmap_host(a.base, a.told);
                true
            }
            None => false,
        }
    }

    /// Makes bytes `offset..offset+len` of memory `id` visible to kernels (checked as
    /// [`Attachments::range`] checks); the device address. Undone with the attachment, or by
    /// [`Attachments::unmap_device`].
    pub fn map_device(
        &mut self,
        b: &mut dyn Backend,
        id: u64,
        offset: u64,
        len: u64,
    ) -> Result<u64, BackendError> {
        let p = self.range(b, id, offset, len)?;
        // `range` bounded offset + len by the mapping: `len` fits a usize.
        let addr = b.map_device(p, len as usize)?;
        if let Some(a) = self.map.get_mut(&id) {
            a.device_maps.push(addr);
        }
        Ok(addr)
    }

    /// Undoes the [`Attachments::map_device`] that answered `addr`.
    pub fn unmap_device(&mut self, b: &mut dyn Backend, addr: u64) -> Result<(), BackendError> {
        b.unmap_device(addr)?;
        for a in self.map.values_mut() {
            a.device_maps.retain(|&m| m != addr);
        }
        Ok(())
    }

    /// Bytes `offset..offset+len` of memory `id`, checked against the mapping and the memfd's
    /// current size; tells the backend when the memory grew. The pointer is valid for `len` bytes
    /// until the next call that detaches.
    pub fn range(
        &mut self,
        b: &mut dyn Backend,
        id: u64,
        offset: u64,
        len: u64,
    ) -> Result<*mut u8, BackendError> {
        let a = self
            .map
            .get_mut(&id)
            .ok_or_else(|| invalid(format!("guest memory {id} is not attached")))?;
        let end = offset.checked_add(len);
        let in_told = end.is_some_and(|e| e <= a.told as u64);
        if !in_told {
            // Only past what we knew: look at the file again (the memory may have grown).
            let valid = valid_size(a)?;
            if end.is_none_or(|e| e > valid as u64) {
                return Err(BackendError::new(
                    ErrorKind::OutOfBounds,
                    format!("bytes {offset}..+{len} are outside guest memory {id} ({valid} bytes)"),
                ));
            }
            b.map_host(a.base, valid)?;
            a.told = valid;
        }
        // SAFETY: offset + len <= told <= mapped, so the result stays inside the mapping.
        Ok(unsafe { a.base.add(offset as usize) })
    }
}

/// Bytes of the attachment that are backed by the file (and mapped).
fn valid_size(a: &Attachment) -> Result<usize, BackendError> {
    let size = file_size(a.fd.as_fd()).map_err(|e| invalid(format!("guest memory: fstat: {e}")))?;
    Ok(size.min(a.mapped))
}

impl Drop for Attachments {
    fn drop(&mut self) {
        // Without a backend to tell: the process is ending, and the backend's own drop
        // unregisters what it registered.
        self.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::control_socket::{send_fd, socket_pair};
    use crate::host::guest_memory::SharedMemory;
    use crate::worker::backend::NullBackend;

    const MIB: usize = 1 << 20;

    fn memfd_of(m: &SharedMemory) -> std::os::fd::BorrowedFd<'_> {
        // Through a span: the API keeps the fd crate-private.
        let s = crate::host::guest_memory::locate(m.as_ptr(), 0).unwrap();
        // SAFETY: the memory (and so its fd) outlives the borrow.
        unsafe {
            std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&s.shared.fd))
        }
    }

    #[test]
    fn ranges_are_checked_against_the_mapping_and_the_current_size() {
        let mut mem = SharedMemory::create(MIB, 8 * MIB, 0).unwrap();
        let (host, worker) = socket_pair().unwrap();
        let mut g = Attachments::new(Some(worker));
        let b = &mut NullBackend;
        // Nothing queued: refused, typed.
        assert_eq!(
            g.attach(b, mem.id(), 8 * MIB as u64).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );
        // A stale packet for another memory is skipped.
        send_fd(host.as_fd(), 12345, memfd_of(&mem)).unwrap();
        send_fd(host.as_fd(), mem.id(), memfd_of(&mem)).unwrap();
        g.attach(b, mem.id(), 8 * MIB as u64).unwrap();
        assert_eq!(g.len(), 1);
        // SAFETY: inside the host's accessible part.
        unsafe { *mem.as_ptr().add(MIB - 1) = 42 };
        let p = g.range(b, mem.id(), (MIB - 1) as u64, 1).unwrap();
        // SAFETY: `range` vouched for one byte there.
        assert_eq!(
            unsafe { *p },
            42,
            "the worker's mapping shows the host's bytes"
        );
        let oob = |g: &mut Attachments, off: u64, len: u64| {
            g.range(&mut NullBackend, mem.id(), off, len)
                .unwrap_err()
                .kind
        };
        assert_eq!(
            oob(&mut g, MIB as u64, 1),
            ErrorKind::OutOfBounds,
            "past the size"
        );
        assert_eq!(oob(&mut g, 0, MIB as u64 + 1), ErrorKind::OutOfBounds);
        assert_eq!(oob(&mut g, u64::MAX, 2), ErrorKind::OutOfBounds, "overflow");
        assert_eq!(
            oob(&mut g, 9 * MIB as u64, 0),
            ErrorKind::OutOfBounds,
            "past the mapping"
        );
        assert_eq!(
            g.range(b, 999_999, 0, 0).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );
        // Growth is seen without a new attach.
        mem.grow_to(4 * MIB).unwrap();
        assert!(g.range(b, mem.id(), MIB as u64, 3 * MIB as u64).is_ok());
        g.detach(b, mem.id()).unwrap();
        assert_eq!(
            g.detach(b, mem.id()).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );
        assert!(g.is_empty());
    }

    #[test]
    fn without_a_control_socket_nothing_attaches() {
        let mut g = Attachments::new(None);
        assert_eq!(
            g.attach(&mut NullBackend, 1, 4096).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );
    }
}
