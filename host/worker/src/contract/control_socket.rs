//! The control socket between a host and one worker: a `SOCK_SEQPACKET` Unix socket pair that
//! carries file descriptors (`SCM_RIGHTS`), which the shared-memory channel cannot.
//!
//! Use: the host sends a guest memory's memfd tagged with the memory id, *then* posts the request
//! that names it; the worker, serving that request, finds the fd already queued and takes it
//! without blocking. Each message is one packet: an 8-byte tag and exactly one fd.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A connected `SOCK_SEQPACKET` pair, both ends close-on-exec and above fd 2 (a host with closed
/// stdio would otherwise get an fd that a child's stdio setup overwrites).
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: valid out-array of two fds.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just made and are ours.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(a)?, above_stdio(b)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: duplicating an fd we own; the copy is owned right after.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if high < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(high) })
}

/// Room for one `cmsghdr` carrying one fd, aligned for it.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Sends `fd` tagged `tag` on `sock`. Never raises SIGPIPE: a dead peer is an `EPIPE` error.
pub fn send_fd(sock: BorrowedFd<'_>, tag: u64, fd: BorrowedFd<'_>) -> io::Result<()> {
    let payload = tag.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut buf = CmsgBuf([0; 64]);
    // SAFETY: CMSG_SPACE is pure arithmetic.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    debug_assert!(space <= buf.0.len());
    // SAFETY: zeroed msghdr is a valid "no name, no control" header; filled in below.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = buf.0.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer is `space` bytes, aligned, and holds one header: CMSG_FIRSTHDR is
    // non-null and its data has room for one fd.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd.as_raw_fd());
    }
    loop {
        // SAFETY: `msg` and everything it points to live across the call.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return if r as usize == payload.len() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "control message cut short",
                ))
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What [`recv_fd`] found queued.
#[derive(Debug)]
pub enum Received {
    /// A packet with its tag and fd.
    Fd { tag: u64, fd: OwnedFd },
    /// A packet that was not one tag + one fd (any fds it carried are closed).
    Malformed,
    /// Nothing queued.
    Empty,
}

/// Takes the next queued packet from `sock` without blocking. The fd comes close-on-exec.
pub fn recv_fd(sock: BorrowedFd<'_>) -> io::Result<Received> {
    let mut payload = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    let mut buf = CmsgBuf([0; 64]);
    // SAFETY: as in `send_fd`.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = buf.0.as_mut_ptr().cast();
    msg.msg_controllen = buf.0.len() as _;
    let n = loop {
        // SAFETY: `msg` and its buffers live across the call.
        let r = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Received::Empty),
            _ => return Err(e),
        }
    };
    // Own every fd that arrived before judging the packet, so none leaks.
    let mut fds = Vec::new();
    // SAFETY: walking the control buffer the kernel filled, with the CMSG_* accessors, which stay
    // within `msg_controllen`; each SCM_RIGHTS payload is an array of fds now installed in us.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..bytes / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let truncated = msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0;
    if n == payload.len() && fds.len() == 1 && !truncated {
        let fd = fds.pop().expect("one fd");
        return Ok(Received::Fd {
            tag: u64::from_le_bytes(payload),
            fd,
        });
    }
    Ok(Received::Malformed)
}

/// The current size of the file behind `fd`: the bytes of a mapping of it that may be touched
/// (pages past a file's end are mapped but fault). Both ends ask it of the memfds that cross the
/// socket: the host as a memory grows, the worker before it copies from a mapping.
pub fn file_size(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // SAFETY: fstat into a zeroed struct on a valid fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    usize::try_from(st.st_size).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file size {}", st.st_size),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_fd_crosses_with_its_tag_and_an_empty_queue_does_not_block() {
        let (a, b) = socket_pair().unwrap();
        assert!(matches!(recv_fd(b.as_fd()).unwrap(), Received::Empty));
        let (x, _y) = socket_pair().unwrap();
        send_fd(a.as_fd(), 77, x.as_fd()).unwrap();
        send_fd(a.as_fd(), 78, x.as_fd()).unwrap();
        for want in [77, 78] {
            match recv_fd(b.as_fd()).unwrap() {
                Received::Fd { tag, fd } => {
                    assert_eq!(tag, want);
                    assert_ne!(
                        fd.as_raw_fd(),
                        x.as_raw_fd(),
                        "a new descriptor, not the number"
                    );
                    // SAFETY: fcntl query on our fd.
                    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
                    assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(recv_fd(b.as_fd()).unwrap(), Received::Empty));
    }

    #[test]
    fn a_packet_without_an_fd_is_malformed() {
        let (a, b) = socket_pair().unwrap();
        // SAFETY: plain send of a local buffer.
        let r = unsafe { libc::send(a.as_raw_fd(), [1u8; 8].as_ptr().cast(), 8, 0) };
        assert_eq!(r, 8);
        assert!(matches!(recv_fd(b.as_fd()).unwrap(), Received::Malformed));
    }

    #[test]
    fn sending_to_a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = socket_pair().unwrap();
        drop(b);
        let (x, _y) = socket_pair().unwrap();
        assert!(send_fd(a.as_fd(), 1, x.as_fd()).is_err());
    }
}
