//! The checks JAX makes when a `NamedSharding` is built (`check_pspec`), in JAX's order.

use crate::error::{Result, ShardingError};
use crate::mesh::{AbstractMesh, AxisType};
use crate::spec::{DimSpec, PartitionSpec};

/// Runs every construction check of a spec against a mesh.
pub(super) fn check_spec(mesh: &AbstractMesh, spec: &PartitionSpec) -> Result<()> {
    check_unique(spec)?;
    check_axes(mesh, spec)?;
    check_unreduced(mesh, spec, "unreduced", spec.unreduced())?;
    check_unreduced(mesh, spec, "reduced", spec.reduced())
}

fn check_unique(spec: &PartitionSpec) -> Result<()> {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for axis in spec.used_axes() {
        match seen.iter_mut().find(|(a, _)| *a == axis) {
            Some(slot) => slot.1 += 1,
            None => seen.push((axis, 1)),
        }
    }
    let repeated: Vec<String> = seen
        .iter()
        .filter(|(_, n)| *n > 1)
        .map(|(a, _)| format!("`{a}`"))
        .collect();
    if repeated.is_empty() {
        return Ok(());
    }
    Err(ShardingError::DuplicateAxes {
        spec: spec.to_string(),
        axes: repeated.join(", "),
    })
}

fn check_axes(mesh: &AbstractMesh, spec: &PartitionSpec) -> Result<()> {
    for d in spec.dims() {
        for axis in d.axes() {
            if mesh.axis_index(axis).is_none() {
                return Err(ShardingError::UnknownAxis {
                    axis: axis.clone(),
                    spec: spec.to_string(),
                    mesh_axes: show_names(mesh),
                });
            }
        }
    }
    let has_unconstrained = spec.dims().contains(&DimSpec::Unconstrained);
    if has_unconstrained && !mesh.axis_types().contains(&AxisType::Auto) {
        let types: Vec<String> = mesh.axis_types().iter().map(|t| t.to_string()).collect();
        return Err(ShardingError::UnconstrainedWithoutAuto {
            spec: spec.to_string(),
            types: types.join(", "),
        });
    }
    Ok(())
}

fn check_unreduced(
    mesh: &AbstractMesh,
    spec: &PartitionSpec,
    set: &'static str,
    axes: &[String],
) -> Result<()> {
    for axis in axes {
        let problem = match mesh.axis_type(axis) {
            None => format!("is not a mesh axis (mesh axes: {})", show_names(mesh)),
            Some(AxisType::Explicit) => continue,
            Some(t) => format!("is {t}"),
        };
        return Err(ShardingError::BadUnreducedAxis {
            set,
            axis: axis.clone(),
            spec: spec.to_string(),
            problem,
        });
    }
    Ok(())
}

/// The stricter check of older JAX sources: the axes of one tuple must share one type. JAX
/// 0.10.2 (the oracle) no longer makes it when a sharding is built, so it is opt-in.
pub(super) fn check_tuple_types(mesh: &AbstractMesh, spec: &PartitionSpec) -> Result<()> {
    for (dim, d) in spec.dims().iter().enumerate() {
        let axes = d.axes();
        let types: Vec<AxisType> = axes.iter().filter_map(|a| mesh.axis_type(a)).collect();
        if types.windows(2).any(|w| w[0] != w[1]) {
            let shown: Vec<String> = axes
                .iter()
                .zip(&types)
                .map(|(a, t)| format!("'{a}': {t}"))
                .collect();
            return Err(ShardingError::MixedAxisTypes {
                spec: spec.to_string(),
                dim,
                types: shown.join(", "),
            });
        }
    }
    Ok(())
}

fn show_names(mesh: &AbstractMesh) -> String {
    let names: Vec<String> = mesh.axis_names().iter().map(|n| format!("'{n}'")).collect();
    format!("({})", names.join(", "))
}
