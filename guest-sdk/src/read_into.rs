//! `mem-read-into` through a hand-written import, because the generated one is unsound to use.
//!
//! The host fills the `dst` list of `mem-read-into` in place, in this component's memory (see the
//! WIT). wit-bindgen generates `raw::sessions::Session::mem_read_into(.., dst: &[u8])`, since the
//! canonical ABI passes lists by value: memory written behind a live shared reference is undefined
//! behaviour. This file imports the same function with the destination as `*mut u8` taken from a
//! `&mut [u8]`, which is the one sound way to call it. All of the SDK's `unsafe` for it is here.
//!
//! # The ABI (canonical ABI, wasm32; as wit-bindgen 0.63 lowers this signature)
//!
//! `[method]session.mem-read-into: func(self: borrow<session>, src: borrow<buffer>, offset: u64,
//! dst: list<u8>) -> result<_, gpu-error>` is imported from `tasklet:gpu/sessions@0.2.0` as
//!
//! ```text
//! (self: i32 handle, src: i32 handle, offset: i64, dst.ptr: i32, dst.len: i32, ret: i32 pointer)
//! ```
//!
//! `ret` points at a 4-word, word-aligned area the host writes the result into:
//!
//! | byte offset (words) | field |
//! | --- | --- |
//! | 0 | result tag, u8: 0 `ok`, 1 `err` |
//! | 1 word | `gpu-error` case, u8, in WIT order (0 `unauthorized` .. 11 `unsupported`) |
//! | 2 words | the case's string: pointer |
//! | 3 words | the case's string: length in bytes |
//!
//! Every `gpu-error` case carries a string, allocated by the host with this component's
//! `cabi_realloc` (alignment 1); the caller owns it, and it is freed as a `Vec<u8>` when the
//! error's `String` drops (exactly what the generated bindings do).

use core::mem::{size_of, MaybeUninit};

use crate::raw::sessions::{Buffer, Session};
use crate::raw::types::GpuError;

const WORD: usize = size_of::<*const u8>();

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "tasklet:gpu/sessions@0.2.0")]
unsafe extern "C" {
    // The same import the generated bindings declare, with the same core signature.
    #[link_name = "[method]session.mem-read-into"]
    fn import(session: i32, src: i32, offset: i64, dst: *mut u8, len: usize, ret: *mut u8);
}

/// Off wasm (the SDK's own unit tests) there is no host to call.
#[cfg(not(target_arch = "wasm32"))]
unsafe extern "C" fn import(_: i32, _: i32, _: i64, _: *mut u8, _: usize, _: *mut u8) {
    unreachable!("tasklet:gpu imports exist only inside a wasm component")
}

#[cfg_attr(target_pointer_width = "64", repr(align(8)))]
#[cfg_attr(target_pointer_width = "32", repr(align(4)))]
struct RetArea([MaybeUninit<u8>; 4 * WORD]);

/// Reads `dst.len()` bytes at `byte_offset` of `src` into `dst`, in place: the sound form of the
/// generated `raw::sessions::Session::mem_read_into` (which takes `&[u8]` and must not be used).
/// This is the raw call, in bytes; [`DeviceBuffer::read_range_into`](crate::DeviceBuffer::read_range_into)
/// is the typed one, in elements.
///
/// The host checks the `read` right, that `src` belongs to `session`, and that the span lies
/// within `src`; a call those checks refuse leaves `dst` untouched.
pub fn mem_read_into(
    session: &Session,
    src: &Buffer,
    byte_offset: u64,
    dst: &mut [u8],
) -> Result<(), GpuError> {
    let mut ret = RetArea([MaybeUninit::uninit(); 4 * WORD]);
    let ret = ret.0.as_mut_ptr().cast::<u8>();
    // SAFETY: the handles are live resources owned by this component (borrowed for the call);
    // `dst` is memory we hold exclusively (`&mut`) for the whole call, so the host writing it is
    // no different from our own code writing it; `ret` is a writable, word-aligned area of the
    // size the ABI above needs, which the host fills before returning.
    unsafe {
        import(
            session.handle() as i32,
            src.handle() as i32,
            byte_offset as i64,
            dst.as_mut_ptr(),
            dst.len(),
            ret,
        )
    };
    // SAFETY: the host wrote the tag; on `err`, the case and a string it allocated with our
    // `cabi_realloc`, which we now own (see the module docs for the layout).
    unsafe {
        if *ret == 0 {
            return Ok(());
        }
        let case = *ret.add(WORD);
        let ptr = *ret.add(2 * WORD).cast::<*mut u8>();
        let len = *ret.add(3 * WORD).cast::<usize>();
        let bytes = Vec::from_raw_parts(ptr, len, len);
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Err(error_case(case, text))
    }
}

/// The `gpu-error` of case index `case` (WIT order) with its text.
fn error_case(case: u8, text: String) -> GpuError {
    match case {
        0 => GpuError::Unauthorized(text),
        1 => GpuError::LeaseExpired(text),
        2 => GpuError::CapacityExceeded(text),
        3 => GpuError::QuotaExceeded(text),
        4 => GpuError::OutOfBounds(text),
        5 => GpuError::InvalidArgument(text),
        6 => GpuError::LoadFailed(text),
        7 => GpuError::LaunchFailed(text),
        8 => GpuError::KernelFault(text),
        9 => GpuError::DeadlineExceeded(text),
        10 => GpuError::DeviceLost(text),
        11 => GpuError::Unsupported(text),
        // The component model validates variant tags when lowering, so the host cannot send this;
        // say so rather than invent a case.
        other => GpuError::Unsupported(format!(
            "the host sent gpu-error case {other}, unknown to this SDK: {text}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn cases_are_in_wit_order() {
        // ErrorKind lists the cases in WIT order too (its own test checks the names).
        let kinds: Vec<ErrorKind> = (0..12)
            .map(|i| crate::Error::from(error_case(i, String::new())).kind())
            .collect();
        // The first 12 are the WIT cases; the 13th (`invalid-input`) is the SDK's own.
        assert_eq!(kinds, ErrorKind::ALL[..12]);
        assert!(
            matches!(error_case(12, "x".into()), GpuError::Unsupported(t) if t.contains("case 12"))
        );
    }
}
