//! A backend with no device: answers `ping`, `info`, `sync` and `reset`, refuses everything else
//! with `Unsupported`. Lets the channel, the client and the pool be exercised (and the IPC cost be
//! measured) without any emulator or GPU; selected with the worker flag `--null-backend`.

use super::{Backend, BackendError};
use crate::contract::{ErrorKind, Launch, LoadedModule, WorkerInfo};

#[derive(Debug, Default)]
pub struct NullBackend;

fn unsupported<T>() -> Result<T, BackendError> {
    Err(BackendError::new(
        ErrorKind::Unsupported,
        "the null backend has no device",
    ))
}

impl Backend for NullBackend {
    fn info(&self) -> WorkerInfo {
        WorkerInfo {
            backend: "null".into(),
            device: "none".into(),
            ..WorkerInfo::default()
        }
    }
    fn alloc(&mut self, _bytes: u64) -> Result<u64, BackendError> {
        unsupported()
    }
    fn free(&mut self, _addr: u64) -> Result<(), BackendError> {
        unsupported()
    }
    fn write(&mut self, _addr: u64, _data: &[u8]) -> Result<(), BackendError> {
        unsupported()
    }
    fn read(&mut self, _addr: u64, _out: &mut [u8]) -> Result<(), BackendError> {
        unsupported()
    }
    fn copy(&mut self, _dst: u64, _src: u64, _len: u64) -> Result<(), BackendError> {
        unsupported()
    }
    fn load_module(&mut self, _ptx: &str) -> Result<LoadedModule, BackendError> {
        unsupported()
    }
    fn load_source(
        &mut self,
        _source: &str,
        _options: &[&str],
    ) -> Result<LoadedModule, BackendError> {
        unsupported()
    }
    fn unload_module(&mut self, _id: u32) -> Result<(), BackendError> {
        unsupported()
    }
    fn kernel_name(&self, _module: u32, _kernel: u32) -> Option<&str> {
        None
    }
    fn launch(&mut self, _launch: &Launch<'_>) -> Result<(), BackendError> {
        unsupported()
    }
    fn sync(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
    fn reset(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}
