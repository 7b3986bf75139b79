//! A pipelined step that reports metrics and indexes its own micro-batches:
//! `cargo run -p tessera-examples --example pipeline_metrics`.
//!
//! - The loss returns auxiliary results next to the loss (`value_and_grad_with_aux_call`, JAX's
//!   `has_aux=True`): the largest absolute error of each micro-batch, and how many outputs have
//!   the target's sign, as an `i32`.
//! - The loop is a `treduce_i`: its body gets the micro-batch index and takes that micro-batch
//!   from the whole batch.
//! - The batch is loaded onto the devices once: the inputs onto the first group's, the targets
//!   onto the second's (the groups of the stages reading them), and the step reads them there.
//!
//! `mpmd_jit` pipelines all of it under 1F1B over 2 MPMD groups, in one process, or with one
//! process per group: `cargo build -p tessera-examples --example pipeline_metrics`, then
//! `mpirun -n 2 target/debug/examples/pipeline_metrics` (as root: `--allow-run-as-root`); the
//! metrics reach every rank from the last stage's. The step returns the losses of
//! the micro-batches stacked, the largest error over them (`Max`) and the summed count (`Add`).
//! The example checks each step against the same program run sequentially by the interpreter.

use tessera::ir::interp::eval_closed;
use tessera::ir::prim::ReduceOp;
use tessera::ir::trace::{Tensor, trace, treduce_i, value_and_grad_with_aux_call};
use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera::mpmd::mpi_job::MpiJob;
use tessera::mpmd::processes::Processes;
use tessera::mpmd::{
    MpmdArray, MpmdJitOptions, MpmdMesh, MpmdSharding, StepArg, StepResult, mpmd_jit_with,
};
use tessera::pjrt::{Array as DeviceArray, Client};
use tessera::sharding::{Mesh, NamedSharding, PartitionSpec};

const MICRO_BATCHES: i64 = 4;
const ROWS: i64 = 4;
const WIDTH: i64 = 8;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn values(shape: &[i64], seed: f64, scale: f64) -> anyhow::Result<Array> {
    let n: i64 = shape.iter().product();
    let data = (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * scale)
        .collect();
    Ok(Array::new(DType::F32, shape, data)?)
}

/// One micro-batch: `x, w0, w1, y -> (loss, largest |error|, outputs with the target's sign)`,
/// the second layer in stage 1.
fn loss() -> anyhow::Result<ClosedJaxpr> {
    let (rows, weights) = (f32(&[ROWS, WIDTH]), f32(&[WIDTH, WIDTH]));
    Ok(trace(
        &[rows.clone(), weights.clone(), weights, rows],
        |a| {
            let h = a[0].matmul(&a[1]).tanh().enter_stage(1);
            let out = h.matmul(&a[2]).tanh();
            let err = &out - &a[3];
            let agree = (&out * &a[3]).ge(&out.full_like_scalar(0.0));
            vec![
                err.integer_pow(2).mean(&[0, 1]),
                err.abs().max(&[0, 1]),
                agree.astype(DType::I32).sum(&[0, 1]),
            ]
        },
    )?)
}

/// `(w0, w1, lr, xs, ys) -> (w0', w1', losses, largest error, agreeing outputs)`.
fn step(loss: &ClosedJaxpr) -> anyhow::Result<ClosedJaxpr> {
    let batch = f32(&[MICRO_BATCHES, ROWS, WIDTH]);
    let weights = f32(&[WIDTH, WIDTH]);
    let avals = [weights.clone(), weights, f32(&[]), batch.clone(), batch];
    let ops = [
        ReduceOp::Concat(0),
        ReduceOp::Max,
        ReduceOp::Add,
        ReduceOp::Add,
        ReduceOp::Add,
    ];
    Ok(trace(&avals, |a| {
        let invariants = [&a[0], &a[1], &a[3], &a[4]];
        let outs = treduce_i(&a[0], &invariants, MICRO_BATCHES, "1f1b", &ops, |inv, i| {
            let (x, y): (Tensor, Tensor) = (inv[2].take(i, 0), inv[3].take(i, 0));
            value_and_grad_with_aux_call(loss, &[1, 2], &[&x, &inv[0], &inv[1], &y])
        });
        let scale = &a[2] / MICRO_BATCHES as f64;
        vec![
            &a[0] - &(&scale * &outs[3]),
            &a[1] - &(&scale * &outs[4]),
            outs[0].clone(),
            outs[1].clone(),
            outs[2].clone(),
        ]
    })?)
}

/// Where the step runs: one process with 8 devices, or (under `mpirun -n 2`) this rank's group
/// on 4 devices of its own.
struct Place {
    client: Client,
    mesh: MpmdMesh,
    processes: Option<std::sync::Arc<dyn Processes>>,
    rank: usize,
    _job: Option<MpiJob>,
}

fn place() -> anyhow::Result<Place> {
    let shape = Mesh::auto(&[("stage", 2), ("data", 4)])?;
    let Some(job) = MpiJob::init()? else {
        let (client, mesh) = (Client::cpu(8)?, MpmdMesh::new(shape, "stage")?);
        return Ok(Place {
            client,
            mesh,
            processes: None,
            rank: 0,
            _job: None,
        });
    };
    anyhow::ensure!(job.size() == 2, "run with mpirun -n 2 (one rank per group)");
    let client = Client::cpu(4)?;
    let mesh = MpmdMesh::for_process(&shape, "stage", job.rank())?;
    let processes = Some(job.processes(&client, &mesh)?);
    let rank = job.rank();
    Ok(Place {
        client,
        mesh,
        processes,
        rank,
        _job: Some(job),
    })
}

/// `host` on `group`'s devices, its rows split over `data`: an array held by that group (with no
/// data here when another rank runs the group).
fn on_group(at: &Place, group: usize, host: &Array) -> anyhow::Result<StepArg> {
    let spec = PartitionSpec::parse("P(None, 'data')")?;
    let local = at
        .processes
        .as_ref()
        .is_none_or(|p| p.local_groups().contains(&group));
    let array = match local {
        true => {
            let sharding = NamedSharding::new(at.mesh.group(group)?, spec)?;
            let array = DeviceArray::device_put(&at.client, host, &sharding)?;
            MpmdArray::on_its_group(&at.mesh, array)?
        }
        false => {
            let sharding = MpmdSharding::new(&at.mesh, [group], &spec)?;
            let dims = host.shape();
            MpmdArray::remote(&dims, tessera::pjrt::ElementType::F32, sharding)
        }
    };
    Ok(StepArg::Mpmd(Box::new(array)))
}

/// Checks the results held here against the interpreter's.
fn check(n: usize, outputs: &[StepResult], want: &[Array]) -> anyhow::Result<()> {
    for (k, (got, want)) in outputs.iter().zip(want).enumerate() {
        if matches!(got, StepResult::Mpmd(m) if !m.is_partially_addressable()) {
            continue; // another rank's weight
        }
        let got = got.to_host()?;
        let close = got
            .to_vec()
            .iter()
            .zip(want.to_vec())
            .all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0));
        anyhow::ensure!(
            close,
            "step {n}, result {k}: {got:?} vs the interpreter's {want:?}"
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let step = step(&loss()?)?;
    let at = place()?;
    let options = MpmdJitOptions {
        processes: at.processes.clone(),
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&at.client, &at.mesh, &step, &options)?;
    let shape = [MICRO_BATCHES, ROWS, WIDTH];
    let mut want_args = vec![
        values(&[WIDTH, WIDTH], 0.5, 0.5)?,
        values(&[WIDTH, WIDTH], 1.5, 0.5)?,
        Array::scalar(DType::F32, 0.5),
        values(&shape, 3.0, 1.0)?,
        values(&shape, 7.0, 0.8)?,
    ];
    // The inputs go onto group 0's devices once and the targets onto group 1's: the groups of
    // the stages reading them.
    let mut call: Vec<StepArg> = want_args[..3]
        .iter()
        .map(|a| Ok(StepArg::Host(a.clone())))
        .collect::<anyhow::Result<_>>()?;
    call.push(on_group(&at, 0, &want_args[3])?);
    call.push(on_group(&at, 1, &want_args[4])?);
    for n in 1..=5 {
        let outputs = jit.call_mpmd(&call)?.outputs;
        let want = eval_closed(&step, &want_args)?;
        check(n, &outputs, &want)?;
        let losses = outputs[2].to_host()?.to_vec();
        let worst = outputs[3].to_host()?.to_vec()[0];
        let agree = outputs[4].to_host()?.to_vec()[0];
        let total = MICRO_BATCHES * ROWS * WIDTH;
        println!(
            "rank {}: step {n}  losses {losses:.4?}  largest error {worst:.4}  sign agrees {agree}/{total}",
            at.rank
        );
        // The next step reads the weights where the update left them, on their groups; the
        // interpreter goes on from its own.
        want_args[..2].clone_from_slice(&want[..2]);
        for (w, out) in outputs.into_iter().take(2).enumerate() {
            call[w] = out.into_arg();
        }
    }
    println!(
        "rank {}: every step equals the sequential loop run by the interpreter",
        at.rank
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pipelined_step_with_metrics_and_an_indexed_loop_equals_the_sequential_loop()
    -> anyhow::Result<()> {
        super::main()
    }
}
