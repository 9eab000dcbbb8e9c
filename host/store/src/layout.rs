//! Where things live under a store's root, and how names inside each folder are spelled.
//!
//! Every name built here comes from a validated [`Digest`] or from the store's own counters,
//! never from a client's text, so no name holds a `/` or a `..`.

use crate::digest::Digest;

/// Content: components and manifests, each named by the SHA-256 of its bytes.
pub(crate) const BLOBS: &str = "blobs/sha256";
/// Deployment records, each named by the SHA-256 of the record's bytes.
pub(crate) const DEPLOYMENTS: &str = "deployments/sha256";
/// Compiled components: one file per (component, engine fingerprint).
pub(crate) const COMPILED: &str = "compiled";
/// Files being written; each is renamed into one of the folders above once complete.
pub(crate) const TMP: &str = "tmp";

/// The folders the store makes at its root, each its own (never a link to elsewhere).
pub const TOP_FOLDERS: [&str; 4] = ["blobs", "deployments", COMPILED, TMP];

/// The name of a blob or a deployment record in its folder.
pub(crate) fn digest_name(digest: &Digest) -> String {
    digest.to_hex()
}

/// The name of a compiled-cache entry: the component's digest, so that deleting a component
/// finds its entries by prefix, then the digest of the engine fingerprint, which may be any
/// text and so never becomes a name itself.
pub(crate) fn compiled_name(component: &Digest, engine: &str) -> String {
    format!("{component}-{}", Digest::of(engine.as_bytes()))
}

/// The prefix every compiled-cache entry of `component` has.
pub(crate) fn compiled_prefix(component: &Digest) -> String {
    format!("{component}-")
}

/// Whether `name` is spelled like a compiled-cache entry (other files there are left alone).
pub(crate) fn is_compiled_name(name: &str) -> bool {
    match name.split_once('-') {
        Some((component, engine)) => {
            Digest::parse(component).is_ok() && Digest::parse(engine).is_ok()
        }
        None => false,
    }
}
