//! Helpers shared by the integration tests: loading committed PTX from kernels/ and building
//! argument blocks.

use tasklet_ptx::{DeviceMemory, ExecError, KernelInfo, LaunchParams, LaunchStats, Module};

pub fn kernel_src(name: &str) -> String {
    let path = format!("{}/../../kernels/{name}.ptx", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

pub fn module(name: &str) -> Module {
    Module::parse(&kernel_src(name)).unwrap_or_else(|e| panic!("{name}.ptx: {e}"))
}

/// One kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum A {
    U32(u32),
    U64(u64),
    F32(f32),
}

/// Lays `args` out as the kernel's param_layout says.
pub fn args(k: &KernelInfo, vals: &[A]) -> Vec<u8> {
    let (offs, size) = k.param_layout();
    assert_eq!(offs.len(), vals.len(), "argument count for {}", k.name);
    let mut b = vec![0u8; size as usize];
    for (o, v) in offs.iter().zip(vals) {
        let bytes: Vec<u8> = match *v {
            A::U32(x) => x.to_le_bytes().to_vec(),
            A::U64(x) => x.to_le_bytes().to_vec(),
            A::F32(x) => x.to_le_bytes().to_vec(),
        };
        b[*o as usize..*o as usize + bytes.len()].copy_from_slice(&bytes);
    }
    b
}

pub fn kinfo<'a>(m: &'a Module, name: &str) -> &'a KernelInfo {
    m.kernels()
        .iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("no kernel {name}"))
}

pub fn launch(
    m: &Module,
    mem: &DeviceMemory,
    name: &str,
    grid: [u32; 3],
    block: [u32; 3],
    vals: &[A],
) -> Result<LaunchStats, ExecError> {
    launch_full(m, mem, name, grid, block, 0, vals, 1 << 40, 0)
}

#[allow(clippy::too_many_arguments)]
pub fn launch_full(
    m: &Module,
    mem: &DeviceMemory,
    name: &str,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    vals: &[A],
    step_limit: u64,
    threads: usize,
) -> Result<LaunchStats, ExecError> {
    let a = args(kinfo(m, name), vals);
    m.launch(
        name,
        mem,
        &LaunchParams {
            grid,
            block,
            shared_mem_bytes: shared,
            args: &a,
            step_limit,
            threads,
        },
    )
}

pub fn upload_u32(mem: &DeviceMemory, v: &[u32]) -> u64 {
    let p = mem.alloc((v.len() * 4).max(1) as u64).unwrap();
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    mem.write(p, &bytes).unwrap();
    p
}

pub fn upload_f32(mem: &DeviceMemory, v: &[f32]) -> u64 {
    upload_u32(mem, &v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
}

pub fn download_u32(mem: &DeviceMemory, p: u64, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; n * 4];
    mem.read(p, &mut b).unwrap();
    b.chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn download_f32(mem: &DeviceMemory, p: u64, n: usize) -> Vec<f32> {
    download_u32(mem, p, n)
        .into_iter()
        .map(f32::from_bits)
        .collect()
}

pub fn upload_bytes(mem: &DeviceMemory, b: &[u8]) -> u64 {
    let p = mem.alloc(b.len().max(1) as u64).unwrap();
    mem.write(p, b).unwrap();
    p
}

pub fn download_bytes(mem: &DeviceMemory, p: u64, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    mem.read(p, &mut b).unwrap();
    b
}

/// A small deterministic generator (xorshift) so tests need no dependency.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
    pub fn f32(&mut self) -> f32 {
        (self.next_u32() % 2_000_001) as f32 / 1_000_000.0 - 1.0
    }
}
