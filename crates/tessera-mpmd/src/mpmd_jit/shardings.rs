//! The layouts of a step's arguments and results inside their groups, from
//! [`super::MpmdJitOptions::in_specs`] and `out_specs`: each spec checked against the group's
//! mesh ([`check_spec`]), turned into the pipeline's [`ValueSpecs`] (a parameter's spec is its
//! gradient's and accumulators'; micro-batch data's spec without the micro-batch axis, whose
//! leading axes are the data-parallel axes every activation splits its rows over), and into the
//! in and out shardings the update pieces are compiled with.

use tessera_ir::ShapedArray;
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

use super::analyze::{LossInput, Operand};
use super::options::MpmdJitOptions;
use crate::driver::DriverError;
use crate::specs::{SpecError, ValueSpecs, check_spec};

/// The layouts of a step, checked.
#[derive(Debug, Clone)]
pub(super) struct StepSpecs {
    /// Per step argument, its spec inside its group.
    pub args: Vec<PartitionSpec>,
    /// Per step result, its spec inside its group.
    pub outs: Vec<PartitionSpec>,
    /// The pipeline's values.
    pub values: ValueSpecs,
}

/// What [`step_specs`] reads of the step.
pub(super) struct StepShape<'a> {
    pub in_avals: &'a [ShapedArray],
    pub out_avals: &'a [ShapedArray],
    pub loss_inputs: &'a [LossInput],
    /// The `treduce`'s micro-batch axis of sliced data.
    pub axis: usize,
}

/// Checks `options`' specs against the group mesh `group` and derives every layout.
pub(super) fn step_specs(
    options: &MpmdJitOptions,
    step: &StepShape<'_>,
    group: &Mesh,
    mpmd_axis: &str,
) -> Result<StepSpecs, DriverError> {
    let given = |specs: &[Option<PartitionSpec>], n: usize| -> Result<Vec<_>, SpecError> {
        if specs.len() > n {
            return Err(SpecError::Count {
                given: specs.len(),
                args: n,
            });
        }
        Ok((0..n).map(|i| specs.get(i).cloned().flatten()).collect())
    };
    let ins = given(&options.in_specs, step.in_avals.len())?;
    let outs = given(&options.out_specs, step.out_avals.len())?;
    for (i, spec) in ins.iter().enumerate() {
        if let Some(spec) = spec {
            let what = format!("step argument {i} ({})", step.in_avals[i]);
            check_spec(&what, &step.in_avals[i].shape, spec, group, mpmd_axis)?;
        }
    }
    for (k, spec) in outs.iter().enumerate() {
        if let Some(spec) = spec {
            let what = format!("step result {k} ({})", step.out_avals[k]);
            check_spec(&what, &step.out_avals[k].shape, spec, group, mpmd_axis)?;
        }
    }
    let values = value_specs(&ins, step)?;
    let args: Vec<PartitionSpec> = ins.iter().map(|s| s.clone().unwrap_or_default()).collect();
    let outs = outs
        .into_iter()
        .enumerate()
        .map(|(k, spec)| match spec {
            Some(spec) => spec,
            // A result replacing argument k (a parameter, its optimizer state) keeps its layout.
            None if step.in_avals.get(k) == step.out_avals.get(k) => {
                args.get(k).cloned().unwrap_or_default()
            }
            None => PartitionSpec::replicated(),
        })
        .collect();
    Ok(StepSpecs { args, outs, values })
}

/// The pipeline's layouts from the step arguments' specs.
fn value_specs(
    ins: &[Option<PartitionSpec>],
    step: &StepShape<'_>,
) -> Result<ValueSpecs, SpecError> {
    let mut values = ValueSpecs::default();
    let mut batch_axes: Option<Vec<String>> = None;
    for (a, input) in step.loss_inputs.iter().enumerate() {
        match *input {
            LossInput::Param(i) => {
                values = values.with_param(a, ins[i].clone().unwrap_or_default());
            }
            // Operands computed before the loop are laid out by default.
            LossInput::ComputedParam(_)
            | LossInput::Invariant(Operand::Computed(_))
            | LossInput::Sliced(Operand::Computed(_)) => {}
            LossInput::Invariant(Operand::Arg(i)) => {
                if let Some(spec) = &ins[i] {
                    values = values.with_data(a, spec.clone());
                }
            }
            LossInput::Sliced(Operand::Arg(i)) => {
                let Some(spec) = &ins[i] else { continue };
                let what = format!("step argument {i} ({})", step.in_avals[i]);
                let micro = without_dim(spec, step.axis, &what)?;
                let leading = micro.dims().first().map(|d| d.axes().to_vec());
                let leading = leading.unwrap_or_default();
                match &batch_axes {
                    Some(first) if *first != leading => {
                        return Err(SpecError::BatchAxes {
                            first: first.clone(),
                            second: leading,
                        });
                    }
                    _ => batch_axes = Some(leading),
                }
                values = values.with_data(a, micro);
            }
        }
    }
    Ok(match batch_axes {
        Some(axes) => values.with_batch_axes(axes),
        None => values,
    })
}

/// `spec` of sliced data without its micro-batch dimension `axis`, which must be unsharded.
fn without_dim(spec: &PartitionSpec, axis: usize, what: &str) -> Result<PartitionSpec, SpecError> {
    let dims = spec.dims();
    if dims.get(axis).is_some_and(|d| !d.axes().is_empty()) {
        return Err(SpecError::LoopAxis {
            what: what.to_string(),
            spec: spec.to_string(),
            dim: axis,
        });
    }
    let kept = dims
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != axis)
        .map(|(_, d)| d.clone())
        .collect();
    Ok(PartitionSpec::new(kept))
}

/// For each gradient of the loop (loss argument `argnums[k]`), the step argument of its
/// parameter, whose spec the gradient takes (`None`: a value computed before the loop, laid
/// out by default).
pub(super) fn grad_args(
    loss_inputs: &[LossInput],
    argnums: &[usize],
) -> Result<Vec<Option<usize>>, DriverError> {
    argnums
        .iter()
        .map(|&a| match loss_inputs.get(a) {
            Some(LossInput::Param(i)) => Ok(Some(*i)),
            Some(LossInput::ComputedParam(_)) => Ok(None),
            _ => Err(DriverError::Config(format!(
                "loss argument {a} is differentiated but is not a parameter of the loop"
            ))),
        })
        .collect()
}

/// The `mhlo.sharding` text of a value of rank `rank` laid out by `spec` over `group`.
pub(super) fn checked_sharding(
    group: &Mesh,
    spec: &PartitionSpec,
    rank: usize,
) -> Result<NamedSharding, DriverError> {
    let sharding = NamedSharding::new(group, spec.clone())?;
    sharding.to_hlo_sharding(rank)?;
    Ok(sharding)
}
