//! Checks that a PJRT plugin runs the collectives some backends lack, on all of its devices,
//! as the reference interpreter computes them: `ragged_all_to_all`, a `psend`/`precv` pair,
//! the asynchronous starts and dones, and, for comparison, the synchronous collectives every
//! backend has. JAX lowers `ragged_all_to_all` and `psend`/`precv` for GPUs only (XLA's CPU
//! backend does not implement them), so only a GPU plugin can show that Tessera's lowering of
//! them runs; `tessera check collectives --plugin cuda` and the GPU bundle's `run.sh` do.
//!
//! Each program is a `shard_map` over a one-axis mesh `x` of every device the client has, with
//! inputs that make each device's data distinct, so a value sent to the wrong device shows.

use tessera_ir::trace::{Tensor, precv, shard_map_program};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::Client;
use tessera_sharding::{AbstractMesh, PartitionSpec};

/// How one program fared on the plugin.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The plugin ran it and its results equal the interpreter's.
    Passed,
    /// The plugin refused to compile it with an `Unimplemented` error (the operation is not in
    /// its backend): the message.
    Unsupported(String),
    /// The program needs more devices than the client has: why.
    Skipped(String),
    /// The plugin ran it with other results than the interpreter's, or failed otherwise: why.
    Failed(String),
}

/// One program's name and outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What the program exercises, e.g. `ragged_all_to_all`.
    pub name: &'static str,
    /// How the plugin ran it.
    pub outcome: Outcome,
}

/// A program to check and its inputs, or why it does not apply to this many devices.
enum Case {
    Run {
        program: ClosedJaxpr,
        inputs: Vec<Array>,
    },
    Skip(String),
}

/// The names of the programs [`collectives`] runs, in its order.
pub const COLLECTIVES: [&str; 6] = [
    "psum, all_to_all, ppermute",
    "psum_start",
    "all_gather_start",
    "ppermute_start",
    "ragged_all_to_all",
    "psend/precv",
];

/// Runs every collective program on all of `client`'s devices (at least 1) and compares each
/// result with the interpreter's.
pub fn collectives(client: &Client) -> Result<Vec<Check>, String> {
    collectives_named(client, |_| true)
}

/// [`collectives`], only the programs whose name `wanted` accepts (a compiler that aborts the
/// process on one program then does not hide the others: run each alone).
pub fn collectives_named(
    client: &Client,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<Check>, String> {
    let devices = client.devices().map_err(|e| e.to_string())?.len() as i64;
    if devices == 0 {
        return Err("the plugin has no devices".to_owned());
    }
    let builders: [fn(i64) -> Result<Case, String>; 6] = [
        synchronous,
        psum_started,
        all_gather_started,
        ppermute_started,
        ragged,
        send_receive,
    ];
    Ok(COLLECTIVES
        .into_iter()
        .zip(builders)
        .filter(|(name, _)| wanted(name))
        .map(|(name, build)| Check {
            name,
            outcome: match build(devices) {
                Ok(Case::Run { program, inputs }) => run(client, &program, &inputs),
                Ok(Case::Skip(why)) => Outcome::Skipped(why),
                Err(e) => Outcome::Failed(format!("could not build the program: {e}")),
            },
        })
        .collect())
}

fn run(client: &Client, program: &ClosedJaxpr, inputs: &[Array]) -> Outcome {
    let want = match tessera_ir::interp::eval_closed(program, inputs) {
        Ok(want) => want,
        Err(e) => return Outcome::Failed(format!("the interpreter refused it: {e}")),
    };
    let got = match crate::jit::run_spmd(client, program, inputs) {
        Ok(got) => got,
        Err(
            e @ crate::jit::JitError::Pjrt(tessera_pjrt::PjrtError::Call {
                code: tessera_pjrt::ErrorCode::Unimplemented,
                ..
            }),
        ) => return Outcome::Unsupported(e.to_string()),
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    if got.len() != want.len() {
        return Outcome::Failed(format!("{} results, want {}", got.len(), want.len()));
    }
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.shape() != w.shape() {
            return Outcome::Failed(format!(
                "result {k} has shape {:?}, want {:?}",
                g.shape(),
                w.shape()
            ));
        }
        let far = g
            .to_vec()
            .iter()
            .zip(w.to_vec())
            .position(|(a, b)| (a - b).abs() > 1e-5 * (1.0 + b.abs()));
        if let Some(i) = far {
            return Outcome::Failed(format!(
                "result {k} differs from the interpreter's at element {i}: {} against {}",
                g.to_vec()[i],
                w.to_vec()[i]
            ));
        }
    }
    Outcome::Passed
}

/// A one-axis mesh over `n` devices, every input and output split along its first dimension.
fn program(
    n: i64,
    inputs: &[Array],
    outputs: usize,
    body: impl Fn(&[Tensor]) -> Vec<Tensor>,
) -> Result<ClosedJaxpr, String> {
    let mesh = AbstractMesh::auto(&[("x", n)]).map_err(|e| e.to_string())?;
    let spec = PartitionSpec::parse("P('x')").map_err(|e| e.to_string())?;
    let avals: Vec<ShapedArray> = inputs.iter().map(Array::aval).collect();
    shard_map_program(
        &mesh,
        &vec![spec.clone(); inputs.len()],
        &vec![spec; outputs],
        &avals,
        body,
    )
    .map_err(|e| e.to_string())
}

fn floats(values: Vec<f64>) -> Result<Array, String> {
    let len = values.len() as i64;
    Array::new(DType::F32, &[len], values).map_err(|e| e.to_string())
}

fn ints(values: Vec<i64>) -> Result<Array, String> {
    let len = values.len() as i64;
    let values = values.into_iter().map(|v| v as f64).collect();
    Array::new(DType::I32, &[len], values).map_err(|e| e.to_string())
}

/// A ring permutation of `n` devices (device 0 to itself when alone).
fn ring(n: i64) -> Vec<(i64, i64)> {
    (0..n).map(|i| (i, (i + 1) % n)).collect()
}

/// `psum`, a tiled `all_to_all` and a `ppermute` around the ring: what every backend runs.
fn synchronous(n: i64) -> Result<Case, String> {
    let x = floats((0..4 * n * n).map(|v| v as f64 / 4.0).collect())?;
    let perm = ring(n);
    let program = program(n, std::slice::from_ref(&x), 3, |a| {
        vec![
            &a[0].psum(&["x"]) + &a[0],
            a[0].all_to_all("x", 0, 0, true),
            a[0].ppermute("x", &perm),
        ]
    })?;
    Ok(Case::Run {
        program,
        inputs: vec![x],
    })
}

/// A started collective's program: `start` begins it, local work runs while it is pending, and
/// its done's result is combined with that work.
fn started(n: i64, start: impl Fn(&Tensor) -> tessera_ir::trace::Pending) -> Result<Case, String> {
    let x = floats((0..4 * n).map(|v| v as f64 + 0.5).collect())?;
    let program = program(n, std::slice::from_ref(&x), 1, |a| {
        let pending = start(&a[0]);
        let local = a[0].sin();
        vec![&pending.done() * &local]
    })?;
    Ok(Case::Run {
        program,
        inputs: vec![x],
    })
}

/// `psum_start` and its done.
fn psum_started(n: i64) -> Result<Case, String> {
    started(n, |x| x.psum_start(&["x"]))
}

/// A tiled `all_gather_start` and its done (summed back to the block's shape).
fn all_gather_started(n: i64) -> Result<Case, String> {
    let x = floats((0..4 * n).map(|v| v as f64 + 0.5).collect())?;
    let program = program(n, std::slice::from_ref(&x), 1, |a| {
        let pending = a[0].all_gather_start("x", 0, true);
        let local = a[0].sin();
        vec![&pending.done().sum(&[0]).broadcast_to(&[4]) + &local]
    })?;
    Ok(Case::Run {
        program,
        inputs: vec![x],
    })
}

/// `ppermute_start` around the ring and its done.
fn ppermute_started(n: i64) -> Result<Case, String> {
    started(n, |x| x.ppermute_start("x", &ring(n)))
}

/// `ragged_all_to_all`: device `i` sends `1 + (i + j) % 2` rows to device `j`, which writes
/// them after the rows of the devices before `i`.
fn ragged(n: i64) -> Result<Case, String> {
    let size = |i: i64, j: i64| 1 + (i + j) % 2;
    let mut operand = Vec::new();
    let (mut input_offsets, mut send_sizes, mut output_offsets, mut recv_sizes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let mut offset = 0;
        for j in 0..n {
            input_offsets.push(offset);
            send_sizes.push(size(i, j));
            output_offsets.push((0..i).map(|k| size(k, j)).sum::<i64>());
            recv_sizes.push(size(j, i));
            offset += size(i, j);
        }
        operand.extend((0..2 * n).map(|k| (100 * i + k + 1) as f64));
    }
    let inputs = vec![
        floats(operand)?,
        floats(vec![0.0; (2 * n * n) as usize])?,
        ints(input_offsets)?,
        ints(send_sizes)?,
        ints(output_offsets)?,
        ints(recv_sizes)?,
    ];
    let program = program(n, &inputs, 1, |a| {
        vec![a[0].ragged_all_to_all(&a[1], &a[2], &a[3], &a[4], &a[5], "x")]
    })?;
    Ok(Case::Run { program, inputs })
}

/// A `psend` along the chain of devices (`i` to `i + 1`: XLA refuses cyclic send/recv pairs)
/// and its `precv`; the first device receives zeros. One device alone has no such pair (XLA
/// refuses a send to itself, as cyclic, and a send without pairs; JAX's `psend` fails alike).
fn send_receive(n: i64) -> Result<Case, String> {
    if n < 2 {
        return Ok(Case::Skip(
            "needs 2 devices: XLA refuses a send to the sending device and a send without pairs"
                .to_owned(),
        ));
    }
    let x = floats((0..4 * n).map(|v| v as f64).collect())?;
    let perm: Vec<(i64, i64)> = (0..n - 1).map(|i| (i, i + 1)).collect();
    let program = program(n, std::slice::from_ref(&x), 1, |a| {
        vec![precv(a[0].psend("x", &perm), a[0].aval(), "x", &perm)]
    })?;
    Ok(Case::Run {
        program,
        inputs: vec![x],
    })
}
