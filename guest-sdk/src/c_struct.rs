//! By-value struct parameters laid out as C lays them out, padding included.
//!
//! A kernel parameter of struct type is passed as the struct's bytes ([`Arg::bytes_of`] for a
//! `#[repr(C)]` [`Pod`] struct). `Pod` forbids padding, and most C structs have some (`{ int a;
//! double b; }` has 4 bytes after `a`), so such a struct would need hand-written padding fields in
//! Rust. [`CStruct`] builds the bytes field by field instead, with C's rules: each field at the
//! next offset that is a multiple of its alignment, the struct's size a multiple of its largest
//! alignment, and every padding byte zero. A field may be a device pointer into a buffer: the
//! host writes the buffer's address there at launch (a `relocated` argument).

use core::mem::align_of;

use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::launch::{Arg, KernelArg};
use crate::raw::sessions as raw;
use crate::session::Session;

/// The bytes of a by-value struct parameter, built field by field in C layout.
///
/// Each field is a [`Pod`] value whose Rust alignment is its C alignment on the device: the
/// fixed-size integers and floats, arrays of them, and `#[repr(C)]` structs of them. `usize` and
/// `isize` are 4 bytes in a tasklet and 8 on the device: use `u64` and `i64` for `size_t` and
/// `ptrdiff_t`.
///
/// A device pointer field (`float* data;`) is a buffer: [`CStruct::buffer`] (element 0),
/// [`CStruct::buffer_at_elem`] or [`CStruct::buffer_at_byte`]. Its 8 bytes are zero here; the
/// host writes the buffer's device address over them when the kernel is launched, after
/// checking that the buffer is the launching session's and the offset within it. A struct with
/// such fields lives no longer than its buffers.
///
/// ```
/// use tasklet_gpu::CStruct;
///
/// // struct Params { float scale; int offset; unsigned long long bias; short tag; };
/// let p = CStruct::new().field(2.5f32).field(7i32).field(100u64).field(3i16);
/// assert_eq!(p.size(), 24); // tag at 16, then 6 bytes of padding to the alignment of 8
/// assert_eq!(p.offsets(), [0, 4, 8, 16]);
/// # fn launch(session: &tasklet_gpu::Session<'_>, module: &tasklet_gpu::Module<'_>,
/// #     out: &tasklet_gpu::DeviceBuffer<'_, u32>, p: CStruct) -> tasklet_gpu::Result<()> {
/// // digits_kernel(unsigned* out, Params p, unsigned n)
/// session
///     .launch(module, "digits_kernel")
///     .config(tasklet_gpu::LaunchConfig::for_num_elems(64))
///     .arg(out)
///     .arg(p)
///     .arg(64u32)
///     .run()
/// # }
/// ```
///
/// With pointers:
///
/// ```no_run
/// # fn f(session: &tasklet_gpu::Session<'_>, module: &tasklet_gpu::Module<'_>)
/// #     -> tasklet_gpu::Result<()> {
/// use tasklet_gpu::{CStruct, LaunchConfig};
///
/// let (a, b) = (session.alloc::<i32>(256)?, session.alloc::<i32>(256)?);
/// let out = session.alloc::<i32>(256)?;
/// // struct Operands { const int* a; const int* b; int scale; };
/// let ops = CStruct::new().buffer(&a).buffer_at_elem(&b, 0).field(7i32);
/// assert_eq!((ops.size(), ops.offsets()), (24, &[0, 8, 16][..]));
/// // scaled_sum(int* out, Operands ops, unsigned n)
/// session
///     .launch(module, "scaled_sum")
///     .config(LaunchConfig::for_num_elems(256))
///     .arg(&out)
///     .arg(&ops)
///     .arg(256u32)
///     .run()
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a CStruct is passed to a kernel with .arg(..)"]
pub struct CStruct<'a> {
    /// The fields, each at its offset, with zeroed padding between them (no tail padding).
    bytes: Vec<u8>,
    /// Each field's offset.
    offsets: Vec<usize>,
    /// The struct's alignment: the largest of its fields' (and of [`CStruct::align_to`]'s).
    align: usize,
    /// The pointer fields: each one's offset, its buffer and the byte offset into it.
    pointers: Vec<Pointer<'a>>,
}

/// A pointer field of a [`CStruct`].
#[derive(Debug, Clone, Copy)]
struct Pointer<'a> {
    at: usize,
    buffer: &'a raw::Buffer,
    byte_offset: u64,
    session: &'a Session<'a>,
}

/// Two pointer fields are equal when they sit at the same place and point at the same byte of
/// the same buffer.
impl PartialEq for Pointer<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
            && core::ptr::eq(self.buffer, other.buffer)
            && self.byte_offset == other.byte_offset
    }
}

impl Eq for Pointer<'_> {}

impl Default for CStruct<'_> {
    fn default() -> Self {
        CStruct::new()
    }
}

impl<'a> CStruct<'a> {
    /// A struct with no fields yet.
    pub const fn new() -> CStruct<'a> {
        CStruct {
            bytes: Vec::new(),
            offsets: Vec::new(),
            align: 1,
            pointers: Vec::new(),
        }
    }

    /// Appends `value` as the next field, aligned as its type is.
    pub fn field<T: Pod>(self, value: T) -> CStruct<'a> {
        self.field_aligned(value, align_of::<T>())
    }

    /// Appends a device pointer to element 0 of `buf` as the next field (8 bytes, aligned to 8):
    /// a `T*` member.
    pub fn buffer<T: Pod>(self, buf: &'a DeviceBuffer<'_, T>) -> CStruct<'a> {
        self.buffer_at_byte(buf, 0)
    }

    /// Appends a device pointer to element `index` of `buf` (at most `buf.len()`, one past the
    /// end, as in C; the host refuses an offset past the buffer) as the next field.
    pub fn buffer_at_elem<T: Pod>(self, buf: &'a DeviceBuffer<'_, T>, index: usize) -> CStruct<'a> {
        // An index whose byte offset overflows is past any buffer: the host refuses it as such.
        let byte_offset = (index as u64).saturating_mul(core::mem::size_of::<T>() as u64);
        self.buffer_at_byte(buf, byte_offset)
    }

    /// Appends a device pointer `byte_offset` bytes into `buf` as the next field, for a pointer
    /// that does not fall on an element.
    pub fn buffer_at_byte<T: Pod>(
        mut self,
        buf: &'a DeviceBuffer<'_, T>,
        byte_offset: u64,
    ) -> CStruct<'a> {
        self = self.field(0u64);
        let at = self.bytes.len() - 8;
        self.pointers.push(Pointer {
            at,
            buffer: buf.raw(),
            byte_offset,
            session: buf.session(),
        });
        self
    }

    /// Appends `value` as the next field at an offset that is a multiple of `align` (and of its
    /// type's alignment): for members declared `__align__(n)` or `alignas(n)`, and for CUDA's
    /// vector types, which are more aligned than their elements (`float4` and `double2` 16,
    /// `float2` 8). `align` is rounded up to a power of two.
    pub fn field_aligned<T: Pod>(mut self, value: T, align: usize) -> CStruct<'a> {
        let align = power_of_two(align).max(align_of::<T>());
        let at = self.bytes.len().next_multiple_of(align);
        self.bytes.resize(at, 0);
        self.bytes.extend_from_slice(bytemuck::bytes_of(&value));
        self.offsets.push(at);
        self.align = self.align.max(align);
        self
    }

    /// Raises the struct's own alignment to at least `align` (rounded up to a power of two), as
    /// `__align__(n)` on the struct does: its size becomes a multiple of it.
    pub fn align_to(mut self, align: usize) -> CStruct<'a> {
        self.align = self.align.max(power_of_two(align));
        self
    }

    /// The struct's size in bytes, tail padding included: what C's `sizeof` says, and what the
    /// kernel's parameter declares.
    pub fn size(&self) -> usize {
        self.bytes.len().next_multiple_of(self.align)
    }

    /// The struct's alignment in bytes.
    pub fn align(&self) -> usize {
        self.align
    }

    /// Each field's byte offset, in the order they were added.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// The struct's bytes: every field at its offset, padding zeroed, [`CStruct::size`] long
    /// (pointer fields zero: the host fills them in at launch).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        bytes.resize(self.size(), 0);
        bytes
    }

    /// The offsets of the pointer fields, in the order they were added.
    pub fn pointer_offsets(&self) -> impl Iterator<Item = usize> + '_ {
        self.pointers.iter().map(|p| p.at)
    }

    /// The struct as a kernel argument (what [`Launch::arg`](crate::Launch::arg) does with it):
    /// its bytes, with a relocation per pointer field when it has any.
    pub fn to_arg(&self) -> Arg<'a> {
        let Some(first) = self.pointers.first() else {
            return Arg::from_raw(raw::KernelArg::Bytes(self.to_bytes()));
        };
        let relocations = self
            .pointers
            .iter()
            .map(|p| raw::BufferRelocation {
                // At most the struct's size, which a kernel parameter keeps far below 4 GiB;
                // a larger one saturates, and the host refuses it as outside the bytes.
                at: u32::try_from(p.at).unwrap_or(u32::MAX),
                buffer: p.buffer,
                offset: p.byte_offset,
            })
            .collect();
        let mut arg = Arg::from_raw(raw::KernelArg::Relocated(raw::RelocatedBytes {
            bytes: self.to_bytes(),
            relocations,
        }));
        // The launch checks the first pointer's session against its own; the host checks
        // every pointer's buffer.
        arg.owner = Some(first.session);
        arg
    }
}

impl<'a> KernelArg<'a> for CStruct<'a> {
    fn into_arg(self) -> Arg<'a> {
        self.to_arg()
    }
}

impl<'a> KernelArg<'a> for &CStruct<'a> {
    fn into_arg(self) -> Arg<'a> {
        self.to_arg()
    }
}

/// `n` rounded up to a power of two (1 for 0; the largest power of two for what has none above
/// it in `usize`).
fn power_of_two(n: usize) -> usize {
    n.checked_next_power_of_two()
        .unwrap_or(1 << (usize::BITS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_at_c_offsets_with_zeroed_padding() {
        // struct { char c; double d; short s; }: 1 + 7 pad + 8 + 2 + 6 tail pad = 24.
        let s = CStruct::new().field(0x11u8).field(1.0f64).field(-2i16);
        assert_eq!((s.offsets(), s.size(), s.align()), (&[0, 8, 16][..], 24, 8));
        let b = s.to_bytes();
        assert_eq!(b.len(), 24);
        assert_eq!(b[0], 0x11);
        assert!(b[1..8].iter().all(|&x| x == 0));
        assert_eq!(&b[8..16], &1.0f64.to_le_bytes());
        assert_eq!(&b[16..18], &(-2i16).to_le_bytes());
        assert!(b[18..].iter().all(|&x| x == 0));
    }

    #[test]
    fn layouts_match_repr_c() {
        // A padding-free #[repr(C)] struct: CStruct agrees with Rust's (and C's) layout.
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(C)]
        struct Vec3 {
            x: f32,
            y: f32,
            z: f32,
        }
        let v = Vec3 {
            x: 1.0,
            y: 2.0,
            z: 3.0,
        };
        let s = CStruct::new().field(v.x).field(v.y).field(v.z);
        assert_eq!(s.to_bytes(), bytemuck::bytes_of(&v));
        assert_eq!(s.size(), core::mem::size_of::<Vec3>());
        // Nested: struct { Vec3 v; unsigned n; }.
        let nested = CStruct::new().field(v).field(7u32);
        assert_eq!((nested.offsets(), nested.size()), (&[0, 12][..], 16));
        // Arrays align as their elements: struct { char c; int a[2]; }.
        let arr = CStruct::new().field(1u8).field([2i32, 3]);
        assert_eq!((arr.offsets(), arr.size()), (&[0, 4][..], 12));
    }

    #[test]
    fn explicit_alignment() {
        // struct { float a; float4 v; }: float4 is aligned to 16.
        let s = CStruct::new()
            .field(1.0f32)
            .field_aligned([1.0f32, 2.0, 3.0, 4.0], 16);
        assert_eq!((s.offsets(), s.size(), s.align()), (&[0, 16][..], 32, 16));
        // An alignment below the type's own is the type's; a non-power of two is rounded up.
        let s = CStruct::new().field(1u8).field_aligned(1u64, 2);
        assert_eq!(s.offsets(), [0, 8]);
        let s = CStruct::new().field(1u8).field_aligned(1u8, 3);
        assert_eq!(s.offsets(), [0, 4]);
        // __align__(32) on the struct.
        let s = CStruct::new().field(1u32).align_to(32);
        assert_eq!((s.size(), s.to_bytes().len()), (32, 32));
        assert_eq!(
            CStruct::new().align_to(usize::MAX).align(),
            1 << (usize::BITS - 1)
        );
        assert_eq!(power_of_two(0), 1);
    }

    #[test]
    fn an_empty_struct_is_empty_and_the_arg_is_its_bytes() {
        assert_eq!(CStruct::default().size(), 0);
        let s = CStruct::new().field(1u32).field(2u8);
        match s.into_arg().into_raw() {
            crate::raw::sessions::KernelArg::Bytes(b) => assert_eq!(b, [1, 0, 0, 0, 2, 0, 0, 0]),
            other => panic!("{other:?}"),
        }
    }
}
