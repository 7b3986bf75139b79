//! Running a traced `pmap` on PJRT devices with JAX's `devices=` and `donate_argnums=`:
//! [`PmapRun`] compiles the program for an explicit list of devices (by default the first
//! devices of the client, as [`crate::jit::run_spmd`] does) and, with donation, gives the
//! donated arguments' buffers to the executable (aliased to results of the same type, through
//! [`Jit::donate_argnums`]) and deletes the arrays passed for them.
//!
//! A `pmap` inside a `pmap` (JAX's `pmap(pmap(f, axis_name='j'), axis_name='i')`) runs over
//! the outer × inner grid of devices: [`PmapRun::new`] flattens it into one `shard_map` over the
//! two-axis mesh `(i, j)` ([`tessera_ir::passes::flatten_nested_shard_maps`]), so collectives
//! over `i`, `j` or both lower to replica groups of the flattened device grid; `devices` then
//! lists outer × inner devices, row-major (outer index first). The inner `pmap` may sit in a
//! `scan`, `fori_loop`, `cond` or `while` of the outer body, and the levels may have
//! `check_vma=False` (JAX's printed `pmap`). A nest the pass refuses (levels of different
//! `check_vma`, an axis name given two sizes, closed-over constants) is [`PmapError::Nested`].

use tessera_ir::{Array, ClosedJaxpr, Prim};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

use crate::jit::{Compiled, Jit, JitError, from_host, program_mesh, to_host};

/// Errors of running a `pmap` on PJRT devices.
#[derive(Debug, thiserror::Error)]
pub enum PmapError {
    /// The program has no `pmap` (no `shard_map`) to run.
    #[error("the program has no pmap (no shard_map); run it with tessera::jit::run_on_device")]
    NoPmap,
    /// A `pmap` inside a `pmap` that could not be flattened into one `shard_map` (refused by
    /// the flattening pass: levels of different `check_vma`, an axis name of two sizes, ...).
    #[error(
        "the program nests a pmap (axis {inner}) inside a pmap (axis {outer}) in a way that is \
         not flattened into one shard_map over both axes ({reason}); fix what the reason \
         names, or use one shard_map over a two-axis mesh"
    )]
    Nested {
        /// The outer pmap's axis.
        outer: String,
        /// The inner pmap's axis.
        inner: String,
        /// Why it was not flattened.
        reason: String,
    },
    /// `devices` lists another number of devices than the mapped axes have (outer × inner for
    /// a nested pmap).
    #[error(
        "devices lists {given} devices but the pmap over {grid} maps {size} devices; give \
         exactly {size} devices, one per index of the mapped axes (row-major, outer axis first)"
    )]
    DeviceCount {
        /// The mapped axes, comma-separated (outer first).
        axis: String,
        /// The mapped axes with their sizes, e.g. `i=2 × j=4`.
        grid: String,
        /// Its size.
        size: i64,
        /// How many devices were given.
        given: usize,
    },
    /// No device list was given and the client has fewer devices than the mapped axis.
    #[error(
        "the pmap over axis {axis} has size {size} but the client has {available} devices; \
         open a client with at least {size} devices or map over fewer"
    )]
    TooFewDevices {
        /// The mapped axis.
        axis: String,
        /// Its size.
        size: i64,
        /// How many devices the client has.
        available: usize,
    },
    /// A device listed twice.
    #[error("device {id} is listed twice in devices; list each device once")]
    RepeatedDevice {
        /// The device.
        id: i64,
    },
    /// A device the client does not have.
    #[error("device {id} is not one of the client's devices {available:?}; list only those")]
    UnknownDevice {
        /// The device.
        id: i64,
        /// The client's device ids.
        available: Vec<i64>,
    },
    /// An argument donated to an earlier call was passed again.
    #[error(
        "argument {index} was donated to an earlier call of this pmap and deleted; pass a live \
         array (for example the result that now holds its buffers)"
    )]
    Donated {
        /// The argument's position.
        index: usize,
    },
    /// Compiling or running failed.
    #[error(transparent)]
    Jit(#[from] JitError),
}

/// A compiled `pmap` program on a list of devices, with optional donation.
pub struct PmapRun {
    compiled: Compiled,
    sharding: NamedSharding,
    client: Client,
    program: ClosedJaxpr,
    donated: Vec<usize>,
}

/// The axes of the first `shard_map` nested in another, as `(outer, inner)`.
fn nested_axes(program: &ClosedJaxpr, outer: Option<&str>) -> Option<(String, String)> {
    for eqn in &program.jaxpr.eqns {
        let here = match eqn.prim {
            Prim::ShardMap => tessera_ir::prim::ShardMapParams::read(&eqn.params)
                .ok()
                .map(|p| p.mesh.axis_names().join(",")),
            _ => None,
        };
        if let (Some(o), Some(h)) = (outer, &here) {
            return Some((o.to_owned(), h.clone()));
        }
        let next = here.as_deref().or(outer);
        for inner in eqn.params.jaxprs() {
            if let Some(found) = nested_axes(inner, next) {
                return Some(found);
            }
        }
    }
    None
}

impl PmapRun {
    /// Compiles `program` (a traced `pmap`) for `devices` (JAX's `devices=`; `None`: the
    /// client's first devices in order), donating arguments `donate_argnums` (each must have a
    /// result of its type to take its buffers).
    pub fn new(
        client: &Client,
        program: &ClosedJaxpr,
        devices: Option<&[i64]>,
        donate_argnums: &[usize],
    ) -> Result<PmapRun, PmapError> {
        let flat = match nested_axes(program, None) {
            None => program.clone(),
            Some((outer, inner)) => tessera_ir::passes::flatten_nested_shard_maps(program)
                .map_err(|e| PmapError::Nested {
                    outer: outer.clone(),
                    inner: inner.clone(),
                    reason: e.to_string(),
                })?,
        };
        if let Some((outer, inner)) = nested_axes(&flat, None) {
            let reason = "a shard_map is left nested after flattening".to_owned();
            return Err(PmapError::Nested {
                outer,
                inner,
                reason,
            });
        }
        let program = &flat;
        let mesh = program_mesh(program)
            .map_err(|e| JitError::Convert(e.to_string()))?
            .ok_or(PmapError::NoPmap)?;
        let available: Vec<i64> = client
            .devices()
            .map_err(JitError::from)?
            .iter()
            .map(|d| d.id().map(i64::from))
            .collect::<Result<_, _>>()
            .map_err(JitError::from)?;
        let devices: Vec<i64> = match devices {
            Some(d) => d.to_vec(),
            None if (available.len() as i64) < mesh.size() => {
                return Err(PmapError::TooFewDevices {
                    axis: mesh.axis_names().join(","),
                    size: mesh.size(),
                    available: available.len(),
                });
            }
            None => available
                .iter()
                .take(mesh.size() as usize)
                .copied()
                .collect(),
        };
        if devices.len() as i64 != mesh.size() {
            return Err(PmapError::DeviceCount {
                axis: mesh.axis_names().join(","),
                grid: mesh
                    .axis_names()
                    .iter()
                    .zip(mesh.axis_sizes())
                    .map(|(n, s)| format!("{n}={s}"))
                    .collect::<Vec<_>>()
                    .join(" × "),
                size: mesh.size(),
                given: devices.len(),
            });
        }
        for (k, id) in devices.iter().enumerate() {
            if devices[..k].contains(id) {
                return Err(PmapError::RepeatedDevice { id: *id });
            }
            if !available.contains(id) {
                return Err(PmapError::UnknownDevice {
                    id: *id,
                    available: available.clone(),
                });
            }
        }
        let mesh = Mesh::new(mesh, devices).map_err(|e| JitError::Convert(e.to_string()))?;
        let sharding = NamedSharding::new(&mesh, PartitionSpec::replicated())
            .map_err(|e| JitError::Convert(e.to_string()))?;
        let jaxpr = &program.jaxpr;
        let ins = vec![sharding.clone(); jaxpr.invars.len()];
        let outs = vec![sharding.clone(); jaxpr.outvars.len()];
        let compiled = Jit::new(program.clone(), ins, outs)?
            .donate_argnums(donate_argnums)?
            .lower()?
            .compile(client)?;
        let mut donated = donate_argnums.to_vec();
        donated.sort_unstable();
        donated.dedup();
        Ok(PmapRun {
            compiled,
            sharding,
            client: client.clone(),
            program: program.clone(),
            donated,
        })
    }

    /// The devices the pmap runs on, in the order of the mapped axis (row-major over the outer
    /// and inner axes of a nested pmap).
    pub fn devices(&self) -> Vec<i64> {
        self.sharding
            .concrete_mesh()
            .map(|m| m.device_ids().to_vec())
            .unwrap_or_default()
    }

    /// Puts a host array on the pmap's devices, as an argument is laid out.
    pub fn put(&self, host: &Array) -> Result<DeviceArray, PmapError> {
        Ok(
            DeviceArray::device_put(&self.client, &to_host(host)?, &self.sharding)
                .map_err(JitError::from)?,
        )
    }

    /// Runs on arrays on the pmap's devices ([`PmapRun::put`]); the arrays passed for donated
    /// arguments are deleted afterwards (their buffers now hold results), and passing one again
    /// is [`PmapError::Donated`].
    pub fn call(&self, args: &mut [DeviceArray]) -> Result<Vec<DeviceArray>, PmapError> {
        let donated_again = |i: &usize| args[*i].is_deleted() && self.donated.contains(i);
        if let Some(index) = (0..args.len()).find(donated_again) {
            return Err(PmapError::Donated { index });
        }
        Ok(match self.donated.is_empty() {
            true => self.compiled.call(&args.iter().collect::<Vec<_>>())?,
            false => self.compiled.call_donated(args)?,
        })
    }

    /// Runs on host arrays and returns host arrays (nothing is donated from the caller's view:
    /// the device copies made here are).
    pub fn run(&self, inputs: &[Array]) -> Result<Vec<Array>, PmapError> {
        let mut args = inputs
            .iter()
            .map(|a| self.put(a))
            .collect::<Result<Vec<_>, _>>()?;
        let results = self.call(&mut args)?;
        results
            .iter()
            .zip(self.program.jaxpr.out_avals())
            .map(|(r, aval)| {
                Ok(from_host(
                    &r.to_host().map_err(JitError::from)?,
                    aval.dtype,
                )?)
            })
            .collect()
    }
}
