//! Throughput figures: the peak matmul rate of a client's devices, from a table of the
//! accelerators' published dense rates or, for CPUs and devices the table does not know,
//! measured by a microbenchmark, and the model FLOP utilisation (MFU) of a run against it.

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

/// The peak rate a run's MFU is measured against, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePeak {
    /// Dense FLOP/s of one device.
    pub flops_per_second: f64,
    /// Where the figure came from, e.g. `table: NVIDIA H100 80GB HBM3, tf32 dense` or
    /// `measured: 1024x1024 f32 matmul on cpu`.
    pub source: String,
}

/// Published dense peak rates (FLOP/s, no sparsity) of accelerators, matched by a part of the
/// device kind PJRT reports (e.g. `NVIDIA H100 80GB HBM3`), more specific names first:
/// `(kind contains, bf16/f16, tf32, f32)`. XLA runs float32 dots on these GPUs in TF32 at its
/// default precision, so float32 compute is measured against the TF32 rate.
const PEAKS: &[(&str, f64, f64, f64)] = &[
    ("H100 PCIe", 756e12, 378e12, 51e12),
    ("H100 NVL", 835e12, 418e12, 60e12),
    ("H100", 989e12, 495e12, 67e12),
    ("H200", 989e12, 495e12, 67e12),
    ("GH200", 989e12, 495e12, 67e12),
    ("A100", 312e12, 156e12, 19.5e12),
    ("B200", 2250e12, 1100e12, 75e12),
];

/// The table's entry for a device kind and compute dtype: the rate and the column's name.
pub fn table_peak(kind: &str, dtype: DType) -> Option<(f64, &'static str)> {
    let &(_, half, tf32, _f32) = PEAKS.iter().find(|(name, ..)| kind.contains(name))?;
    match dtype {
        DType::BF16 | DType::F16 => Some((half, "bf16")),
        DType::F32 => Some((tf32, "tf32")),
        _ => None,
    }
}

/// The peak of `device` for `dtype` compute: the table's rate for a known accelerator, else a
/// 1024×1024 float32 matmul measured on the device (CPUs; their devices share the host's cores,
/// so this is also the whole client's peak).
pub fn device_peak(client: &Client, device: i32, dtype: DType) -> Result<DevicePeak, PerfError> {
    let kind = client
        .addressable_devices()?
        .iter()
        .find(|d| d.id().is_ok_and(|id| id == device))
        .map(|d| d.info().map(|i| i.kind))
        .transpose()?
        .unwrap_or_default();
    if let Some((rate, column)) = table_peak(&kind, dtype) {
        return Ok(DevicePeak {
            flops_per_second: rate,
            source: format!("table: {kind}, {column} dense"),
        });
    }
    let n = 1024;
    let measured = matmul_peak(client, device, n, 3)?;
    Ok(DevicePeak {
        flops_per_second: measured.flops_per_second,
        source: format!("measured: {n}x{n} f32 matmul on {kind}"),
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

    #[test]
    fn known_accelerators_take_the_table_and_cpus_a_measurement() {
        assert_eq!(
            table_peak("NVIDIA H100 80GB HBM3", DType::BF16),
            Some((989e12, "bf16"))
        );
        assert_eq!(
            table_peak("NVIDIA H100 80GB HBM3", DType::F32),
            Some((495e12, "tf32"))
        );
        assert_eq!(
            table_peak("NVIDIA H100 PCIe", DType::F32),
            Some((378e12, "tf32"))
        );
        assert_eq!(
            table_peak("NVIDIA A100-SXM4-80GB", DType::BF16),
            Some((312e12, "bf16"))
        );
        assert_eq!(table_peak("cpu", DType::F32), None);
        let client = Client::cpu(1).unwrap();
        let peak = device_peak(&client, 0, DType::F32).unwrap();
        assert!(
            peak.source.starts_with("measured: 1024x1024"),
            "{}",
            peak.source
        );
        assert!(peak.flops_per_second > 0.0);
    }
}
