//! Every persistent launch is a cooperative one: kernels/actor.cu's grid_sum, whose blocks meet
//! at `grid.sync()`, run through `launch_persistent` on an emu worker, and the same kernel
//! launched normally, which traps as on a GPU.

use std::sync::Arc;
use std::time::Duration;

use super::{emu_worker, kernel_source};
use crate::support::*;
use tasklet_worker::contract::actor::{ControlBlock, Exit, CONTROL_BYTES};
use tasklet_worker::host::mapped::MappedArea;
use tasklet_worker::{ErrorKind, Launch, LoadedModule, Worker};

/// Every wait of these tests ends by then.
const BOUND: Duration = Duration::from_secs(30);

/// grid_sum's input (`n` small integers: every sum is exact in f32) and output (`grid` + 1
/// floats) in device memory, its control block in an area mapped for kernels.
struct GridSum {
    area: Arc<MappedArea>,
    control: usize,
    module: LoadedModule,
    input: u64,
    out: u64,
    args: Vec<u8>,
    want: f32,
}

impl GridSum {
    fn new(w: &mut Worker, grid: u32, n: u32) -> GridSum {
        let area = Arc::new(MappedArea::create(64 << 10).unwrap());
        let dev = w.map_device(&area.whole()).unwrap();
        let control = area.take(CONTROL_BYTES).unwrap();
        let module = w.load_module(&kernel_source("actor")).unwrap();
        let values: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
        let input = w.alloc(u64::from(n) * 4).unwrap();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write(input, &bytes).unwrap();
        let out = w.alloc(u64::from(grid + 1) * 4).unwrap();
        let k = &module.kernels[kernel_index(&module, "grid_sum") as usize];
        let (offsets, size) = k.param_layout();
        let mut args = vec![0u8; size as usize];
        let mut put =
            |i: usize, b: &[u8]| args[offsets[i] as usize..][..b.len()].copy_from_slice(b);
        put(0, &input.to_le_bytes());
        put(1, &out.to_le_bytes());
        put(2, &n.to_le_bytes());
        put(3, &(dev + control as u64).to_le_bytes());
        GridSum {
            area,
            control,
            module,
            input,
            out,
            args,
            want: values.iter().sum(),
        }
    }

    fn launch(&self, grid: u32) -> Launch<'_> {
        Launch {
            module: self.module.id,
            kernel: kernel_index(&self.module, "grid_sum"),
            grid: [grid, 1, 1],
            block: [128, 1, 1],
            shared_mem_bytes: 0,
            args: &self.args,
            deadline: Duration::from_secs(20),
        }
    }

    fn control(&self) -> ControlBlock {
        // SAFETY: a piece of the area, which `self` keeps mapped.
        unsafe { ControlBlock::at(self.area.host_ptr(self.control)) }
    }

    fn sums(&self, w: &mut Worker, grid: u32) -> Vec<f32> {
        let mut back = vec![0u8; (grid as usize + 1) * 4];
        w.read(self.out, &mut back).unwrap();
        back.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

#[test]
fn a_persistent_launch_is_cooperative_so_grid_sum_meets_at_grid_sync_and_returns() {
    let mut w = emu_worker(64 << 20);
    for grid in [8u32, 32] {
        let g = GridSum::new(&mut w, grid, 50_000);
        w.launch_persistent(&g.launch(grid), &g.area, g.control)
            .unwrap();
        assert!(eventually(BOUND, || g.control().ended()), "grid {grid}");
        let s = g.control().snapshot();
        assert_eq!(s.exit, Exit::Returned, "grid {grid}");
        assert!(s.has_terminated && !s.is_active);
        assert_eq!(s.messages_processed, 1);
        let sums = g.sums(&mut w, grid);
        assert_eq!(sums[grid as usize], g.want, "grid {grid}");
        assert_eq!(sums[..grid as usize].iter().sum::<f32>(), g.want);
        assert_eq!(w.persistent_running(), 0);
        w.free(g.input).unwrap();
    }
    // The workspaces were the launches' own: what the worker holds is what the test allocated.
    assert_eq!(w.info().unwrap().allocations, 2);
}

#[test]
fn grid_sum_launched_normally_traps_and_says_where() {
    let mut w = emu_worker(64 << 20);
    let g = GridSum::new(&mut w, 8, 1000);
    // Reported by the launch or by the sync after it, as the worker finds it.
    let (kind, message) = op_error(w.launch(&g.launch(8)).and_then(|()| w.sync()));
    assert_eq!(kind, ErrorKind::KernelFault, "{message}");
    assert!(
        message.contains("trap instruction executed") && message.contains("PTX line"),
        "{message}"
    );
}
