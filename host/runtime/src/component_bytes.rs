//! What a file's first bytes say about whether it is a component this host runs: checked before
//! compiling, so that a wrong file (a text file, a core module built for another target) is one
//! line naming the fix, not the wasm parser's account of the bytes it expected.

// The preamble of a WebAssembly binary: the magic `\0asm`, then a version and a layer; a core
// module is version 1 of layer 0, a component version 0xd of layer 1.
const WASM_MAGIC: [u8; 4] = *b"\0asm";
const COMPONENT_VERSION_AND_LAYER: [u8; 4] = [0x0d, 0x00, 0x01, 0x00];
const CORE_MODULE_VERSION_AND_LAYER: [u8; 4] = [0x01, 0x00, 0x00, 0x00];

/// Bytes a preamble takes: the magic, then the version and layer.
pub const PREAMBLE_BYTES: usize = 8;

/// Why bytes starting with `preamble` (the first [`PREAMBLE_BYTES`] or fewer) are not a
/// WebAssembly component; `None` where they may be one.
pub fn not_a_component(preamble: &[u8]) -> Option<&'static str> {
    if preamble.len() < PREAMBLE_BYTES {
        return Some("it is shorter than a WebAssembly preamble");
    }
    let (magic, version) = preamble[..PREAMBLE_BYTES].split_at(4);
    if magic != WASM_MAGIC {
        Some("it is not WebAssembly (no `\\0asm` at its start)")
    } else if version == CORE_MODULE_VERSION_AND_LAYER {
        Some(
            "it is a core WebAssembly module, not a component: build the tasklet for wasm32-wasip2",
        )
    } else if version != COMPONENT_VERSION_AND_LAYER {
        Some("it is WebAssembly of a version or layer this host does not run")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wrong_preamble_says_why() {
        assert_eq!(not_a_component(b"\0asm\x0d\x00\x01\x00rest"), None);
        let why = |b: &[u8]| not_a_component(b).unwrap();
        assert!(why(b"root:x:0:0").contains("not WebAssembly"));
        assert!(why(b"\0asm\x01\x00\x00\x00").contains("wasm32-wasip2"));
        assert!(why(b"\0asm\x0e\x00\x01\x00").contains("version or layer"));
        assert!(why(b"\0as").contains("shorter"));
    }
}
