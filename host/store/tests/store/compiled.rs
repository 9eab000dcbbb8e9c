//! The compiled-component cache: hits, misses, stale engines, damage, eviction.

use std::time::Duration;

use crate::support::{content, flip_byte, open, open_default};
use tasklet_store::{CachePut, Digest, Error, Lookup, StoreConfig};

const ENGINE: &str = "wasmtime-48.0.8-x86_64-1a2b3c";

/// The path of the single entry the cache holds.
fn only_entry(t: &crate::support::TestStore) -> std::path::PathBuf {
    let names = t.names_in("compiled");
    assert_eq!(names.len(), 1, "{names:?}");
    t.dir.path().join("compiled").join(&names[0])
}

#[test]
fn miss_then_put_then_hit() {
    let t = open_default();
    let component = Digest::of(b"component");
    assert_eq!(
        t.store.compiled().get(&component, ENGINE).unwrap(),
        Lookup::Miss
    );
    let compiled = content(1, 50_000);
    let put = t
        .store
        .compiled()
        .put(&component, ENGINE, &compiled)
        .unwrap();
    assert_eq!(
        put,
        CachePut {
            stored: true,
            evicted: 0
        }
    );
    assert_eq!(
        t.store.compiled().get(&component, ENGINE).unwrap(),
        Lookup::Hit(compiled.clone())
    );
    assert!(t.names_in("tmp").is_empty());

    // Putting again replaces the entry.
    let newer = content(2, 40_000);
    t.store.compiled().put(&component, ENGINE, &newer).unwrap();
    assert_eq!(
        t.store
            .compiled()
            .get(&component, ENGINE)
            .unwrap()
            .into_hit(),
        Some(newer)
    );
    assert_eq!(t.names_in("compiled").len(), 1);
}

#[test]
fn another_engine_or_component_misses() {
    let t = open_default();
    let component = Digest::of(b"component");
    t.store
        .compiled()
        .put(&component, ENGINE, b"compiled")
        .unwrap();
    // An upgraded engine has another fingerprint: the old entry is stale and never found.
    assert_eq!(
        t.store
            .compiled()
            .get(&component, "wasmtime-49.0.0-x86_64-ffff")
            .unwrap(),
        Lookup::Miss
    );
    assert_eq!(
        t.store
            .compiled()
            .get(&Digest::of(b"other"), ENGINE)
            .unwrap(),
        Lookup::Miss
    );
    assert!(t
        .store
        .compiled()
        .get(&component, ENGINE)
        .unwrap()
        .into_hit()
        .is_some());
}

#[test]
fn a_damaged_entry_is_discarded_as_a_miss() {
    let t = open_default();
    let component = Digest::of(b"component");
    let compiled = content(3, 10_000);
    // Damage in the payload, in the header, and a cut.
    for damage in 0..3 {
        t.store
            .compiled()
            .put(&component, ENGINE, &compiled)
            .unwrap();
        let path = only_entry(&t);
        match damage {
            0 => flip_byte(&path, 5_000 + 200),
            1 => flip_byte(&path, 10),
            _ => {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
            }
        }
        match t.store.compiled().get(&component, ENGINE).unwrap() {
            Lookup::Discarded { reason } => assert!(!reason.is_empty()),
            other => panic!("damage {damage}: {other:?}"),
        }
        assert!(
            t.names_in("compiled").is_empty(),
            "damage {damage}: the entry is removed"
        );
        assert_eq!(
            t.store.compiled().get(&component, ENGINE).unwrap(),
            Lookup::Miss
        );
    }
}

#[test]
fn an_entry_renamed_to_another_key_is_discarded() {
    let t = open_default();
    let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
    t.store.compiled().put(&a, ENGINE, b"compiled a").unwrap();
    let from = only_entry(&t);
    let to = from.with_file_name(
        from.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .replace(&a.to_hex(), &b.to_hex()),
    );
    std::fs::rename(&from, &to).unwrap();
    assert!(matches!(
        t.store.compiled().get(&b, ENGINE).unwrap(),
        Lookup::Discarded { .. }
    ));
}

#[test]
fn a_folder_where_an_entry_should_be_is_an_error() {
    let t = open_default();
    let component = Digest::of(b"component");
    t.store
        .compiled()
        .put(&component, ENGINE, b"compiled")
        .unwrap();
    let path = only_entry(&t);
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    assert!(matches!(
        t.store.compiled().get(&component, ENGINE),
        Err(Error::NotAFile { .. })
    ));
}

#[test]
fn eviction_keeps_the_cache_within_its_bound_least_recently_used_first() {
    let payload = 10_000;
    // Room for three entries, not four.
    let entry_len = {
        let t = open_default();
        t.store
            .compiled()
            .put(&Digest::of(b"probe"), ENGINE, &content(0, payload))
            .unwrap();
        t.store.compiled().len_bytes().unwrap()
    };
    let bound = entry_len * 3 + entry_len / 2;
    let t = open(StoreConfig {
        compiled_cache_bytes: bound,
        ..StoreConfig::default()
    });
    let cache = t.store.compiled();
    let [a, b, c, d] = [b"a", b"b", b"c", b"d"].map(|name| Digest::of(name));
    let pause = || std::thread::sleep(Duration::from_millis(20));

    for (i, component) in [a, b, c].iter().enumerate() {
        assert_eq!(
            cache
                .put(component, ENGINE, &content(i as u8, payload))
                .unwrap()
                .evicted,
            0
        );
        pause();
    }
    // A hit makes `a` the most recently used, so `b` is now the oldest.
    assert!(cache.get(&a, ENGINE).unwrap().into_hit().is_some());
    pause();
    let put = cache.put(&d, ENGINE, &content(3, payload)).unwrap();
    assert_eq!(
        put,
        CachePut {
            stored: true,
            evicted: 1
        }
    );
    assert_eq!(cache.get(&b, ENGINE).unwrap(), Lookup::Miss);
    for kept in [a, c, d] {
        assert!(cache.get(&kept, ENGINE).unwrap().into_hit().is_some());
    }
    assert!(cache.len_bytes().unwrap() <= bound);

    // An entry larger than the whole cache is not stored, and evicts nothing.
    let huge = cache
        .put(&Digest::of(b"huge"), ENGINE, &content(9, bound as usize))
        .unwrap();
    assert_eq!(
        huge,
        CachePut {
            stored: false,
            evicted: 0
        }
    );
    assert_eq!(t.names_in("compiled").len(), 3);
    assert!(t.names_in("tmp").is_empty());
}

#[test]
fn one_large_entry_evicts_several_small_ones() {
    let t = open(StoreConfig {
        compiled_cache_bytes: 40_000,
        ..StoreConfig::default()
    });
    let cache = t.store.compiled();
    for i in 0..6u8 {
        cache
            .put(&Digest::of(&[i]), ENGINE, &content(i, 5_000))
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(t.names_in("compiled").len(), 6);
    let put = cache
        .put(&Digest::of(b"large"), ENGINE, &content(7, 30_000))
        .unwrap();
    assert_eq!(put.evicted, 5);
    assert!(cache
        .get(&Digest::of(b"large"), ENGINE)
        .unwrap()
        .into_hit()
        .is_some());
    assert!(
        cache
            .get(&Digest::of(&[5]), ENGINE)
            .unwrap()
            .into_hit()
            .is_some(),
        "the newest small one stays"
    );
    assert!(cache.len_bytes().unwrap() <= 40_000);
}

#[test]
fn an_overlong_engine_fingerprint_is_refused() {
    let t = open_default();
    let engine = "x".repeat(5_000);
    let component = Digest::of(b"component");
    assert!(matches!(
        t.store.compiled().put(&component, &engine, b"compiled"),
        Err(Error::FingerprintTooLong { len: 5_000, .. })
    ));
    assert!(matches!(
        t.store.compiled().get(&component, &engine),
        Err(Error::FingerprintTooLong { .. })
    ));
    assert!(t.names_in("tmp").is_empty());
}

#[test]
fn open_serves_the_verified_entry_whose_first_bytes_are_the_compiled_ones() {
    use std::io::{Read, Seek, SeekFrom};
    let t = open_default();
    let component = Digest::of(b"component");
    let cache = t.store.compiled();
    assert!(matches!(
        cache.open(&component, ENGINE).unwrap(),
        Lookup::Miss
    ));
    let compiled = content(4, 300_000);
    cache.put(&component, ENGINE, &compiled).unwrap();
    let Lookup::Hit(entry) = cache.open(&component, ENGINE).unwrap() else {
        panic!("a hit expected");
    };
    assert_eq!(entry.compiled_len(), compiled.len() as u64);
    assert_eq!(entry.read_compiled().unwrap(), compiled);
    // The file itself starts with them: an engine may map it as it is.
    let mut file = entry.file();
    file.seek(SeekFrom::Start(0)).unwrap();
    let mut start = vec![0; compiled.len()];
    file.read_exact(&mut start).unwrap();
    assert_eq!(start, compiled);
    assert_eq!(
        cache.get(&component, ENGINE).unwrap().into_hit(),
        Some(compiled.clone())
    );
}

#[test]
fn open_discards_a_damaged_entry_as_get_does() {
    let t = open_default();
    let component = Digest::of(b"component");
    let cache = t.store.compiled();
    let compiled = content(5, 600_000);
    // Damage early and late in the payload (across the check's read chunks), in the trailer,
    // and a cut.
    for damage in 0..5 {
        cache.put(&component, ENGINE, &compiled).unwrap();
        let path = only_entry(&t);
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        match damage {
            0 => flip_byte(&path, 3),
            1 => flip_byte(&path, 500_000),
            2 => flip_byte(&path, len - 20),
            3 => flip_byte(&path, len - 60),
            _ => {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
            }
        }
        match cache.open(&component, ENGINE).unwrap() {
            Lookup::Discarded { reason } => assert!(!reason.is_empty()),
            other => panic!("damage {damage}: {other:?}"),
        }
        assert!(t.names_in("compiled").is_empty(), "damage {damage}");
    }
}

#[test]
fn an_entry_of_the_first_format_is_discarded() {
    // The first format put a header ("TSKLCMP1" ...) before the payload and checked it with a
    // SHA-256: read as this format, it is no entry, and is replaced on the next put.
    let t = open_default();
    let component = Digest::of(b"component");
    let cache = t.store.compiled();
    cache.put(&component, ENGINE, b"compiled").unwrap();
    let path = only_entry(&t);
    let mut old = b"TSKLCMP1".to_vec();
    old.extend_from_slice(component.as_bytes());
    old.extend_from_slice(&content(6, 1_000));
    std::fs::write(&path, &old).unwrap();
    assert!(matches!(
        cache.open(&component, ENGINE).unwrap(),
        Lookup::Discarded { .. }
    ));
    assert_eq!(cache.get(&component, ENGINE).unwrap(), Lookup::Miss);
}
