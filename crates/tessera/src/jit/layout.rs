//! The argument check of an executable on typed shardings (JAX's
//! `check_gda_or_array_xla_sharding_match`): an array is accepted when it lies on the devices
//! the executable was compiled for, in their order, with the same blocks on each device, the
//! same unreduced axes and the same memory kind
//! ([`NamedSharding::layout_difference`]); an equivalent spelling of the spec (`P('x', None)`
//! for `P('x')`) or a mesh with other axis names that puts the same blocks on the same devices
//! passes. Anything else is refused with what differs and how to move the array, never run as
//! is: the executable would read each device's buffer as the block it was compiled for.
//! Before compiling, the program's devices are checked against the client's
//! ([`check_devices`]).

use tessera_sharding::NamedSharding;

use super::JitError;

/// Refuses a program whose mesh holds `devices` the client does not address, naming them
/// (XLA would otherwise fail on the device assignment).
pub(super) fn check_devices(
    client: &tessera_pjrt::Client,
    devices: &[i64],
) -> Result<(), JitError> {
    let have: Vec<i64> = client
        .addressable_devices()?
        .iter()
        .map(|d| d.id().map(i64::from))
        .collect::<Result<_, _>>()?;
    let missing: Vec<i64> = (devices.iter().copied())
        .filter(|d| !have.contains(d))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(JitError::Devices {
        needed: devices.len(),
        devices: devices.to_vec(),
        available: have.len(),
        have,
        missing,
    })
}

/// Refuses argument `index` laid out by `have` when the executable takes `want` for an array of
/// rank `rank`.
pub(super) fn check_argument_layout(
    index: usize,
    have: &NamedSharding,
    want: &NamedSharding,
    rank: usize,
) -> Result<(), JitError> {
    // The common case, an array made by this program or laid out for it: no layout to compare.
    if have == want {
        return Ok(());
    }
    let difference = have
        .layout_difference(want, rank)
        .map_err(|e| JitError::Convert(format!("argument {index}: {e}")))?;
    match difference {
        None => Ok(()),
        Some(difference) => Err(JitError::Layout {
            index,
            have: describe(have),
            want: describe(want),
            difference: Box::new(difference),
        }),
    }
}

/// A sharding in words: the spec, the mesh's axes with sizes and types, the device order, and
/// the memory kind and logical device ids when set.
pub(super) fn describe(sharding: &NamedSharding) -> String {
    let mesh = sharding.mesh();
    let axes: Vec<String> = mesh
        .axis_names()
        .iter()
        .zip(mesh.axis_sizes())
        .zip(mesh.axis_types())
        .map(|((n, s), t)| format!("{n}:{s} ({t:?})"))
        .collect();
    let devices = sharding
        .concrete_mesh()
        .map(|m| m.device_ids().to_vec())
        .unwrap_or_default();
    let mut out = format!(
        "{} on mesh {{{}}} over devices {devices:?}",
        sharding.spec(),
        axes.join(", ")
    );
    if let Some(ids) = sharding.logical_device_ids() {
        out.push_str(&format!(" with logical device ids {ids:?}"));
    }
    if let Some(kind) = sharding.memory_kind() {
        out.push_str(&format!(" in memory kind '{kind}'"));
    }
    out
}

/// Checks the memory kinds of `shardings` (a program's inputs then outputs) on `client`'s
/// device `device`: a kind the device lacks is [`tessera_pjrt::PjrtError::UnknownMemoryKind`]
/// naming the kinds it has. Kinds it has are lowered (`super::memory`).
pub(super) fn check_memory_kinds(
    client: &tessera_pjrt::Client,
    device: i64,
    shardings: &[NamedSharding],
) -> Result<(), JitError> {
    if shardings.iter().all(|s| s.memory_kind().is_none()) {
        return Ok(());
    }
    let id = i32::try_from(device).map_err(|_| JitError::Convert(format!("device id {device}")))?;
    let memories = client.device(id)?.memories()?;
    for sharding in shardings {
        let Some(kind) = sharding.memory_kind() else {
            continue;
        };
        if !memories.iter().any(|m| m.kind == kind) {
            return Err(tessera_pjrt::PjrtError::UnknownMemoryKind {
                kind: kind.to_string(),
                device: id,
                available: memories.iter().map(|m| m.kind.clone()).collect(),
            }
            .into());
        }
    }
    Ok(())
}
