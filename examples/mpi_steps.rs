//! Six `mpmd_jit` step shapes with one process per MPMD group (issue 32):
//! `cargo build -p tessera-examples --example mpi_steps`, then
//! `mpirun -n 2 target/debug/examples/mpi_steps` (as root: `--allow-run-as-root`), or alone in
//! one process with 8 devices.
//!
//! - `two loops`: a training loop, SGD, then a forward-only eval loop on the updated weights,
//!   two pipelines one after the other in each step.
//! - `two sources`: two accumulation loops over two data sources whose gradients the update
//!   sums.
//! - `before`: code before the loop normalizes the batch (sliced by the loop, read by stage 0)
//!   and computes a target shift from the targets and the last weight (read by stage 1); it runs
//!   on the devices of one group (the first stage's with host arguments; from the second call,
//!   the last weight's group, to which the batch, left on group 0, is sent) and its results go
//!   to the ranks whose stages read them.
//! - `computed`: the loop differentiates values computed before it (`w0 * mask`, `w1 / 2`), the
//!   update applying the chain rule by hand.
//! - `mixed`: an update mixing large values of both groups (each weight's update reads both
//!   gradients; a result multiplies both weights): under MPI, group 1's values are sent to rank
//!   0, which runs it, and `w1'` is sent back to rank 1.
//! - `stacked`: gradients kept per micro-batch: `w0`'s stacked by `Concat(0)` (on group 0), and
//!   the gradient of a value differing per micro-batch (`w1` scaled by the micro-batch's mean
//!   input, read in stage 1) stacked by `Concat(1)`.
//!
//! Each step is called twice, the second call on the weights the first left on their groups.
//! Every result this process holds is checked against the interpreter (1e-6, relative above 1)
//! and printed as `rank R: SHAPE call N result K: BITS` (the f32 bits in hex; for more than 64
//! values, their count and a hash of the bits), so that a test can
//! compare a job's results with the one-process run's bit for bit.
//!
//! With `--mismatch` (under `mpirun -n 2`), rank 1 calls `mixed` differently from rank 0 (a batch
//! of another shape, then targets from the host where rank 0 passes them on group 0): both ranks
//! are refused with the same error, then a call made alike runs.

use tessera::ir::interp::eval_closed;
use tessera::ir::trace::{Tensor, call_closed, trace, treduce, value_and_grad_call};
use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera::mpmd::mpi_job::MpiJob;
use tessera::mpmd::processes::Processes;
use tessera::mpmd::{
    MpmdArray, MpmdJitOptions, MpmdMesh, MpmdSharding, StepArg, StepResult, mpmd_jit_with,
};
use tessera::pjrt::{Array as DeviceArray, Client};
use tessera::sharding::{Mesh, NamedSharding, PartitionSpec};

const WIDTH: i64 = 8;
const MBS: i64 = 4;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `x, w0, w1, y[, c] -> mean((tanh(tanh(x w0) w1) - y [+ c])^2)`, the second layer in stage 1.
fn loss(shifted: bool) -> anyhow::Result<ClosedJaxpr> {
    loss_of(WIDTH, WIDTH, shifted)
}

/// [`loss`] on `rows` rows of `width` features (weights `width` x `width`).
fn loss_of(rows: i64, width: i64, shifted: bool) -> anyhow::Result<ClosedJaxpr> {
    let (rows, w) = (f32(&[rows, width]), f32(&[width, width]));
    let mut avals = vec![rows.clone(), w.clone(), w, rows.clone()];
    if shifted {
        avals.push(rows);
    }
    Ok(trace(&avals, |a| {
        let h = a[0].matmul(&a[1]).tanh();
        let h = h.enter_stage(1).matmul(&a[2]).tanh();
        let mut err = &h - &a[3];
        if shifted {
            err = &err + &a[4];
        }
        vec![err.integer_pow(2).mean(&[0, 1])]
    })?)
}

fn batch() -> ShapedArray {
    f32(&[MBS, WIDTH, WIDTH])
}

/// `(w0, w1, lr, xs, ys, ex, ey) -> (w0', w1', train loss, eval loss)`.
fn two_loops() -> anyhow::Result<ClosedJaxpr> {
    let loss = loss(false)?;
    let w = f32(&[WIDTH, WIDTH]);
    let avals = [w.clone(), w, f32(&[]), batch(), batch(), batch(), batch()];
    Ok(trace(&avals, |a| {
        let train = treduce(&[&a[0], &a[1]], &[&a[3], &a[4]], 0, "1f1b", &[], |w, mb| {
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        });
        let w0 = &a[0] - &(&a[2] * &train[1]);
        let w1 = &a[1] - &(&a[2] * &train[2]);
        let eval = treduce(&[&w0, &w1], &[&a[5], &a[6]], 0, "1f1b", &[], |w, mb| {
            call_closed(&loss, &[&mb[0], &w[0], &w[1], &mb[1]])
        });
        vec![w0, w1, train[0].mean(&[0]), eval[0].mean(&[0])]
    })?)
}

/// `(w0, w1, lr, xs, ys, xs2, ys2) -> (w0', w1', losses, losses2)`: two accumulation loops
/// over two data sources, the update summing their gradients (left on their groups between the
/// loops).
fn two_sources() -> anyhow::Result<ClosedJaxpr> {
    let loss = loss(false)?;
    let w = f32(&[WIDTH, WIDTH]);
    let avals = [w.clone(), w, f32(&[]), batch(), batch(), batch(), batch()];
    Ok(trace(&avals, |a| {
        let train = |xs: &Tensor, ys: &Tensor| {
            treduce(&[&a[0], &a[1]], &[xs, ys], 0, "1f1b", &[], |w, mb| {
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
            })
        };
        let (one, two) = (train(&a[3], &a[4]), train(&a[5], &a[6]));
        let step = |k: usize| &a[k] - &(&a[2] * &(&one[1 + k] + &two[1 + k]));
        vec![step(0), step(1), one[0].clone(), two[0].clone()]
    })?)
}

/// `(w0, w1, lr, xs, ys) -> (w0', w1', mean loss)`, the batch normalized and a shift computed
/// from the targets and `w1` before the loop.
fn before() -> anyhow::Result<ClosedJaxpr> {
    let loss = loss(true)?;
    let w = f32(&[WIDTH, WIDTH]);
    let avals = [w.clone(), w, f32(&[]), batch(), batch()];
    Ok(trace(&avals, |a| {
        let (xs, ys) = (&a[3], &a[4]);
        let largest = xs.abs().max(&[0, 1, 2]);
        let scale = &largest + &largest.full_like_scalar(1.0);
        let normalized = &(xs - &xs.mean(&[0, 1, 2])) / &scale;
        let shift = &ys.mean(&[0]) + &(&a[1] / 10.0);
        let outs = treduce(
            &[&a[0], &a[1], &shift],
            &[&normalized, ys],
            0,
            "1f1b",
            &[],
            |inv, mb| {
                let args = [&mb[0], &inv[0], &inv[1], &mb[1], &inv[2]];
                value_and_grad_call(&loss, &[1, 2], &args)
            },
        );
        let step = |k: usize| &a[k] - &(&a[2] * &(&outs[1 + k] / MBS as f64));
        vec![step(0), step(1), outs[0].mean(&[0])]
    })?)
}

/// `(w0, w1, mask, lr, xs, ys) -> (w0', w1', mean loss, g0, g1)`, differentiating
/// `v0 = w0 * mask` and `v1 = w1 / 2`.
fn computed() -> anyhow::Result<ClosedJaxpr> {
    let loss = loss(false)?;
    let w = f32(&[WIDTH, WIDTH]);
    let avals = [w.clone(), w.clone(), w, f32(&[]), batch(), batch()];
    Ok(trace(&avals, |a| {
        let (w0, w1, mask, lr) = (&a[0], &a[1], &a[2], &a[3]);
        let (v0, v1) = (w0 * mask, w1 / 2.0);
        let outs = treduce(&[&v0, &v1], &[&a[4], &a[5]], 0, "1f1b", &[], |w, mb| {
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        });
        let (g0, g1): (&Tensor, &Tensor) = (&outs[1], &outs[2]);
        let d0 = &(g0 * mask) / MBS as f64;
        let d1 = g1 / (2.0 * MBS as f64);
        vec![
            w0 - &(lr * &d0),
            w1 - &(lr * &d1),
            outs[0].mean(&[0]),
            g0.clone(),
            g1.clone(),
        ]
    })?)
}

/// The weights' width in `mixed`: over the 4096 elements of a small value, so that the update mixes
/// large values of both groups (small ones would be cut and crossed on the host).
const WIDE: i64 = 72;

/// `(w0, w1, lr, xs, ys) -> (w0', w1', mean loss, w0 * w1)`, weights `WIDE` x `WIDE`: each
/// weight's update reads both groups' gradients, and `w0 * w1` both weights, so under MPI the
/// update's piece on group 0 receives group 1's gradient and weight from its rank and sends
/// `w1'` back there.
fn mixed() -> anyhow::Result<ClosedJaxpr> {
    let loss = loss_of(4, WIDE, false)?;
    let w = f32(&[WIDE, WIDE]);
    let data = f32(&[MBS, 4, WIDE]);
    let avals = [w.clone(), w, f32(&[]), data.clone(), data];
    Ok(trace(&avals, |a| {
        let outs = treduce(&[&a[0], &a[1]], &[&a[3], &a[4]], 0, "1f1b", &[], |w, mb| {
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        });
        let (g0, g1) = (&outs[1], &outs[2]);
        let w0 = &a[0] - &(&a[2] * &(g0 + &(g1 * 0.5)));
        let w1 = &a[1] - &(&a[2] * &(g1 + &(g0 * 0.5)));
        vec![w0, w1, outs[0].mean(&[0]), &a[0] * &a[1]]
    })?)
}

/// `(w0, w1, lr, xs, ys) -> (w0', w1', mean loss, g0, g1)`: `g0` stacks `w0`'s gradient of each
/// micro-batch (`Concat(0)`), `g1` the gradient of `w1 * mean(x)` of each (`Concat(1)`); the
/// update sums them over the micro-batches.
fn stacked() -> anyhow::Result<ClosedJaxpr> {
    let loss = loss(false)?;
    let w = f32(&[WIDTH, WIDTH]);
    let avals = [w.clone(), w, f32(&[]), batch(), batch()];
    let ops = [
        tessera::ir::prim::ReduceOp::Concat(0),
        tessera::ir::prim::ReduceOp::Concat(0),
        tessera::ir::prim::ReduceOp::Concat(1),
    ];
    Ok(trace(&avals, |a| {
        let outs = treduce(
            &[&a[0], &a[1]],
            &[&a[3], &a[4]],
            0,
            "1f1b",
            &ops,
            |w, mb| {
                let scaled = &w[1] * &mb[0].mean(&[0, 1]);
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &scaled, &mb[1]])
            },
        );
        let (g0, g1) = (&outs[1], &outs[2]);
        vec![
            &a[0] - &(&a[2] * &(&g0.sum(&[0]) / MBS as f64)),
            &a[1] - &(&a[2] * &(&g1.sum(&[1]) / MBS as f64)),
            outs[0].mean(&[0]),
            g0.clone(),
            g1.clone(),
        ]
    })?)
}

fn values(shape: &[i64], seed: f64, scale: f64) -> anyhow::Result<Array> {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| (((i as f64 + 1.0) * 0.618 + seed).sin() * 2.0 + 0.5) * scale);
    Ok(Array::new(DType::F32, shape, data.collect())?)
}

/// Where the steps run: one process with 8 devices, or (under `mpirun -n 2`) this rank's group
/// on 4 devices of its own.
struct Place {
    client: Client,
    mesh: MpmdMesh,
    processes: Option<std::sync::Arc<dyn Processes>>,
    rank: usize,
    job: Option<MpiJob>,
}

fn place() -> anyhow::Result<Place> {
    let shape = Mesh::auto(&[("stage", 2), ("data", 4)])?;
    let Some(job) = MpiJob::init()? else {
        return Ok(Place {
            client: Client::cpu(8)?,
            mesh: MpmdMesh::new(shape, "stage")?,
            processes: None,
            rank: 0,
            job: None,
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
        job: Some(job),
    })
}

/// `host` on `group`'s devices (no data here when another rank runs the group).
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
            MpmdArray::remote(&host.shape(), tessera::pjrt::ElementType::F32, sharding)
        }
    };
    Ok(StepArg::Mpmd(Box::new(array)))
}

/// Runs `step` twice (the second call on the weights, its first two results, where the first
/// left them; `batch_on_group0` puts argument `batch_on_group0` on group 0 for the second call),
/// checking and printing the results held here.
fn run(
    at: &Place,
    name: &str,
    step: &ClosedJaxpr,
    args: Vec<Array>,
    batch_on_group0: Option<usize>,
) -> anyhow::Result<()> {
    let options = MpmdJitOptions {
        processes: at.processes.clone(),
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&at.client, &at.mesh, step, &options)?;
    let mut want_args = args;
    let mut call: Vec<StepArg> = want_args.iter().cloned().map(StepArg::Host).collect();
    for n in 1..=2 {
        let want = eval_closed(step, &want_args)?;
        let outputs = jit.call_mpmd(&call)?.outputs;
        for (k, (got, want)) in outputs.iter().zip(&want).enumerate() {
            if matches!(got, StepResult::Mpmd(m) if !m.is_partially_addressable()) {
                continue; // another rank's
            }
            let got = got.to_host()?;
            for (a, b) in got.to_vec().iter().zip(want.to_vec()) {
                anyhow::ensure!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{name}, call {n}, result {k}: {a} vs the interpreter's {b}"
                );
            }
            println!(
                "rank {}: {name} call {n} result {k}: {}",
                at.rank,
                bits(&got.to_vec())
            );
        }
        want_args[..2].clone_from_slice(&want[..2]);
        for (w, out) in outputs.into_iter().take(2).enumerate() {
            call[w] = out.into_arg();
        }
        if let Some(i) = batch_on_group0 {
            call[i] = on_group(at, 0, &want_args[i])?;
        }
    }
    if let Some(before) = jit.before_loop_runs() {
        println!(
            "rank {}: {name} ran its code before the loop {} times on the groups (the last on group {:?}), {} on the host",
            at.rank, before.on_groups, before.last_group, before.on_host
        );
    }
    Ok(())
}

/// `--mismatch`: rank 1 calls `mixed` with its batch of another shape, then with its targets
/// from the host where rank 0 passes them on group 0: every rank gets the same error naming rank
/// 1 and the argument (printed as `rank R: refused: ERROR`), then a call made alike runs.
fn mismatch(at: &Place) -> anyhow::Result<()> {
    let step = mixed()?;
    let options = MpmdJitOptions {
        processes: at.processes.clone(),
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&at.client, &at.mesh, &step, &options)?;
    let args = mixed_args()?;
    let host: Vec<StepArg> = args.iter().cloned().map(StepArg::Host).collect();
    let mut other_shape = host.clone();
    if at.rank == 1 {
        other_shape[3] = StepArg::Host(values(&[MBS, 2, WIDE], 10.0, 0.5)?);
    }
    let mut other_place = host.clone();
    if at.rank == 0 {
        other_place[4] = on_group(at, 0, &args[4])?;
    }
    for call in [other_shape, other_place] {
        match jit.call_mpmd(&call) {
            Ok(_) => anyhow::bail!("rank {}: a call made differently ran", at.rank),
            Err(e) => println!("rank {}: refused: {e}", at.rank),
        }
    }
    let run = jit.call_mpmd(&host)?;
    let loss = run.outputs[2].to_host()?.to_vec();
    println!(
        "rank {}: the call after the refused ones ran (loss {loss:?})",
        at.rank
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let at = place()?;
    if std::env::args().any(|a| a == "--mismatch") {
        return mismatch(&at);
    }
    let weights = |seed: f64| values(&[WIDTH, WIDTH], seed, 0.2);
    let data = |seed: f64| values(&[MBS, WIDTH, WIDTH], seed, 0.5);
    let lr = Array::scalar(DType::F32, 0.1);
    let mut common = vec![weights(0.0)?, weights(1.0)?, lr];
    let loops = [data(10.0)?, data(20.0)?, data(30.0)?, data(40.0)?];
    run(
        &at,
        "two loops",
        &two_loops()?,
        [&common[..], &loops].concat(),
        None,
    )?;
    run(
        &at,
        "two sources",
        &two_sources()?,
        [&common[..], &loops].concat(),
        None,
    )?;
    let args = [&common[..], &[data(10.0)?, data(20.0)?]].concat();
    run(&at, "before", &before()?, args, Some(3))?;
    common.insert(2, values(&[WIDTH, WIDTH], 3.0, 0.5)?);
    let args = [&common[..], &[data(10.0)?, data(20.0)?]].concat();
    run(&at, "computed", &computed()?, args, None)?;
    run(&at, "mixed", &mixed()?, mixed_args()?, None)?;
    let args = vec![
        weights(0.0)?,
        weights(1.0)?,
        Array::scalar(DType::F32, 0.1),
        data(10.0)?,
        data(20.0)?,
    ];
    run(&at, "stacked", &stacked()?, args, None)?;
    println!("rank {}: every step equals the interpreter", at.rank);
    gather(&at)
}

/// Under MPI, each rank's bytes (of a length that differs per rank) gathered on rank 0 whole and
/// in pieces of 5 bytes (several rounds, a shorter rank done before the others) arrive as sent.
fn gather(at: &Place) -> anyhow::Result<()> {
    let Some(job) = &at.job else {
        return Ok(());
    };
    let bytes = |r: usize| -> Vec<u8> { (0..11 * r + 3).map(|i| (i * 7 + r) as u8).collect() };
    let whole = job.gather_to_root(&bytes(at.rank))?;
    let pieces = job.gather_to_root_in_pieces(&bytes(at.rank), 5)?;
    if let (Some(whole), Some(pieces)) = (whole, pieces) {
        let sent: Vec<Vec<u8>> = (0..job.size()).map(bytes).collect();
        anyhow::ensure!(whole == sent, "the whole gather differs: {whole:?}");
        anyhow::ensure!(pieces == sent, "the gather in pieces differs: {pieces:?}");
        println!(
            "rank 0: gathered {} ranks' bytes whole and in pieces of 5, as each rank sent them",
            sent.len()
        );
    }
    Ok(())
}

/// The f32 bits of `values` in hex; for more than 64 values, their count and a 64-bit FNV-1a
/// hash of the bits (whole lines of thousands of values from two ranks would interleave in
/// `mpirun`'s output).
fn bits(values: &[f64]) -> String {
    let bits = values.iter().map(|&v| (v as f32).to_bits());
    if values.len() <= 64 {
        return bits
            .map(|b| format!("{b:08x}"))
            .collect::<Vec<_>>()
            .join(" ");
    }
    let hash = bits
        .flat_map(u32::to_le_bytes)
        .fold(0xcbf2_9ce4_8422_2325u64, |h, byte| {
            (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("{} values, FNV-1a {hash:016x}", values.len())
}

/// The arguments of [`mixed`].
fn mixed_args() -> anyhow::Result<Vec<Array>> {
    let weights = |seed: f64| values(&[WIDE, WIDE], seed, 0.05);
    let data = |seed: f64| values(&[MBS, 4, WIDE], seed, 0.5);
    let lr = Array::scalar(DType::F32, 0.1);
    Ok(vec![
        weights(0.0)?,
        weights(1.0)?,
        lr,
        data(10.0)?,
        data(20.0)?,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn four_step_shapes_equal_the_interpreter_in_one_process() -> anyhow::Result<()> {
        super::main()
    }
}
