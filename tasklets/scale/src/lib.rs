//! `scale`: a pure function on the GPU, through the SDK's one-shot [`GpuCall`] helper.
//!
//! Input: whitespace-separated numbers, the first the factor. Output: one line per remaining
//! number, the number times the factor as an `f32` multiplied on the device (`scale` kernel),
//! printed with Rust's `{}` for `f32`.

use tasklet_gpu::{input, Error, GpuCall};

const SCALE_PTX: &str = include_str!("../../../kernels/scale.ptx");

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let (factor, xs) = parse(&input)?;
    // extern "C" __global__ void scale(float* x, float factor, unsigned n)
    let ys = GpuCall::new(SCALE_PTX, "scale")
        .data()
        .arg(factor)
        .len_arg()
        .run(&xs)?;
    Ok(ys
        .iter()
        .map(|y| format!("{y}\n"))
        .collect::<String>()
        .into_bytes())
}

tasklet_gpu::export!(run);

fn parse(input: &[u8]) -> Result<(f32, Vec<f32>), Error> {
    let mut numbers = input::numbers::<f32>(input)?;
    if numbers.is_empty() {
        return Err(Error::InvalidInput(
            "expected a factor, then the numbers to scale".into(),
        ));
    }
    let factor = numbers.remove(0);
    Ok((factor, numbers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_factor_and_numbers() {
        assert_eq!(parse(b"2 1 -1.5\n3e2"), Ok((2.0, vec![1.0, -1.5, 300.0])));
        assert_eq!(parse(b" 0.5 "), Ok((0.5, vec![])));
        assert!(parse(b"")
            .unwrap_err()
            .message()
            .contains("expected a factor"));
        assert!(parse(b"2 x").unwrap_err().message().contains("\"x\""));
    }

    #[test]
    fn only_a_factor_needs_no_gpu() {
        assert_eq!(run(b"3".to_vec()), Ok(Vec::new()));
    }
}
