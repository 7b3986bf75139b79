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

/// A program to check and its inputs.
struct Case {
    program: ClosedJaxpr,
    inputs: Vec<Array>,
}

/// Runs every collective program on all of `client`'s devices (at least 1) and compares each
/// result with the interpreter's.
pub fn collectives(client: &Client) -> Result<Vec<Check>, String> {
    let devices = client.devices().map_err(|e| e.to_string())?.len() as i64;
    if devices == 0 {
        return Err("the plugin has no devices".to_owned());
    }
    let cases: [(&'static str, fn(i64) -> Result<Case, String>); 4] = [
        ("psum, all_to_all, ppermute", synchronous),
        ("psum_start, all_gather_start, ppermute_start", started),
        ("ragged_all_to_all", ragged),
        ("psend/precv", send_receive),
    ];
    Ok(cases
        .into_iter()
        .map(|(name, build)| Check {
            name,
            outcome: match build(devices) {
                Ok(case) => run(client, &case.program, &case.inputs),
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
        Err(e) if format!("{e:?}").contains("Unimplemented") => {
            return Outcome::Unsupported(e.to_string());
        }
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
    Ok(Case {
        program,
        inputs: vec![x],
    })
}

/// `psum_start`, `all_gather_start` and `ppermute_start`, with local work between each start
/// and its done.
fn started(n: i64) -> Result<Case, String> {
    let x = floats((0..4 * n).map(|v| v as f64 + 0.5).collect())?;
    let perm = ring(n);
    let program = program(n, std::slice::from_ref(&x), 2, |a| {
        let summed = a[0].psum_start(&["x"]);
        let gathered = a[0].all_gather_start("x", 0, true);
        let permuted = a[0].ppermute_start("x", &perm);
        let local = a[0].sin();
        let gathered = gathered.done().sum(&[0]).broadcast_to(&[4]);
        vec![&(&summed.done() * &local) + &gathered, permuted.done()]
    })?;
    Ok(Case {
        program,
        inputs: vec![x],
    })
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
    Ok(Case { program, inputs })
}

/// A `psend` around the ring and its `precv`.
fn send_receive(n: i64) -> Result<Case, String> {
    let x = floats((0..4 * n).map(|v| v as f64).collect())?;
    let perm = ring(n);
    let program = program(n, std::slice::from_ref(&x), 1, |a| {
        vec![precv(a[0].psend("x", &perm), a[0].aval(), "x", &perm)]
    })?;
    Ok(Case {
        program,
        inputs: vec![x],
    })
}
