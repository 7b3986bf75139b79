//! The runtime's PJRT back end: tasks are SPMD executables compiled for one group's devices, and
//! values are [`Array`]s moved between groups by device-to-device copies (shard `i` of the source
//! group goes to the device at the same mesh position in the destination group). A task returns
//! once its outputs are computed, so task times are compute times, not dispatch times. The
//! device-copy transport is in `device_copy.rs`.

use tessera_pjrt::{
    Array, Buffer, Client, CompileOptions, ElementType, HostArray, LoadedExecutable,
};
use tessera_sharding::NamedSharding;
use tessera_stablehlo::{EmittedModule, Partitioner};

use super::error::BoxError;
use super::plan::TaskSpec;
use super::worker::Executor;
use crate::error::Result;
use crate::mesh::MpmdMesh;

/// How often a task waiting for its results looks whether the run has stopped.
const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// The type and layout of one output of a compiled task, relative to its group's mesh.
#[derive(Debug, Clone)]
pub struct OutputLayout {
    /// Global shape.
    pub shape: Vec<i64>,
    /// Element type.
    pub ty: ElementType,
    /// The spec inside the group (the same for every group).
    pub spec: tessera_sharding::PartitionSpec,
}

/// A program compiled for one group.
#[derive(Debug)]
pub struct CompiledTask {
    group: usize,
    executable: LoadedExecutable,
    outputs: Vec<OutputLayout>,
    /// Each output's sharding on the group, made once (every launch wraps its results in them).
    output_shardings: Vec<NamedSharding>,
    donated: Vec<usize>,
}

/// A module to compile: StableHLO text (or bytecode) and the partitioner its sharding
/// annotations are for, which XLA is asked to run (`use_shardy_partitioner` for Shardy).
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// The module.
    pub module: &'a [u8],
    /// The partitioner it was emitted for.
    pub partitioner: Partitioner,
}

impl<'a> Program<'a> {
    /// A module annotated for GSPMD (`mhlo.sharding`), e.g. written by hand.
    pub fn gspmd(module: &'a [u8]) -> Self {
        Program {
            module,
            partitioner: Partitioner::Gspmd,
        }
    }
}

impl<'a> From<&'a EmittedModule> for Program<'a> {
    fn from(module: &'a EmittedModule) -> Self {
        Program {
            module: module.text.as_bytes(),
            partitioner: module.partitioner,
        }
    }
}

/// Compiles programs for groups and runs them.
pub struct PjrtExecutor {
    client: Client,
    mesh: MpmdMesh,
    programs: Vec<CompiledTask>,
    by_text: std::collections::HashMap<(Vec<u8>, Partitioner, usize), usize>,
    /// XLA options every program is compiled with (JAX's `compiler_options`).
    compiler_options: CompilerOptions,
    /// Values kept in another memory between the task that makes them and the one that reads
    /// them (saved residuals offloaded to `pinned_host`).
    offload: Option<Offload>,
}

/// Values a task's outputs leave in the memory `kind` (copied there once computed, and back to
/// the device's default memory before a task reads them).
#[derive(Debug, Clone)]
struct Offload {
    kind: String,
    values: std::collections::HashSet<super::ValueId>,
}

/// XLA compiler options by name (`DebugOptions` fields such as `xla_cpu_enable_fast_math`).
pub type CompilerOptions = std::collections::BTreeMap<String, tessera_pjrt::OptionOverride>;

impl PjrtExecutor {
    /// An executor with no programs yet.
    pub fn new(client: &Client, mesh: &MpmdMesh) -> Self {
        PjrtExecutor {
            client: client.clone(),
            mesh: mesh.clone(),
            programs: Vec::new(),
            by_text: Default::default(),
            compiler_options: CompilerOptions::new(),
            offload: None,
        }
    }

    /// Keeps `values` in memory `kind` (e.g. `pinned_host`) while they wait for their readers:
    /// a task's output among them is copied there once computed (its device buffer freed), and
    /// copied back to the device before a task reads it. Their bytes then leave the device
    /// accounting ([`Executor::value_bytes`] counts device memory).
    pub fn set_offload(&mut self, kind: &str, values: std::collections::HashSet<super::ValueId>) {
        self.offload = Some(Offload {
            kind: kind.to_string(),
            values,
        });
    }

    /// `inputs` with those held in the offload memory copied back to the device, then the
    /// outputs of `task` computed by `run`, those to offload copied out (and waited for, so
    /// the task's time includes its copies).
    fn run_offloading(
        &self,
        task: &TaskSpec<usize>,
        inputs: &[&Array],
        run: impl FnOnce(&[&Array]) -> Result<Vec<Array>, BoxError>,
    ) -> Result<Vec<Array>, BoxError> {
        let Some(offload) = &self.offload else {
            return run(inputs);
        };
        let offloaded = |a: &Array| a.sharding().memory_kind() == Some(offload.kind.as_str());
        let back: Vec<Option<Array>> = inputs
            .iter()
            .map(|a| match offloaded(a) {
                true => {
                    let to = a.sharding().clone().without_memory_kind();
                    a.reshard(&self.client, &to).map(Some)
                }
                false => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let refs: Vec<&Array> = inputs
            .iter()
            .zip(&back)
            .map(|(a, b)| b.as_ref().unwrap_or(a))
            .collect();
        let mut outputs = run(&refs)?;
        for (value, output) in task.outputs.iter().zip(outputs.iter_mut()) {
            if offload.values.contains(value) {
                let to = output.sharding().clone().with_memory_kind(&offload.kind);
                let moved = output.reshard(&self.client, &to)?;
                moved.block_until_ready()?;
                *output = moved;
            }
        }
        Ok(outputs)
    }

    /// The same executor compiling every later program with `options` (part of the persistent
    /// cache's key, as every compile option is).
    pub fn with_compiler_options(mut self, options: &CompilerOptions) -> Self {
        self.compiler_options = options.clone();
        self
    }

    /// Compiles `program` (SPMD over a group's mesh) for `group` and returns the index that task
    /// payloads use to name it. A program already compiled for the group (the same bytes and
    /// partitioner) is reused; others go through the persistent compile cache
    /// (`Client::compile_cached`), so a later process loads them instead of compiling.
    pub fn compile<'a>(
        &mut self,
        program: impl Into<Program<'a>>,
        group: usize,
        outputs: Vec<OutputLayout>,
    ) -> Result<usize> {
        self.compile_donating(program, group, outputs, Vec::new())
    }

    /// Like [`PjrtExecutor::compile`], for a module whose inputs at positions `donated` alias
    /// outputs (`tf.aliasing_output`): running it consumes those inputs' buffers, so the runtime
    /// must hand over their last use ([`Executor::donated_inputs`]).
    pub fn compile_donating<'a>(
        &mut self,
        program: impl Into<Program<'a>>,
        group: usize,
        outputs: Vec<OutputLayout>,
        donated: Vec<usize>,
    ) -> Result<usize> {
        let Program {
            module,
            partitioner,
        } = program.into();
        let key = (module.to_vec(), partitioner, group);
        if let Some(&index) = self.by_text.get(&key) {
            return Ok(index);
        }
        let devices = self.mesh.group(group)?.device_ids().to_vec();
        let options = self.compiler_options.iter().fold(
            CompileOptions::spmd(&devices).with_shardy(partitioner.is_shardy()),
            |o, (name, value)| o.with_override(name, value.clone()),
        );
        let executable = self.client.compile_cached(module, &options)?;
        let group_mesh = self.mesh.group(group)?;
        let output_shardings = outputs
            .iter()
            .map(|o| NamedSharding::with_partial_axes(group_mesh, o.spec.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        self.programs.push(CompiledTask {
            group,
            executable,
            outputs,
            output_shardings,
            donated,
        });
        self.by_text.insert(key, self.programs.len() - 1);
        Ok(self.programs.len() - 1)
    }

    /// The compiled programs, by index.
    pub fn programs(&self) -> &[CompiledTask] {
        &self.programs
    }

    /// The group program `program` runs on, and the collectives of each kind XLA's optimized
    /// module of it holds ([`tessera_pjrt::OptimizedProgram::collective_counts`]); `None` for
    /// an index this executor never compiled.
    pub fn collectives(
        &self,
        program: usize,
    ) -> Option<Result<(usize, std::collections::BTreeMap<String, u64>)>> {
        let task = self.programs.get(program)?;
        let optimized = task.executable.optimized_program();
        Some(
            optimized
                .map(|o| (task.group, o.collective_counts()))
                .map_err(Into::into),
        )
    }

    /// Runs compiled program `program` on arrays laid out on its group, and waits for its
    /// results.
    pub fn execute(&self, program: usize, inputs: &[&Array]) -> Result<Vec<Array>, BoxError> {
        self.execute_unless(program, inputs, &|| false)
    }

    /// Like [`PjrtExecutor::execute`], giving up the wait for the results once `stop()` is true
    /// (checked every few milliseconds; the device finishes the computation in the background).
    pub fn execute_unless(
        &self,
        program: usize,
        inputs: &[&Array],
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Array>, BoxError> {
        Ok(self.launch(program, inputs, &[], stop)?.0)
    }

    /// Like [`PjrtExecutor::execute`], also reading the outputs `reads` to the host: their
    /// copies are asked for when the program is launched, so they follow the program without a
    /// round trip. Each must be replicated (one device holds all of it).
    pub fn execute_reading(
        &self,
        program: usize,
        inputs: &[&Array],
        reads: &[usize],
    ) -> Result<(Vec<Array>, Vec<HostArray>), BoxError> {
        self.launch(program, inputs, reads, &|| false)
    }

    /// Dispatches the program, asks for the copies of `reads`, and waits for the results until
    /// `stop()` says to give up.
    fn launch(
        &self,
        program: usize,
        inputs: &[&Array],
        reads: &[usize],
        stop: &dyn Fn() -> bool,
    ) -> Result<(Vec<Array>, Vec<HostArray>), BoxError> {
        let outputs = self.dispatch(program, inputs)?;
        let copies = reads
            .iter()
            .map(|&read| start_host_copy(&outputs, program, read))
            .collect::<Result<Vec<_>, BoxError>>()?;
        // PJRT runs executables asynchronously: without waiting, a task's time would be its
        // dispatch and its computation would be charged to whoever next touches the buffers.
        // One wait on the launch's ready callbacks (`PJRT_Event_OnReady`), which can stop.
        let readiness = Array::launch_readiness(&outputs)?;
        if !readiness.wait_unless(stop, STOP_POLL)? {
            return Err(format!(
                "program {program} was still running when the run stopped; its computation is \
                 left to finish on the devices (PJRT cannot cancel it)"
            )
            .into());
        }
        let hosts = copies
            .into_iter()
            .map(|c| Ok(c.wait()?))
            .collect::<Result<Vec<_>, BoxError>>()?;
        Ok((outputs, hosts))
    }

    /// Launches compiled program `program` on arrays laid out on its group; its results may
    /// still be computing.
    fn dispatch(&self, program: usize, inputs: &[&Array]) -> Result<Vec<Array>, BoxError> {
        let compiled = self
            .programs
            .get(program)
            .ok_or_else(|| format!("no compiled program {program}"))?;
        let mesh = self.mesh.group(compiled.group)?;
        let per_input = inputs
            .iter()
            .map(|a| a.addressable_shards())
            .collect::<Result<Vec<_>, _>>()?;
        let devices = mesh.device_ids().len();
        if let Some((k, shards)) = per_input
            .iter()
            .enumerate()
            .find(|(_, shards)| shards.len() != devices)
        {
            return Err(format!(
                "input {k} of program {program} has {} shards but group {} has {devices} devices",
                shards.len(),
                compiled.group
            )
            .into());
        }
        let args: Vec<Vec<&Buffer>> = (0..devices)
            .map(|d| {
                per_input
                    .iter()
                    .map(|shards| shards[d].buffer.as_ref())
                    .collect()
            })
            .collect();
        let mut per_device = compiled.executable.execute(&args)?;
        let mut outputs = Vec::with_capacity(compiled.outputs.len());
        let layouts = compiled.outputs.iter().zip(&compiled.output_shardings);
        for (k, (layout, sharding)) in layouts.enumerate().rev() {
            let buffers: Vec<Buffer> = per_device.iter_mut().map(|outs| outs.remove(k)).collect();
            outputs.push(Array::from_shards(
                &layout.shape,
                layout.ty,
                sharding,
                buffers,
            )?);
        }
        outputs.reverse();
        Ok(outputs)
    }
}

/// Starts copying output `read` of a launch of `program` to the host, from a device that holds
/// all of it.
fn start_host_copy(
    outputs: &[Array],
    program: usize,
    read: usize,
) -> Result<tessera_pjrt::HostCopy, BoxError> {
    let output = outputs
        .get(read)
        .ok_or_else(|| format!("program {program} has no output {read}"))?;
    let shards = output.addressable_shards()?;
    let whole = |s: &&tessera_pjrt::Shard| {
        let mut spans = s.block.iter().zip(output.shape());
        spans.all(|(&(a, b), &d)| a == 0 && b == d)
    };
    let shard = shards.iter().find(whole).ok_or_else(|| {
        format!("output {read} of program {program} is not held whole by one device")
    })?;
    Ok(shard.buffer.to_host_started()?)
}

impl Executor<usize, Array> for PjrtExecutor {
    fn run(&self, task: &TaskSpec<usize>, inputs: &[&Array]) -> Result<Vec<Array>, BoxError> {
        self.run_offloading(task, inputs, |inputs| self.execute(task.payload, inputs))
    }

    fn run_stoppable(
        &self,
        task: &TaskSpec<usize>,
        inputs: &[&Array],
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Array>, BoxError> {
        self.run_offloading(task, inputs, |inputs| {
            self.execute_unless(task.payload, inputs, stop)
        })
    }

    fn value_bytes(&self, value: &Array) -> u64 {
        match &self.offload {
            Some(o) if value.sharding().memory_kind() == Some(o.kind.as_str()) => 0,
            _ => array_bytes(value),
        }
    }

    fn donated_inputs(&self, task: &TaskSpec<usize>) -> Vec<usize> {
        self.programs
            .get(task.payload)
            .map(|p| p.donated.clone())
            .unwrap_or_default()
    }
}

/// The bytes an array's shards occupy on their devices (0 for a deleted array).
pub fn array_bytes(array: &Array) -> u64 {
    array.addressable_shards().map_or(0, |shards| {
        shards
            .iter()
            .map(|s| s.buffer.on_device_size().unwrap_or(0))
            .sum()
    })
}
