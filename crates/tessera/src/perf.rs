//! Throughput figures: the peak matmul rate of a client's devices, measured by a microbenchmark,
//! and the model FLOP utilisation (MFU) of a run against it.

use std::time::Instant;

use tessera_ir::trace::trace;
use tessera_ir::{Array, DType, ShapedArray};
use tessera_pjrt::{Buffer, Client};

use crate::jit::{JitError, compile, to_host};

/// Why a measurement could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The benchmark program could not be traced or its data built.
    #[error(transparent)]
    Ir(#[from] tessera_ir::IrError),
    /// Compiling or running it failed.
    #[error(transparent)]
    Jit(#[from] JitError),
    /// The device could not take its inputs.
    #[error(transparent)]
    Pjrt(#[from] tessera_pjrt::PjrtError),
}

/// The measured matmul rate of one device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MatmulPeak {
    /// The size of the square float32 matrices.
    pub n: i64,
    /// The median time of one product, in seconds.
    pub seconds: f64,
    /// `2 n³ / seconds`.
    pub flops_per_second: f64,
}

/// Multiplies two `n × n` float32 matrices on `device` `runs` times after a warm-up and returns
/// the median rate. On CPU, the devices of one plugin share the host's cores, so the peak of
/// the whole client is this rate, not this rate times the devices.
pub fn matmul_peak(
    client: &Client,
    device: i32,
    n: i64,
    runs: usize,
) -> Result<MatmulPeak, PerfError> {
    let square = ShapedArray::new(DType::F32, &[n, n]);
    let program = trace(&[square.clone(), square], |a| vec![a[0].matmul(&a[1])])?;
    let executable = compile(client, &program, i64::from(device))?;
    let values: Vec<f64> = (0..n * n)
        .map(|i| ((i % 97) as f64 - 48.0) / 97.0)
        .collect();
    let host = to_host(&Array::new(DType::F32, &[n, n], values)?)?;
    let a = Buffer::from_host_to(client, &host, device)?;
    let b = Buffer::from_host_to(client, &host, device)?;
    let mut times = Vec::with_capacity(runs.max(1));
    for run in 0..runs.max(1) + 1 {
        let start = Instant::now();
        let out = executable.execute(&[vec![&a, &b]])?;
        for buffer in out.iter().flatten() {
            buffer.block_until_ready()?;
        }
        if run > 0 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    Ok(MatmulPeak {
        n,
        seconds,
        flops_per_second: 2.0 * (n as f64).powi(3) / seconds,
    })
}

/// Model FLOP utilisation: the model's FLOP/s (`flops_per_token × tokens_per_second`) as a
/// fraction of `peak_flops_per_second`.
pub fn mfu(flops_per_token: f64, tokens_per_second: f64, peak_flops_per_second: f64) -> f64 {
    flops_per_token * tokens_per_second / peak_flops_per_second
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matmul_peak_is_a_positive_rate_and_mfu_a_ratio() {
        let client = Client::cpu(1).unwrap();
        let peak = matmul_peak(&client, 0, 128, 3).unwrap();
        assert_eq!(peak.n, 128);
        assert!(peak.seconds > 0.0 && peak.flops_per_second.is_finite());
        let rate = 2.0 * 128f64.powi(3) / peak.seconds;
        assert!((peak.flops_per_second - rate).abs() <= 1e-9 * rate);
        assert!((mfu(6.0e6, 1.0e3, 1.2e10) - 0.5).abs() < 1e-12);
    }
}
