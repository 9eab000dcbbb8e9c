//! Pushing a deployment: the manifest up front, the component streamed, then both blobs and
//! the record named at once.

use std::io;
use std::sync::Arc;

use crate::blob::BlobWriter;
use crate::digest::Digest;
use crate::error::Error;
use crate::sealed::Sealed;
use crate::store::{Inner, Store};
use crate::temp::TempFile;

use super::{record, BlobRef, Deployment};

/// What a push stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// The deployment; its `digest` is the one to print.
    pub deployment: Deployment,
    /// Whether the store already held this deployment whole (the push then changed nothing);
    /// `false` when the push restored a blob removed since.
    pub already_present: bool,
}

/// A deployment being pushed: feed it the component's chunks, then
/// [`finish`](DeploymentWriter::finish) it. Each blob obeys the store's size limit as a
/// [`BlobWriter`] does; dropping the writer, or any error, leaves the store as it was.
pub struct DeploymentWriter {
    inner: Arc<Inner>,
    manifest: Sealed,
    component: BlobWriter,
}

impl Store {
    /// Starts pushing a deployment of `manifest` (the `tasklet.toml` text, stored as given)
    /// and a component to be streamed.
    pub fn deployment_writer(&self, manifest: &[u8]) -> Result<DeploymentWriter, Error> {
        let mut manifest_writer = self.blob_writer(None)?;
        manifest_writer.write_chunk(manifest)?;
        Ok(DeploymentWriter {
            inner: Arc::clone(&self.inner),
            manifest: manifest_writer.seal()?,
            component: self.blob_writer(None)?,
        })
    }

    /// Pushes a deployment whose component is already in memory.
    pub fn push_deployment(&self, manifest: &[u8], component: &[u8]) -> Result<Pushed, Error> {
        let mut writer = self.deployment_writer(manifest)?;
        writer.write_chunk(component)?;
        writer.finish()
    }
}

impl DeploymentWriter {
    /// Appends `chunk` to the component.
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), Error> {
        self.component.write_chunk(chunk)
    }

    /// How many bytes of the component have been written so far.
    pub fn len(&self) -> u64 {
        self.component.len()
    }

    /// Whether no byte of the component has been written yet.
    pub fn is_empty(&self) -> bool {
        self.component.is_empty()
    }

    /// Completes the push.
    ///
    /// The component's and manifest's blobs and the record take their names together, under
    /// the lock a deletion takes, so a deletion never sees the blobs without the record that
    /// keeps them, nor removes a blob between its write and the record's.
    pub fn finish(self) -> Result<Pushed, Error> {
        let component = self.component.seal()?;
        let component_ref = BlobRef {
            digest: component.digest,
            len: component.len,
        };
        let manifest_ref = BlobRef {
            digest: self.manifest.digest,
            len: self.manifest.len,
        };
        let record_bytes = record::encode(&component_ref, &manifest_ref);
        let deployment = Deployment {
            digest: Digest::of(&record_bytes),
            component: component_ref,
            manifest: manifest_ref,
        };
        let mut record_file = TempFile::create(&self.inner)?;
        record_file.write_all(&record_bytes)?;
        record_file.sync()?;
        let record = Sealed {
            temp: record_file,
            digest: deployment.digest,
            len: record_bytes.len() as u64,
        };
        let already_present = {
            let _namespace = self.inner.namespace();
            let component = component.place(&self.inner.blobs)?;
            let manifest = self.manifest.place(&self.inner.blobs)?;
            let record = record.place(&self.inner.deployments)?;
            component && manifest && record
        };
        Ok(Pushed {
            deployment,
            already_present,
        })
    }
}

/// For callers that copy the component in with `std::io` (`io::copy`).
impl io::Write for DeploymentWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_chunk(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
