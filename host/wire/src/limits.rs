//! Every bound the protocol puts on a length or a count.
//!
//! A decoder checks each length prefix against its limit *before* it allocates or waits for the
//! bytes, so a peer cannot make a receiver reserve memory by announcing a large length; an encoder
//! checks the same limits so that a conforming sender never writes what a receiver must reject.
//! The limit on streamed data is the receiver's to choose ([`crate::DecoderConfig`]); all others
//! are fixed by the protocol version.

/// Bytes in a frame header.
pub const FRAME_HEADER_LEN: usize = 12;

/// Most bytes in the body of a message frame (a request or a reply, not a data chunk): room for
/// the largest inline field, a [`MAX_MODULE_BYTES`] module, and the fields beside it.
pub const MAX_FRAME_BODY: u32 = 17 << 20;

/// Most bytes of streamed data in one data frame.
pub const MAX_CHUNK: u32 = 1 << 20;

/// The streamed-data total a [`crate::Decoder`] accepts unless configured otherwise.
pub const DEFAULT_MAX_STREAM_BYTES: u64 = 1 << 30;

/// Most bytes of an error reply's message. Encoding cuts a longer message at a character
/// boundary; decoding rejects one.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// Most bytes of a HELLO's agent string and of its reply's node name.
pub const MAX_PEER_NAME: usize = 256;

/// Most bytes of a PTX module (MODULE_LOAD, GPU_SUBMIT).
pub const MAX_MODULE_BYTES: usize = 16 << 20;

/// Most bytes of CUDA C source (MODULE_LOAD_SOURCE).
pub const MAX_SOURCE_BYTES: usize = 4 << 20;

/// Most compiler options in a MODULE_LOAD_SOURCE.
pub const MAX_COMPILE_OPTIONS: usize = 64;

/// Most bytes of one compiler option.
pub const MAX_COMPILE_OPTION: usize = 1024;

/// Most bytes of a name: a kernel, a kernel parameter, a device, a device UUID, a backend.
pub const MAX_NAME: usize = 4096;

/// Most bytes of a kernel parameter's PTX type string (`.u64`, `.align 8 .b8 [16]`, …).
pub const MAX_PTX_TYPE: usize = 64;

/// Most kernels listed for one module.
pub const MAX_KERNELS: usize = 4096;

/// Most parameters listed for one kernel.
pub const MAX_KERNEL_PARAMS: usize = 4096;

/// Most typed arguments of one LAUNCH.
pub const MAX_LAUNCH_ARGS: usize = 4096;

/// The most launches one LAUNCH_BURST holds (the contract's own bound on a burst).
pub const MAX_BURST_LAUNCHES: usize = 4096;

/// The most changed arguments one LAUNCH_BURST carries, over all of its launches.
pub const MAX_BURST_CHANGES: usize = 64 << 10;

/// Most bytes of a by-value (`Bytes`) launch argument, and of GPU_SUBMIT's argument block: the
/// size of a kernel's whole parameter space.
pub const MAX_ARG_BYTES: usize = 32 << 10;

/// Most bytes of GPU_SUBMIT's `input`, written to the lease's region before the launch. A
/// one-shot's input travels inline in its request frame (with the module beside it, within
/// [`MAX_FRAME_BODY`]); larger data goes through a session's streamed MEM_WRITE.
pub const MAX_SUBMIT_INPUT: usize = 1 << 20;

/// Most devices in an inventory.
pub const MAX_DEVICES: usize = 256;

/// Most leases one LEASE_ALLOC_GROUP asks for, and its reply lists: one per device, and no
/// inventory lists more devices.
pub const MAX_GROUP_LEASES: usize = MAX_DEVICES;

/// Most bytes of a deployment's manifest (TOML) in DEPLOY_PUSH.
pub const MAX_MANIFEST_BYTES: usize = 64 << 10;

/// Characters of a digest: SHA-256 in lowercase hex.
pub const DIGEST_HEX_LEN: usize = 64;

/// Most branches of one FORK: the streams one transfer may be spread over.
pub const MAX_BRANCHES: u8 = 16;
