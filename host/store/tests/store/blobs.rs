//! Blobs: streamed writes, limits, idempotence, concurrency, verification on read.

use std::io::{Read, Write};
use std::sync::{Arc, Barrier};

use crate::support::{content, flip_byte, open, open_default};
use tasklet_store::{Digest, Error, StoreConfig, MAX_BLOB_SETTING};

#[test]
fn streamed_put_then_get_round_trips() {
    let t = open_default();
    let bytes = content(1, 300_000);
    let mut writer = t.store.blob_writer(None).unwrap();
    for chunk in bytes.chunks(7_919) {
        writer.write_chunk(chunk).unwrap();
    }
    assert_eq!(writer.len(), bytes.len() as u64);
    let put = writer.finish().unwrap();
    assert_eq!(put.digest, Digest::of(&bytes));
    assert_eq!(put.len, bytes.len() as u64);
    assert!(!put.already_present);
    assert!(t.store.contains_blob(&put.digest).unwrap());
    assert_eq!(t.store.read_blob(&put.digest).unwrap(), bytes);
    assert_eq!(t.names_in("blobs/sha256"), [put.digest.to_hex()]);
    assert!(t.names_in("tmp").is_empty());
}

#[test]
fn std_io_copy_in_and_out() {
    let t = open_default();
    let bytes = content(2, 100_000);
    let mut writer = t.store.blob_writer(Some(Digest::of(&bytes))).unwrap();
    std::io::copy(&mut &bytes[..], &mut writer).unwrap();
    writer.flush().unwrap();
    let put = writer.finish().unwrap();

    let mut reader = t.store.open_blob(&put.digest).unwrap();
    assert_eq!(reader.len(), bytes.len() as u64);
    let mut read = Vec::new();
    reader.read_to_end(&mut read).unwrap();
    assert_eq!(read, bytes);
    // After the verified end, the end again.
    assert_eq!(reader.read(&mut [0; 8]).unwrap(), 0);
}

#[test]
fn empty_blob_round_trips() {
    let t = open_default();
    let put = t.store.put_blob(b"", None).unwrap();
    assert_eq!(put.digest, Digest::of(b""));
    assert_eq!(t.store.read_blob(&put.digest).unwrap(), b"");
}

#[test]
fn putting_present_content_is_a_no_op() {
    let t = open_default();
    let bytes = content(3, 5_000);
    let first = t.store.put_blob(&bytes, None).unwrap();
    let before = std::fs::metadata(t.blob_path(&first.digest)).unwrap();
    let second = t.store.put_blob(&bytes, Some(first.digest)).unwrap();
    assert!(!first.already_present);
    assert!(second.already_present);
    assert_eq!(first.digest, second.digest);
    let after = std::fs::metadata(t.blob_path(&first.digest)).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&before),
        std::os::unix::fs::MetadataExt::ino(&after),
        "the present file was left as it was"
    );
    assert_eq!(t.names_in("blobs/sha256").len(), 1);
    assert!(t.names_in("tmp").is_empty());
}

#[test]
fn expected_digest_mismatch_is_refused_and_leaves_nothing() {
    let t = open_default();
    let expected = Digest::of(b"what was promised");
    let mut writer = t.store.blob_writer(Some(expected)).unwrap();
    writer.write_chunk(b"what arrived").unwrap();
    assert_eq!(t.names_in("tmp").len(), 1, "the write streams into tmp/");
    match writer.finish() {
        Err(Error::DigestMismatch {
            expected: e,
            actual,
        }) => {
            assert_eq!(e, expected);
            assert_eq!(actual, Digest::of(b"what arrived"));
        }
        other => panic!("expected a digest mismatch, got {other:?}"),
    }
    assert!(t.names_in("tmp").is_empty(), "the temp file is removed");
    assert!(t.names_in("blobs/sha256").is_empty());
}

#[test]
fn size_limit_bites_mid_stream() {
    let t = open(StoreConfig {
        max_blob_bytes: 1_000,
        ..StoreConfig::default()
    });
    let mut writer = t.store.blob_writer(None).unwrap();
    writer.write_chunk(&[7; 600]).unwrap();
    writer.write_chunk(&[7; 400]).unwrap(); // exactly the limit
    let err = writer.write_chunk(&[7; 1]).unwrap_err();
    match &err {
        Error::TooLarge { limit, setting } => {
            assert_eq!(*limit, 1_000);
            assert_eq!(*setting, MAX_BLOB_SETTING);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("1000") && message.contains(MAX_BLOB_SETTING),
        "{message}"
    );
    // Refused as the bytes arrived: nothing of the blob is left, before the writer is even
    // dropped, and the writer takes no more.
    assert!(t.names_in("tmp").is_empty());
    assert!(matches!(writer.write_chunk(b"x"), Err(Error::WriterClosed)));
    assert!(matches!(writer.finish(), Err(Error::WriterClosed)));
    assert!(t.names_in("blobs/sha256").is_empty());

    // A blob of exactly the limit is fine.
    t.store.put_blob(&[7; 1_000], None).unwrap();
}

#[test]
fn a_dropped_writer_leaves_nothing() {
    let t = open_default();
    let mut writer = t.store.blob_writer(None).unwrap();
    writer.write_chunk(&content(4, 10_000)).unwrap();
    drop(writer);
    assert!(t.names_in("tmp").is_empty());
    assert!(t.names_in("blobs/sha256").is_empty());
}

#[test]
fn a_flipped_byte_is_caught_at_the_end_of_the_stream_and_never_served_again() {
    let t = open_default();
    let bytes = content(5, 200_000);
    let put = t.store.put_blob(&bytes, None).unwrap();
    flip_byte(&t.blob_path(&put.digest), 123_456);

    // Streaming: bytes flow, and the verdict comes where the end would be.
    let mut reader = t.store.open_blob(&put.digest).unwrap();
    let mut buf = vec![0; 50_000];
    let mut streamed = 0;
    let err = loop {
        match reader.read_chunk(&mut buf) {
            Ok(0) => panic!("a damaged blob read to a clean end"),
            Ok(n) => streamed += n,
            Err(err) => break err,
        }
    };
    assert_eq!(
        streamed,
        bytes.len(),
        "every byte streamed before the verdict"
    );
    match &err {
        Error::Corrupt {
            path,
            actual,
            removed,
        } => {
            assert_eq!(path, &t.blob_path(&put.digest));
            assert_ne!(*actual, put.digest);
            assert!(*removed);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The verdict sticks, and the damaged file is gone.
    assert!(matches!(
        reader.read_chunk(&mut buf),
        Err(Error::Corrupt { .. })
    ));
    assert!(!t.blob_path(&put.digest).exists());
    assert!(t.store.read_blob(&put.digest).unwrap_err().is_not_found());

    // Pushing the content again restores it.
    let again = t.store.put_blob(&bytes, None).unwrap();
    assert!(!again.already_present);
    assert_eq!(t.store.read_blob(&put.digest).unwrap(), bytes);
}

#[test]
fn damage_is_caught_by_read_blob_and_by_io_read() {
    let t = open_default();
    let bytes = content(6, 10_000);
    let put = t.store.put_blob(&bytes, None).unwrap();
    flip_byte(&t.blob_path(&put.digest), 0);
    assert!(matches!(
        t.store.read_blob(&put.digest),
        Err(Error::Corrupt { .. })
    ));

    let put = t.store.put_blob(&bytes, None).unwrap();
    flip_byte(&t.blob_path(&put.digest), 9_999);
    let mut reader = t.store.open_blob(&put.digest).unwrap();
    let err = reader.read_to_end(&mut Vec::new()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let inner = err.get_ref().and_then(|e| e.downcast_ref::<Error>());
    assert!(matches!(inner, Some(Error::Corrupt { .. })), "{err:?}");
}

#[test]
fn truncated_and_overgrown_blobs_are_corrupt() {
    let t = open_default();
    let bytes = content(7, 10_000);
    let put = t.store.put_blob(&bytes, None).unwrap();
    std::fs::write(t.blob_path(&put.digest), &bytes[..5_000]).unwrap();
    assert!(matches!(
        t.store.read_blob(&put.digest),
        Err(Error::Corrupt { .. })
    ));

    // A file of the wrong length is replaced by the next push, not taken as present.
    let put = t.store.put_blob(&bytes, None).unwrap();
    std::fs::write(t.blob_path(&put.digest), &bytes[..5_000]).unwrap();
    assert!(!t.store.put_blob(&bytes, None).unwrap().already_present);
    assert_eq!(t.store.read_blob(&put.digest).unwrap(), bytes);

    // A file that grows while it is read.
    let mut reader = t.store.open_blob(&put.digest).unwrap();
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"appended");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(t.blob_path(&put.digest))
        .unwrap();
    file.write_all(b"appended").unwrap();
    let mut read = Vec::new();
    assert!(reader.read_to_end(&mut read).is_err());
}

#[test]
fn a_folder_where_a_blob_should_be_is_an_error_not_a_panic() {
    let t = open_default();
    let bytes = content(8, 1_000);
    let digest = Digest::of(&bytes);
    std::fs::create_dir(t.blob_path(&digest)).unwrap();
    assert!(matches!(
        t.store.open_blob(&digest),
        Err(Error::NotAFile { .. })
    ));
    assert!(matches!(
        t.store.put_blob(&bytes, None),
        Err(Error::NotAFile { .. })
    ));
    assert!(!t.store.contains_blob(&digest).unwrap());
    assert!(t.names_in("tmp").is_empty());
}

#[test]
fn missing_blob_is_not_found() {
    let t = open_default();
    let err = t
        .store
        .open_blob(&Digest::of(b"never stored"))
        .err()
        .unwrap();
    assert!(err.is_not_found());
    assert!(err
        .to_string()
        .contains(&Digest::of(b"never stored").to_hex()));
}

#[test]
fn concurrent_puts_of_the_same_content_both_succeed_with_one_blob() {
    for round in 0..20u8 {
        let t = open_default();
        let bytes = Arc::new(content(round, 256 * 1024));
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (store, bytes, start) = (t.store.clone(), bytes.clone(), start.clone());
                std::thread::spawn(move || {
                    let mut writer = store.blob_writer(Some(Digest::of(&bytes)))?;
                    start.wait();
                    for chunk in bytes.chunks(16 * 1024) {
                        writer.write_chunk(chunk)?;
                    }
                    writer.finish()
                })
            })
            .collect();
        let puts: Vec<_> = threads
            .into_iter()
            .map(|thread| thread.join().expect("no panic").expect("put succeeds"))
            .collect();
        assert_eq!(puts[0].digest, puts[1].digest);
        assert_eq!(t.names_in("blobs/sha256"), [puts[0].digest.to_hex()]);
        assert!(t.names_in("tmp").is_empty());
        assert_eq!(t.store.read_blob(&puts[0].digest).unwrap(), *bytes);
    }
}
