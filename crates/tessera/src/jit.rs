//! Compiling and running IR programs through StableHLO and PJRT: the glue between
//! `tessera-ir`, `tessera-stablehlo` and `tessera-pjrt`.

use tessera_ir::{Array, ClosedJaxpr, DType};
use tessera_pjrt::{Buffer, Client, CompileOptions, ElementType, HostArray, LoadedExecutable};
use tessera_stablehlo::{LowerOptions, lower_closed};

/// Errors of compiling or running a program.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    /// Lowering to StableHLO failed.
    #[error("lowering to StableHLO: {0}")]
    Lower(#[from] tessera_stablehlo::LowerError),
    /// PJRT failed.
    #[error(transparent)]
    Pjrt(#[from] tessera_pjrt::PjrtError),
    /// An array could not be converted.
    #[error("{0}")]
    Convert(String),
}

/// The PJRT element type of an IR dtype.
pub fn element_type(dtype: DType) -> ElementType {
    match dtype {
        DType::Bool => ElementType::Pred,
        DType::I8 => ElementType::S8,
        DType::I16 => ElementType::S16,
        DType::I32 => ElementType::S32,
        DType::I64 => ElementType::S64,
        DType::U8 => ElementType::U8,
        DType::U16 => ElementType::U16,
        DType::U32 => ElementType::U32,
        DType::U64 => ElementType::U64,
        DType::BF16 => ElementType::BF16,
        DType::F16 => ElementType::F16,
        DType::F32 => ElementType::F32,
        DType::F64 => ElementType::F64,
    }
}

/// An interpreter array as host bytes.
pub fn to_host(array: &Array) -> Result<HostArray, JitError> {
    let mut bytes = Vec::with_capacity(array.data.len() * array.dtype.size_in_bytes());
    for &v in array.data.iter() {
        match array.dtype {
            DType::Bool | DType::U8 => bytes.push(v as u8),
            DType::I8 => bytes.extend((v as i8).to_ne_bytes()),
            DType::I16 => bytes.extend((v as i16).to_ne_bytes()),
            DType::I32 => bytes.extend((v as i32).to_ne_bytes()),
            DType::I64 => bytes.extend((v as i64).to_ne_bytes()),
            DType::U16 => bytes.extend((v as u16).to_ne_bytes()),
            DType::U32 => bytes.extend((v as u32).to_ne_bytes()),
            DType::U64 => bytes.extend((v as u64).to_ne_bytes()),
            DType::BF16 => bytes.extend(half::bf16::from_f64(v).to_bits().to_ne_bytes()),
            DType::F16 => bytes.extend(half::f16::from_f64(v).to_bits().to_ne_bytes()),
            DType::F32 => bytes.extend((v as f32).to_ne_bytes()),
            DType::F64 => bytes.extend(v.to_ne_bytes()),
        }
    }
    Ok(HostArray::from_bytes(
        element_type(array.dtype),
        &array.shape(),
        bytes,
    )?)
}

/// Host bytes as an interpreter array of `dtype`.
pub fn from_host(host: &HostArray, dtype: DType) -> Result<Array, JitError> {
    let size = dtype.size_in_bytes();
    let values: Vec<f64> = host
        .bytes()
        .chunks_exact(size)
        .map(|c| {
            let mut b8 = [0u8; 8];
            b8[..size].copy_from_slice(c);
            match dtype {
                DType::Bool | DType::U8 => f64::from(c[0]),
                DType::I8 => f64::from(c[0] as i8),
                DType::I16 => f64::from(i16::from_ne_bytes([c[0], c[1]])),
                DType::U16 => f64::from(u16::from_ne_bytes([c[0], c[1]])),
                DType::I32 => f64::from(i32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
                DType::U32 => f64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
                DType::F32 => f64::from(f32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
                DType::I64 => i64::from_ne_bytes(b8) as f64,
                DType::U64 => u64::from_ne_bytes(b8) as f64,
                DType::F64 => f64::from_ne_bytes(b8),
                DType::BF16 => f64::from(half::bf16::from_bits(u16::from_ne_bytes([c[0], c[1]]))),
                DType::F16 => f64::from(half::f16::from_bits(u16::from_ne_bytes([c[0], c[1]]))),
            }
        })
        .collect();
    Array::new(dtype, host.dims(), values).map_err(|e| JitError::Convert(e.to_string()))
}

/// Lowers `program` and compiles it for one device.
pub fn compile(
    client: &Client,
    program: &ClosedJaxpr,
    device: i64,
) -> Result<LoadedExecutable, JitError> {
    let module = lower_closed(
        program,
        &LowerOptions {
            num_partitions: 1,
            ..LowerOptions::default()
        },
    )?;
    Ok(client.compile(module.text.as_bytes(), &CompileOptions::spmd(&[device]))?)
}

/// Compiles `program` for one device and runs it on `inputs`.
pub fn run_on_device(
    client: &Client,
    program: &ClosedJaxpr,
    inputs: &[Array],
    device: i32,
) -> Result<Vec<Array>, JitError> {
    let exe = compile(client, program, i64::from(device))?;
    let buffers = inputs
        .iter()
        .map(|a| Ok(Buffer::from_host_to(client, &to_host(a)?, device)?))
        .collect::<Result<Vec<_>, JitError>>()?;
    let outputs = exe.execute(&[buffers.iter().collect()])?;
    let out_avals = program.jaxpr.out_avals();
    outputs[0]
        .iter()
        .zip(&out_avals)
        .map(|(b, aval)| from_host(&b.to_host()?, aval.dtype))
        .collect()
}
