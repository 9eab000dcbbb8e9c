//! Mutations of real kernels, for the `mutate` target: the kernel corpus (kernels/*.ptx, as nvcc
//! writes them) cut into tokens, then changed as a person or a broken tool might change it (a
//! token deleted, repeated, swapped or replaced, a number pushed to its edge, a line dropped or
//! repeated, a few stray bytes), so that the parser and the lowering see programs that are
//! nearly right, which arbitrary bytes seldom reach. What still loads is launched.

use tasklet_ptx::{DeviceMemory, ExecError, LaunchParams, LaunchStats, Module};

/// The kernels mutated: the first input byte picks one.
pub const SEEDS: [&str; 14] = [
    include_str!("../../kernels/iota.ptx"),
    include_str!("../../kernels/scale.ptx"),
    include_str!("../../kernels/faults.ptx"),
    include_str!("../../kernels/vector_add.ptx"),
    include_str!("../../kernels/half.ptx"),
    include_str!("../../kernels/matmul.ptx"),
    include_str!("../../kernels/histogram.ptx"),
    include_str!("../../kernels/misc.ptx"),
    include_str!("../../kernels/reduce.ptx"),
    include_str!("../../kernels/warp.ptx"),
    include_str!("../../kernels/calls.ptx"),
    include_str!("../../kernels/math64.ptx"),
    include_str!("../../kernels/stencil.ptx"),
    include_str!("../../kernels/transcendental.ptx"),
];

/// Mutations applied to one kernel at most.
pub const MAX_MUTATIONS: usize = 16;
/// Global buffer every pointer parameter points at (bytes).
pub const BUF_BYTES: u64 = 4096;
/// Lane-instructions a launch may run.
pub const STEP_LIMIT: u64 = 50_000;

/// What a replacement may be: PTX's words and the numbers at the edges of its types.
const WORDS: [&str; 48] = [
    ".u32",
    ".s32",
    ".u64",
    ".s64",
    ".b8",
    ".b16",
    ".b32",
    ".b64",
    ".f16",
    ".f16x2",
    ".f32",
    ".f64",
    ".pred",
    ".reg",
    ".param",
    ".shared",
    ".global",
    ".local",
    ".const",
    ".align",
    ".entry",
    ".func",
    ".visible",
    "mov",
    "add",
    "ld",
    "st",
    "bra",
    "ret",
    "bar.sync",
    "setp.lt",
    "cvta.to.global",
    "call",
    "@",
    "!",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    "+",
    "%r1",
    "%rd1",
    "%p1",
    "%tid.x",
];
const NUMBERS: [&str; 14] = [
    "0",
    "1",
    "-1",
    "31",
    "32",
    "0x7fffffff",
    "0x80000000",
    "0xffffffff",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999999999",
    "0f7F800000",
    "0d7FF8000000000000",
    "0fFFFFFFFF",
];

/// A seed cut into tokens: words, single punctuation characters and whitespace runs, so that
/// joining them gives the text back.
fn tokens(text: &str) -> Vec<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%' | '.');
    let mut out: Vec<String> = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let mut t = String::from(c);
        if word(c) || c.is_whitespace() {
            let same = |d: char| if word(c) { word(d) } else { d.is_whitespace() };
            while let Some(&d) = chars.peek() {
                if !same(d) {
                    break;
                }
                t.push(d);
                chars.next();
            }
        }
        out.push(t);
    }
    out
}

/// The input read as a stream of choices (zero once it runs out).
struct Choices<'a> {
    data: &'a [u8],
    at: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let v = (self.byte() as usize) << 8 | self.byte() as usize;
        v % n
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

/// The module `data` makes of one seed.
pub fn mutate(data: &[u8]) -> String {
    let mut c = Choices { data, at: 0 };
    let seed = SEEDS[c.byte() as usize % SEEDS.len()];
    let mut toks = tokens(seed);
    for _ in 0..MAX_MUTATIONS {
        if c.done() || toks.is_empty() {
            break;
        }
        let op = c.byte() % 10;
        let i = c.below(toks.len());
        let j = c.below(toks.len());
        match op {
            0 => {
                toks.remove(i);
            }
            1 => {
                let t = toks[i].clone();
                toks.insert(i, t);
            }
            2 => toks.swap(i, j),
            3 => toks[i] = toks[j].clone(),
            4 => toks[i] = WORDS[c.below(WORDS.len())].to_owned(),
            5 => {
                // A number at an edge, where a number was.
                if let Some(k) =
                    (i..toks.len()).find(|&k| toks[k].starts_with(|d: char| d.is_ascii_digit()))
                {
                    toks[k] = NUMBERS[c.below(NUMBERS.len())].to_owned();
                }
            }
            6 | 7 => {
                // A line (from token i to its newline) dropped, or repeated at token j.
                let end = (i..toks.len())
                    .find(|&k| toks[k].contains('\n'))
                    .unwrap_or(toks.len() - 1);
                let line: Vec<String> = toks[i..=end].to_vec();
                if op == 6 {
                    toks.drain(i..=end);
                } else if toks.len() < 100_000 {
                    toks.splice(j..j, line);
                }
            }
            8 => {
                // A few stray printable bytes.
                let n = 1 + c.below(8);
                let s: String = (0..n).map(|_| char::from(b' ' + c.byte() % 95)).collect();
                toks.insert(i, s);
            }
            _ => {
                // Whitespace where there was none, or none where there was.
                if toks[i].trim().is_empty() {
                    toks.remove(i);
                } else {
                    toks.insert(i, " ".to_owned());
                }
            }
        }
    }
    toks.concat()
}

/// Mutates, parses and (when it loads) launches each kernel once: the body of the `mutate`
/// target. `None` when the module did not load; otherwise each launch's result.
pub fn run_mutated(data: &[u8]) -> Option<Vec<Result<LaunchStats, ExecError>>> {
    let ptx = mutate(data);
    let sigs = tasklet_ptx::entry_signatures(&ptx);
    let module = Module::parse(&ptx).ok()?;
    assert_eq!(
        sigs.as_deref().ok(),
        Some(module.kernels()),
        "entry_signatures disagrees with Module::parse"
    );
    let mem = DeviceMemory::new();
    let buf = mem.alloc(BUF_BYTES).expect("alloc");
    let mut results = Vec::new();
    for (index, kernel) in module.kernels().iter().enumerate().take(4) {
        let (offsets, size) = kernel.param_layout();
        let mut args = vec![0u8; size as usize];
        for (p, &at) in kernel.params.iter().zip(&offsets) {
            let at = at as usize;
            match p.size {
                8 => args[at..at + 8].copy_from_slice(&buf.to_le_bytes()),
                4 => args[at..at + 4].copy_from_slice(&64u32.to_le_bytes()),
                _ => {}
            }
        }
        let params = LaunchParams {
            grid: [2, 1, 1],
            block: [32, 1, 1],
            shared_mem_bytes: 0,
            args: &args,
            step_limit: STEP_LIMIT,
            threads: 1,
        };
        results.push(module.launch_by_index(index, &mem, &params));
        // The memory stays usable whatever the kernel did.
        let mut back = vec![0u8; BUF_BYTES as usize];
        mem.read(buf, &mut back).expect("read after launch");
    }
    Some(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_join_to_the_seed() {
        for seed in SEEDS {
            assert_eq!(tokens(seed).concat(), seed);
        }
    }

    #[test]
    fn no_mutation_is_the_seed_and_it_runs() {
        for k in 0..SEEDS.len() as u8 {
            assert_eq!(mutate(&[k]), SEEDS[k as usize]);
            let r = run_mutated(&[k]).expect("every seed loads");
            assert!(!r.is_empty());
        }
    }

    #[test]
    fn mutants_often_still_load() {
        // One mutation each: a fair share must still load, or the target only fuzzes the
        // parser's first error.
        let mut loaded = 0;
        let total = 2000u32;
        for n in 0..total {
            let bytes: Vec<u8> = n
                .to_le_bytes()
                .iter()
                .chain(&n.wrapping_mul(2654435761).to_le_bytes())
                .copied()
                .collect();
            if run_mutated(&bytes[..6]).is_some() {
                loaded += 1;
            }
        }
        assert!(loaded * 10 >= total, "{loaded} of {total} mutants load");
    }
}
