//! The unpipelined reference every pipelined step is checked against: the same step program
//! under `jit`, its micro-batch loop a `while` loop. It carries its own parameters, so each
//! step's loss also checks the previous steps' updates, and restarts from the pipelined run's
//! parameters every [`RESTART_EVERY`] steps: the two runs round differently (another order of
//! sums), and over hundreds of steps that difference grows past any fixed tolerance. A run with replicated parameters runs it
//! on one device; a run with explicit layouts (`--mesh`, `--fsdp`) runs the same sharded step on
//! one group-shaped mesh (the `data` × `model` mesh of group 0's devices), with the pipelined
//! step's argument and result specs as its in and out shardings, so XLA partitions both alike.

use anyhow::Context;
use tessera::jit::{Compiled, Jit, to_host};
use tessera_ir::{Array, ClosedJaxpr, DType};
use tessera_pjrt::{Array as DeviceArray, Client, LoadedExecutable};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

use super::step;

/// How often (in steps) the reference restarts from the pipelined run's parameters.
pub const RESTART_EVERY: u64 = 10;

/// The largest relative difference between a pipelined loss and its reference's that passes,
/// for a model computing in `compute` : 1e-4 in float32; 1e-3 in bfloat16 or float16, whose
/// rounding (2^-8, 2^-11) the two runs' different orders of sums meet sooner.
pub fn tolerance(compute: DType) -> f64 {
    match compute {
        DType::BF16 | DType::F16 => 1e-3,
        _ => 1e-4,
    }
}

/// The relative difference of a pipelined loss from its reference's.
pub fn relative_difference(loss: f64, reference: f64) -> f64 {
    (loss - reference).abs() / reference.abs().max(1e-12)
}

/// Refuses a step whose pipelined loss differs from the reference's by more than `tolerance`,
/// saying which step and by how much.
pub fn check_step(step: u64, loss: f64, reference: f64, tolerance: f64) -> anyhow::Result<()> {
    if !loss.is_finite() && !reference.is_finite() {
        return Ok(()); // both diverged (--allow-nonfinite trains on)
    }
    let diff = relative_difference(loss, reference);
    if diff > tolerance || diff.is_nan() {
        anyhow::bail!(
            "step {step}: the pipelined loss {loss:.8} differs from the unpipelined reference's \
             {reference:.8} by {diff:.2e} (relative), more than {tolerance:.0e}; both started \
             from the same parameters at most {RESTART_EVERY} steps before, so the pipelined \
             step computes something else. Rerun with --no-reference to train without the check"
        );
    }
    Ok(())
}

/// The reference step and the values it carries from step to step.
pub enum Reference {
    /// On one device, carrying host arrays.
    OneDevice {
        /// The compiled step.
        exe: LoadedExecutable,
        /// Parameters and optimizer state.
        carried: Vec<Array>,
    },
    /// Sharded over a group-shaped mesh, carrying device arrays.
    Sharded {
        /// The compiled step.
        compiled: Box<Compiled>,
        /// Each argument's sharding.
        shardings: Vec<NamedSharding>,
        /// Parameters and optimizer state, laid out by their shardings.
        carried: Vec<DeviceArray>,
    },
}

impl Reference {
    /// The step on one device, starting from `carried`.
    pub fn one_device(
        client: &Client,
        program: &ClosedJaxpr,
        carried: &[Array],
    ) -> anyhow::Result<Reference> {
        Ok(Reference::OneDevice {
            exe: tessera::jit::compile(client, program, 0)?,
            carried: carried.to_vec(),
        })
    }

    /// The step sharded over `group` by the specs of its arguments and results, starting from
    /// `carried`.
    pub fn sharded(
        client: &Client,
        program: &ClosedJaxpr,
        group: &Mesh,
        (in_specs, out_specs): (&[PartitionSpec], &[PartitionSpec]),
        carried: &[Array],
    ) -> anyhow::Result<Reference> {
        let named = |specs: &[PartitionSpec]| {
            specs
                .iter()
                .map(|s| NamedSharding::new(group, s.clone()))
                .collect::<Result<Vec<_>, _>>()
        };
        let shardings = named(in_specs)?;
        let jit = Jit::new(program.clone(), shardings.clone(), named(out_specs)?)?;
        let compiled = jit.lower()?.compile(client)?;
        let carried = carried
            .iter()
            .zip(&shardings)
            .map(|(a, s)| Ok(DeviceArray::device_put(client, &to_host(a)?, s)?))
            .collect::<anyhow::Result<_>>()?;
        Ok(Reference::Sharded {
            compiled: Box::new(compiled),
            shardings,
            carried,
        })
    }

    /// Restarts the reference from `carried` (the pipelined run's parameters and optimizer
    /// state), so that float rounding does not accumulate between the two runs.
    pub fn restart(&mut self, client: &Client, now: &[Array]) -> anyhow::Result<()> {
        match self {
            Reference::OneDevice { carried, .. } => *carried = now.to_vec(),
            Reference::Sharded {
                shardings, carried, ..
            } => {
                *carried = now
                    .iter()
                    .zip(shardings.iter())
                    .map(|(a, s)| Ok(DeviceArray::device_put(client, &to_host(a)?, s)?))
                    .collect::<anyhow::Result<_>>()?;
            }
        }
        Ok(())
    }

    /// Runs one step with learning rate `lr` on `data` and returns its mean loss.
    pub fn step(
        &mut self,
        client: &Client,
        program: &ClosedJaxpr,
        lr: f64,
        data: &[Array],
    ) -> anyhow::Result<f64> {
        match self {
            Reference::OneDevice { exe, carried } => {
                let args = step::step_args(carried, lr, data)?;
                let (loss, next) = step::reference_step(client, exe, program, &args)?;
                *carried = next;
                Ok(loss)
            }
            Reference::Sharded {
                compiled,
                shardings,
                carried,
            } => {
                let rest = step::step_args(&[], lr, data)?;
                let puts = rest
                    .iter()
                    .zip(&shardings[carried.len()..])
                    .map(|(h, s)| Ok(DeviceArray::device_put(client, h, s)?))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let args: Vec<&DeviceArray> = carried.iter().chain(&puts).collect();
                let mut outs = compiled.call(&args)?;
                let loss = outs.pop().context("the step returned nothing")?;
                let loss = tessera::jit::from_host(&loss.to_host()?, DType::F32)?;
                *carried = outs;
                Ok(loss.to_vec()[0])
            }
        }
    }
}
