//! A step's inputs placed on their groups before the run: each parameter laid out by its
//! step spec on every group that reads it (moved or resharded where it lies elsewhere, put from
//! the host otherwise), then gathered once per step where its tasks read it whole over the
//! data-parallel axes (FSDP, `FsdpGather::PerStep`); each micro-batch's data by its spec; the
//! zero accumulator of a stage that runs no backward.

use std::collections::HashMap;

use tessera_pjrt::{Array as DeviceArray, Client, HostArray};
use tessera_sharding::{NamedSharding, PartitionSpec};

use super::{CompiledPipeline, DriverError, Placed, element_type};
use crate::partition::key_aval;
use crate::pipeline::Key;
use crate::runtime::ValueId;

impl CompiledPipeline {
    /// The values the run starts from on this process's groups, as `(value, group, array)`.
    pub(super) fn place_inputs(
        &self,
        args: &HashMap<usize, Placed>,
        data: &[HashMap<usize, Placed>],
    ) -> Result<Vec<(ValueId, usize, DeviceArray)>, DriverError> {
        let missing = |k: usize| DriverError::Config(format!("no value for loss argument {k}"));
        // Each input by its position in `built.inputs` (a parameter in its step spec, gathered
        // below where its tasks read it whole over the data-parallel axes).
        let mut inputs_at: Vec<Option<(ValueId, usize, DeviceArray)>> =
            vec![None; self.built.inputs.len()];
        for (position, &(key, group)) in self.built.inputs.iter().enumerate() {
            if !self.is_local(group) {
                continue;
            }
            let mesh = self.mesh.group(group)?;
            let host = match key {
                Key::Param { stage, k } => {
                    let arg = self.parts[stage as usize].param_args[k];
                    let placed = args.get(&arg).ok_or_else(|| missing(arg))?;
                    match (self.param_on_group(placed, arg, group)?, placed) {
                        (Some(a), _) => {
                            inputs_at[position] = Some((self.built.ids[&key], group, a));
                            continue;
                        }
                        (None, Placed::Host(h)) => {
                            let sharding = NamedSharding::new(mesh, self.specs.param(arg))?;
                            let a = DeviceArray::device_put(&self.client, h, &sharding)?;
                            inputs_at[position] = Some((self.built.ids[&key], group, a));
                            continue;
                        }
                        (None, _) => return Err(missing(arg)),
                    }
                }
                // Only a stage that runs no backward has an accumulator placed (its zero
                // gradient); elsewhere the first backward makes the accumulators on the device.
                Key::Acc { stage, k, .. } => {
                    let a =
                        key_aval(&self.parts, Key::Param { stage, k }).ok_or_else(|| missing(k))?;
                    element_type(a.dtype)?;
                    HostArray::zeros(&a)
                }
                Key::Data { stage, mb, k } => {
                    let arg = self.parts[stage as usize].data_args[k];
                    let placed = data[mb as usize].get(&arg).ok_or_else(|| missing(arg))?;
                    let spec = self.specs.spec(&self.parts, key, mesh);
                    let a = data_on_group(&self.client, placed, mesh, &spec)?;
                    inputs_at[position] = Some((self.built.ids[&key], group, a));
                    continue;
                }
                other => {
                    return Err(DriverError::Config(format!(
                        "unexpected pipeline input {other:?}"
                    )));
                }
            };
            let spec = self.specs.spec(&self.parts, key, mesh);
            let sharding = NamedSharding::with_partial_axes(mesh, spec)?;
            let a = DeviceArray::device_put(&self.client, &host, &sharding)?;
            inputs_at[position] = Some((self.built.ids[&key], group, a));
        }
        self.gather(inputs_at)
    }

    /// The placed inputs (by position in the plan's inputs) with each group's FSDP parameters
    /// gathered once (`FsdpGather::PerStep`), as the run takes them.
    fn gather(
        &self,
        inputs: Vec<Option<(ValueId, usize, DeviceArray)>>,
    ) -> Result<Vec<(ValueId, usize, DeviceArray)>, DriverError> {
        let (meta, mut arrays): (Vec<_>, Vec<_>) = inputs
            .into_iter()
            .map(|i| match i {
                Some((id, group, a)) => (Some((id, group)), Some(a)),
                None => (None, None),
            })
            .unzip();
        self.gathers.apply(&self.executor, &mut arrays)?;
        Ok(meta
            .into_iter()
            .zip(arrays)
            .filter_map(|(m, a)| Some((m?.0, m?.1, a?)))
            .collect())
    }

    /// Parameter `arg`'s value on `group` (which runs a stage reading it), laid out by its
    /// spec: an array on the group in another layout is resharded there; a tied weight's copy
    /// on another group is moved shard by shard.
    fn param_on_group(
        &self,
        placed: &Placed,
        arg: usize,
        group: usize,
    ) -> Result<Option<DeviceArray>, DriverError> {
        let mesh = self.mesh.group(group)?;
        let spec = self.specs.param(arg);
        let tied = self.groups_of_param(arg).len() > 1;
        let onto = |a: &DeviceArray| crate::cross_group::onto_group(&self.client, a, mesh, &spec);
        match placed {
            Placed::Host(_) => Ok(None),
            Placed::Device(a) if tied => Ok(Some(onto(a)?)),
            Placed::Device(a) => Ok(Some(on_group(&self.client, a, mesh, &spec, arg)?)),
            Placed::PerGroup(arrays) => match (arrays.get(&group), arrays.values().next()) {
                (Some(a), _) => Ok(Some(on_group(&self.client, a, mesh, &spec, arg)?)),
                (None, Some(a)) if tied => Ok(Some(onto(a)?)),
                // Under several processes: held only by other processes' groups.
                (None, None) if self.processes.is_some() => Err(DriverError::Config(format!(
                    "parameter argument {arg} is held by no group of this process, but its group \
                     {group} runs a stage that reads it; under several processes a parameter on \
                     devices must lie on the groups of the stages reading it (as a step's own \
                     result left there does): pass it from the host, or put it on group {group}'s \
                     devices"
                ))),
                _ => Err(DriverError::Config(format!(
                    "parameter argument {arg} lives on groups {:?}, but group {group} runs a \
                     stage that reads it; reshard it there or pass it from the host",
                    arrays.keys().collect::<Vec<_>>()
                ))),
            },
        }
    }
}

/// A micro-batch's data on the group of the stage reading it, laid out by `spec`: put there from
/// the host, or moved from the devices holding it (device to device where a shard holds a block
/// whole).
fn data_on_group(
    client: &Client,
    placed: &Placed,
    group: &tessera_sharding::Mesh,
    spec: &PartitionSpec,
) -> Result<DeviceArray, DriverError> {
    let array = match placed {
        Placed::Host(h) => {
            let sharding = NamedSharding::new(group, spec.clone())?;
            return Ok(DeviceArray::device_put(client, h, &sharding)?);
        }
        Placed::Device(a) => a.as_ref(),
        Placed::PerGroup(arrays) => arrays
            .values()
            .find(|a| crate::cross_group::lies_on(a, group, spec))
            .or(arrays.values().next())
            .ok_or_else(|| DriverError::Config("a micro-batch holds no array".into()))?,
    };
    crate::cross_group::onto_group(client, array, group, spec)
}

/// A parameter already on device, checked to lie on `group`'s devices, laid out by `spec`
/// (resharded inside the group when its layout differs).
fn on_group(
    client: &Client,
    array: &DeviceArray,
    group: &tessera_sharding::Mesh,
    spec: &PartitionSpec,
    arg: usize,
) -> Result<DeviceArray, DriverError> {
    let devices = array.sharding().device_set()?;
    let mut want = group.device_ids().to_vec();
    want.sort_unstable();
    let mut have = devices.clone();
    have.sort_unstable();
    if have != want {
        return Err(DriverError::Config(format!(
            "parameter argument {arg} is on devices {devices:?} as {}, but its stage runs on \
             devices {:?} (as {spec}); pass it from the host or from this step's own results",
            array.sharding().spec(),
            group.device_ids()
        )));
    }
    crate::cross_group::onto_group(client, array, group, spec)
}
