//! Compiling and running IR programs through StableHLO and PJRT: the glue between
//! `tessera-ir`, `tessera-stablehlo` and `tessera-pjrt`.

use tessera_ir::{Array, ClosedJaxpr, DType};
use tessera_pjrt::{Buffer, Client, CompileOptions, HostArray, LoadedExecutable};
use tessera_stablehlo::{EmittedModule, LowerOptions, Partitioner, lower_closed};

/// Errors of compiling or running a program.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    /// Lowering to StableHLO failed.
    #[error("lowering to StableHLO: {0}")]
    Lower(#[from] tessera_stablehlo::LowerError),
    /// PJRT failed.
    #[error(transparent)]
    Pjrt(#[from] tessera_pjrt::PjrtError),
    /// An array could not be converted.
    #[error("{0}")]
    Convert(String),
    /// A program with an ordered `io_callback` compiled for more than one device (JAX:
    /// "Ordered effects are not supported for more than 1 device").
    #[error(
        "Ordered effects are not supported for more than 1 device: the program holds an \
         ordered io_callback and is compiled for {devices} devices; run it on one device, or \
         trace the callback with ordered=false"
    )]
    OrderedEffects {
        /// How many devices the program was compiled for.
        devices: usize,
    },
    /// An argument's type is not the program's parameter type.
    #[error(
        "argument {index} is {got} but the program takes {want}; convert it to the parameter's \
         dtype first (a cotangent has its result's dtype)"
    )]
    Argument {
        /// The argument's position.
        index: usize,
        /// Its dtype and shape.
        got: String,
        /// The parameter's dtype and shape.
        want: String,
    },
    /// An argument is laid out differently from what the executable was compiled for.
    #[error(
        "argument {index} is laid out as {have}, but the executable was compiled for {want}: \
         {difference}; reshard it first with `Array::reshard(client, \
         &compiled.input_shardings()[{index}])` (JAX: `jax.device_put(x, \
         compiled.input_shardings[{index}])`)"
    )]
    Layout {
        /// The argument's position.
        index: usize,
        /// The argument's sharding, in words.
        have: String,
        /// The sharding the executable takes, in words.
        want: String,
        /// What differs (boxed: it holds two XLA shardings).
        difference: Box<tessera_sharding::named::LayoutDifference>,
    },
    /// A program was called with another number of arguments than it takes.
    #[error(
        "the program takes {want} arguments, got {got}; pass one argument per parameter, in \
         order (its `in` list)"
    )]
    ArgumentCount {
        /// How many were given.
        got: usize,
        /// How many the program takes.
        want: usize,
    },
    /// The program returns results in host memory, which the plugin's compiler cannot place
    /// there (XLA's CPU compiler has no host offloading).
    #[error(
        "the program returns {results}, but the PJRT plugin {plugin} cannot place results in \
         host memory: XLA's CPU compiler has no host offloading (JAX refuses this on CPU too). \
         Run it with the CUDA plugin (`--plugin cuda`, TESSERA_PJRT_PLUGIN=cuda), which places \
         them; or return the result in the device memory (a sharding without a memory kind) \
         and move it with `Array::reshard` to a sharding in that memory kind. Arguments in \
         host memory need no such support. (The plugin said: {detail})"
    )]
    HostResultsUnsupported {
        /// The results and their kinds, in words.
        results: String,
        /// The plugin, by name and path.
        plugin: String,
        /// The plugin's compile error.
        detail: String,
    },
    /// The program's mesh names devices the client does not have (JAX's "compiling computation
    /// that requires N logical devices, but only M XLA devices are available").
    #[error(
        "the program needs {needed} devices ({devices:?}) but the client has {available} \
         ({have:?}), without {missing:?}; open a client with more devices (`Client::cpu(N)`, \
         `--devices N`) or build the program's mesh on the client's devices"
    )]
    Devices {
        /// How many devices the program's mesh holds.
        needed: usize,
        /// The mesh's device ids, in mesh order.
        devices: Vec<i64>,
        /// How many devices the client addresses.
        available: usize,
        /// The client's device ids.
        have: Vec<i64>,
        /// The mesh's devices the client lacks.
        missing: Vec<i64>,
    },
    /// A floating-point result holds a NaN and the program checks for them
    /// ([`Jit::debug_nans`], JAX's `jax_debug_nans`).
    #[error(
        "result {result} of the program holds a NaN (debug_nans){}; \
         look at that equation's operands, or run the program on the interpreter \
         (`tessera_ir::interp::eval_closed`) to see every value",
        found_at(equation)
    )]
    Nan {
        /// The result's position.
        result: usize,
        /// The first top-level equation that made a NaN on the interpreter, in words.
        equation: Option<String>,
    },
    /// A floating-point result holds an infinity and the program checks for them
    /// ([`Jit::debug_infs`], JAX's `jax_debug_infs`).
    #[error(
        "result {result} of the program holds an infinity (debug_infs){}; \
         look at that equation's operands, or run the program on the interpreter \
         (`tessera_ir::interp::eval_closed`) to see every value",
        found_at(equation)
    )]
    Inf {
        /// The result's position.
        result: usize,
        /// The first top-level equation that made an infinity on the interpreter, in words.
        equation: Option<String>,
    },
    /// An argument is held only in part by this process (a partially addressable array of a
    /// multi-process job): a `jit` program runs in one process, on every shard (JAX refuses
    /// non-fully-addressable arrays outside a multi-process SPMD program too).
    #[error(
        "argument {index} is held only in part by this process ({held} of its {total} shards): \
         a jit program runs within one process on every shard; gather the array first (e.g. \
         `mpmd_to_spmd_reshard_across`), or compile the program for this process's devices"
    )]
    NotAddressable {
        /// The argument's position.
        index: usize,
        /// How many of its shards this process holds.
        held: usize,
        /// How many shards its sharding has.
        total: usize,
    },
    /// A result's buffers are not in the memory kind its sharding names.
    #[error(
        "result {index} should be in memory kind '{want}' but the plugin returned it in \
         '{got}'; the plugin does not honour the module's `mhlo.memory_kind`: return it in \
         '{got}' and move it with `Array::reshard`"
    )]
    ResultMemoryKind {
        /// The result's position.
        index: usize,
        /// The kind its sharding names.
        want: String,
        /// The kind of the memory its buffers are in.
        got: String,
    },
}

/// Where the interpreter first made the value a `debug_nans`/`debug_infs` check found, as the
/// end of [`JitError::Nan`]'s and [`JitError::Inf`]'s message.
fn found_at(equation: &Option<String>) -> String {
    match equation {
        Some(e) => format!(": the interpreter first makes one at {e}"),
        None => String::from(
            " (the interpreter, run on the same arguments, makes none: XLA's arithmetic \
             differs there, or an argument holds one)",
        ),
    }
}

/// Checks that `inputs` match `program`'s parameters in number, dtype and shape: PJRT would
/// otherwise reject a buffer of another size with a message about bytes ("expected parameter 1
/// of size 2 but got buffer with incompatible size 4"), or reinterpret one of the same size.
pub fn check_arguments(program: &ClosedJaxpr, inputs: &[Array]) -> Result<(), JitError> {
    let params = program.jaxpr.in_avals();
    if params.len() != inputs.len() {
        return Err(JitError::ArgumentCount {
            got: inputs.len(),
            want: params.len(),
        });
    }
    for (index, (a, p)) in inputs.iter().zip(&params).enumerate() {
        if a.dtype() != p.dtype || a.dims() != p.shape {
            return Err(JitError::Argument {
                index,
                got: a.aval().to_string(),
                want: tessera_ir::ShapedArray::new(p.dtype, &p.shape).to_string(),
            });
        }
    }
    Ok(())
}

/// `array` as devices take it. A host array is an interpreter array (`HostArray` is
/// `tessera_ir::Array`), so this is a copy of it, except that a PRNG key array becomes its
/// `u32[..., 2]` words (the same bytes): devices know no key type.
pub fn to_host(array: &Array) -> Result<HostArray, JitError> {
    tessera_mpmd::host::to_host(array).map_err(|e| JitError::Convert(e.0))
}

/// A value read from a device as the program's `dtype`: a copy of it, or keys from their
/// `u32[..., 2]` words for `DType::KeyFry`; a value of another dtype is an error.
pub fn from_host(host: &HostArray, dtype: DType) -> Result<Array, JitError> {
    tessera_mpmd::host::from_host(host, dtype).map_err(|e| JitError::Convert(e.0))
}

/// Compiles `module` SPMD over `devices` with the partitioner it was emitted for.
pub fn compile_module(
    client: &Client,
    module: &EmittedModule,
    devices: &[i64],
) -> Result<LoadedExecutable, JitError> {
    compile_module_with(client, module, devices, &Default::default())
}

/// [`compile_module`] with compiler options (`xla_*` names: `CompileOptions::overrides`).
pub fn compile_module_with(
    client: &Client,
    module: &EmittedModule,
    devices: &[i64],
    overrides: &std::collections::BTreeMap<String, tessera_pjrt::OptionOverride>,
) -> Result<LoadedExecutable, JitError> {
    let mut options = CompileOptions::spmd(devices).with_shardy(module.partitioner.is_shardy());
    options.overrides = overrides.clone();
    Ok(client.compile_cached(module.text.as_bytes(), &options)?)
}

/// Lowers `program` and compiles it for one device (with [`Partitioner::default`]).
pub fn compile(
    client: &Client,
    program: &ClosedJaxpr,
    device: i64,
) -> Result<LoadedExecutable, JitError> {
    let module = lower_closed(
        program,
        &LowerOptions {
            num_partitions: 1,
            ..LowerOptions::default()
        },
    )?;
    compile_module(client, &module, &[device])
}

/// Compiles `program` for one device and runs it on `inputs`.
pub fn run_on_device(
    client: &Client,
    program: &ClosedJaxpr,
    inputs: &[Array],
    device: i32,
) -> Result<Vec<Array>, JitError> {
    check_arguments(program, inputs)?;
    let exe = compile(client, program, i64::from(device))?;
    let buffers = inputs
        .iter()
        .map(|a| Ok(Buffer::from_host_to(client, &to_host(a)?, device)?))
        .collect::<Result<Vec<_>, JitError>>()?;
    let outputs = exe.execute(&[buffers.iter().collect()])?;
    let out_avals = program.jaxpr.out_avals();
    outputs[0]
        .iter()
        .zip(&out_avals)
        .map(|(b, aval)| from_host(&b.to_host()?, aval.dtype))
        .collect()
}

mod cache;
mod device;
mod layout;
mod memory;
mod mpmd_args;
mod nans;
mod unspecified;

pub use cache::JitCache;
pub use device::{default_device, single_device_sharding};

/// The mesh of the first `shard_map` or `sharding_constraint` in `program` (nested programs,
/// `cond` branches among them, included), if any: the devices an SPMD run of it needs.
pub fn program_mesh(
    program: &ClosedJaxpr,
) -> Result<Option<tessera_sharding::AbstractMesh>, tessera_ir::IrError> {
    for eqn in &program.jaxpr.eqns {
        match eqn.prim {
            tessera_ir::Prim::ShardMap => {
                return tessera_ir::prim::ShardMapParams::read(&eqn.params).map(|p| Some(p.mesh));
            }
            tessera_ir::Prim::ShardingConstraint => {
                return tessera_ir::prim::ConstraintParams::read(&eqn.params).map(|p| Some(p.mesh));
            }
            _ => {}
        }
        for inner in eqn.params.jaxprs() {
            if let Some(mesh) = program_mesh(inner)? {
                return Ok(Some(mesh));
            }
        }
    }
    Ok(None)
}

use tessera_pjrt::Array as DeviceArray;

pub use mpmd_args::{JitArg, mpmd_argument};
use tessera_sharding::NamedSharding;

/// A program with the shardings of its arguments and results: `jit(f)` with `in_shardings` and
/// `out_shardings`. Lowering gives StableHLO whose entry carries the shardings in the form of its
/// partitioner (`sdy.sharding` over an `sdy.mesh` for Shardy, `mhlo.sharding` for GSPMD);
/// compiling gives an executable over the mesh's devices that takes and returns
/// [`DeviceArray`]s.
#[derive(Debug, Clone)]
pub struct Jit {
    program: ClosedJaxpr,
    in_shardings: Vec<NamedSharding>,
    out_shardings: Vec<NamedSharding>,
    /// `(argument, result)` pairs: the argument's buffers are donated to the result.
    donated: Vec<(usize, usize)>,
    partitioner: Partitioner,
    /// Per result, whether XLA chooses its sharding (`UNSPECIFIED`; `jit/unspecified.rs`).
    unspecified: Vec<bool>,
    /// Per argument, whether XLA chooses its sharding (`AUTO`; `jit/unspecified.rs`).
    auto_inputs: Vec<bool>,
    /// Per argument, whether it takes the sharding of the array passed (`UNSPECIFIED`;
    /// `jit/unspecified.rs`).
    unspecified_inputs: Vec<bool>,
    /// Whether arguments the program never reads stay in the compiled program.
    keep_unused: bool,
    /// Compiler options passed to XLA (JAX's `compiler_options`).
    compiler_options: std::collections::BTreeMap<String, tessera_pjrt::OptionOverride>,
    /// Whether each call checks its floating-point results for NaNs (`jit/nans.rs`).
    debug_nans: bool,
    /// Whether each call checks its floating-point results for infinities (`jit/nans.rs`).
    debug_infs: bool,
}

/// A lowered [`Jit`]: the StableHLO module and its device assignment.
#[derive(Debug, Clone)]
pub struct Lowered {
    jit: Jit,
    module: tessera_stablehlo::EmittedModule,
    devices: Vec<i64>,
    /// The arguments the module takes, by position in the call.
    kept: Vec<usize>,
}

/// A compiled [`Jit`].
pub struct Compiled {
    jit: Jit,
    /// `None` for a trivial program (`jit_trivial.rs`), which runs without an executable.
    executable: Option<std::sync::Arc<LoadedExecutable>>,
    client: Client,
    devices: Vec<i64>,
    text: String,
    kept: Vec<usize>,
}

impl Jit {
    /// `program` with one sharding per argument and per result (all on the same mesh).
    pub fn new(
        program: ClosedJaxpr,
        in_shardings: Vec<NamedSharding>,
        out_shardings: Vec<NamedSharding>,
    ) -> Result<Jit, JitError> {
        let (ins, outs) = (program.jaxpr.invars.len(), program.jaxpr.outvars.len());
        if in_shardings.len() != ins || out_shardings.len() != outs {
            return Err(JitError::Convert(format!(
                "the program takes {ins} arguments and returns {outs} results, but {} input and {} output shardings were given",
                in_shardings.len(),
                out_shardings.len()
            )));
        }
        Ok(Jit {
            program,
            in_shardings,
            out_shardings,
            donated: Vec::new(),
            partitioner: Partitioner::default(),
            unspecified: vec![false; outs],
            auto_inputs: vec![false; ins],
            unspecified_inputs: vec![false; ins],
            keep_unused: false,
            compiler_options: Default::default(),
            debug_nans: false,
            debug_infs: false,
        })
    }

    /// The same program compiled with XLA option `name` set to `value` (JAX's
    /// `compile(compiler_options={name: value})`): a `DebugOptions` field such as
    /// `xla_cpu_enable_fast_math` or `xla_dump_to`. The plugin refuses a name it does not know
    /// when the program compiles.
    pub fn with_compiler_option(mut self, name: &str, value: tessera_pjrt::OptionOverride) -> Jit {
        self.compiler_options.insert(name.to_owned(), value);
        self
    }

    /// Whether arguments the program never reads stay in the compiled program (JAX's
    /// `keep_unused`; by default they are left out, and a call still takes and checks them but
    /// passes nothing for them: see `jit_unused.rs`).
    pub fn keep_unused(mut self, keep: bool) -> Jit {
        self.keep_unused = keep;
        self
    }

    /// The same program lowered and compiled for `partitioner` (by default
    /// [`Partitioner::default`]: `TESSERA_PARTITIONER`, else the built-in one).
    pub fn with_partitioner(mut self, partitioner: Partitioner) -> Jit {
        self.partitioner = partitioner;
        self
    }

    /// The partitioner it is lowered and compiled for.
    pub fn partitioner(&self) -> Partitioner {
        self.partitioner
    }

    /// The arguments' shardings.
    pub fn in_shardings(&self) -> &[NamedSharding] {
        &self.in_shardings
    }

    /// The results' shardings.
    pub fn out_shardings(&self) -> &[NamedSharding] {
        &self.out_shardings
    }

    /// The same program donating arguments `argnums` (JAX's `donate_argnums`): each donated
    /// argument's buffers are reused for a result of the same type and sharding, and the array
    /// passed for it is deleted by [`Compiled::call_donated`]; using it afterwards is an error
    /// naming it. An argument no result can reuse is refused.
    pub fn donate_argnums(mut self, argnums: &[usize]) -> Result<Jit, JitError> {
        let jaxpr = &self.program.jaxpr;
        let (in_avals, out_avals) = (jaxpr.in_avals(), jaxpr.out_avals());
        let mut taken = vec![false; out_avals.len()];
        let mut donated = Vec::new();
        for &arg in argnums {
            let aval = in_avals.get(arg).ok_or_else(|| {
                JitError::Convert(format!(
                    "donate_argnums names argument {arg}, but the program takes {}",
                    in_avals.len()
                ))
            })?;
            if donated.iter().any(|&(a, _)| a == arg) {
                continue;
            }
            if self.auto_inputs[arg] {
                return Err(JitError::Convert(format!(
                    "argument {arg} is donated, but XLA chooses its sharding (with_auto_inputs), \
                     so no result is known to share its layout; give it a sharding to donate it"
                )));
            }
            let output = (0..out_avals.len())
                .find(|&o| {
                    !taken[o]
                        && !self.unspecified[o]
                        && out_avals[o].shape == aval.shape
                        && out_avals[o].dtype == aval.dtype
                        && self.out_shardings[o]
                            .is_equivalent_to(&self.in_shardings[arg], aval.shape.len())
                            .unwrap_or(false)
                })
                .ok_or_else(|| {
                    JitError::Convert(format!(
                        "argument {arg} ({aval}) is donated, but no result left has its type and sharding, so nothing could reuse its buffers; donate only arguments a result can replace"
                    ))
                })?;
            taken[output] = true;
            donated.push((arg, output));
        }
        self.donated = donated;
        Ok(self)
    }

    /// Per argument, the result it is donated to.
    fn aliased_outputs(&self) -> Vec<Option<usize>> {
        let mut aliases = vec![None; self.program.jaxpr.invars.len()];
        for &(arg, output) in &self.donated {
            aliases[arg] = Some(output);
        }
        aliases
    }

    fn devices(&self) -> Result<Vec<i64>, JitError> {
        let first = self.in_shardings.iter().chain(&self.out_shardings).next();
        let mesh = first
            .and_then(|s| s.concrete_mesh())
            .ok_or_else(|| JitError::Convert("jit needs shardings on a concrete mesh".into()))?;
        let devices = mesh.device_ids().to_vec();
        for s in self.in_shardings.iter().chain(&self.out_shardings) {
            let other = s
                .concrete_mesh()
                .map(|m| m.device_ids().to_vec())
                .unwrap_or_default();
            if other != devices {
                return Err(JitError::Convert(format!(
                    "shardings are on different device assignments: {devices:?} and {other:?}; put every argument and result on one mesh"
                )));
            }
        }
        Ok(devices)
    }

    /// Lowers to StableHLO with the shardings on the entry's arguments and results.
    /// Unless `keep_unused`, arguments the program never reads are left out of the module.
    pub fn lower(&self) -> Result<Lowered, JitError> {
        let devices = self.devices()?;
        if devices.len() > 1 && tessera_ir::prim::jaxpr_has_ordered_effects(&self.program.jaxpr) {
            return Err(JitError::OrderedEffects {
                devices: devices.len(),
            });
        }
        // Arguments whose sharding XLA chooses are read back by position: all are kept then.
        let mut keep = if self.keep_unused || self.auto_inputs.contains(&true) {
            vec![true; self.in_shardings.len()]
        } else {
            crate::jit_unused::read_arguments(&self.program.jaxpr)
        };
        for &(arg, _) in &self.donated {
            keep[arg] = true;
        }
        let kept: Vec<usize> = (0..keep.len()).filter(|&i| keep[i]).collect();
        let aliases = self.aliased_outputs();
        let options = LowerOptions {
            num_partitions: devices.len(),
            arg_shardings: kept
                .iter()
                .map(|&i| (!self.auto_inputs[i]).then(|| self.in_shardings[i].clone()))
                .collect(),
            result_shardings: (self.out_shardings.iter().zip(&self.unspecified))
                .map(|(s, &open)| (!open).then(|| s.clone()))
                .collect(),
            aliased_outputs: kept.iter().map(|&i| aliases[i]).collect(),
            // A multi-device program holding host callbacks is lowered for GSPMD.
            partitioner: self
                .partitioner
                .for_callbacks(devices.len(), [&self.program]),
            attention: Default::default(),
        };
        let program = crate::jit_unused::keep_arguments(&self.program, &keep);
        let module = lower_closed(&program, &options)?;
        Ok(Lowered {
            jit: self.clone(),
            module,
            devices,
            kept,
        })
    }
}

impl Lowered {
    /// The StableHLO text.
    pub fn as_text(&self) -> &str {
        &self.module.text
    }

    /// The partitioner the module was lowered for (its compile must use the same).
    pub fn partitioner(&self) -> Partitioner {
        self.module.partitioner
    }

    /// The arguments the module takes, by their position in a call (all of them with
    /// `keep_unused`, or when XLA chooses an argument's sharding).
    pub fn kept_arguments(&self) -> &[usize] {
        &self.kept
    }

    /// Compiles for the mesh's devices. A mesh naming devices the client lacks is
    /// [`JitError::Devices`], before anything is compiled. A memory kind the devices lack is refused naming the
    /// kinds they have; results in host memory on a plugin whose compiler cannot place them
    /// there (the CPU plugins) are [`JitError::HostResultsUnsupported`]. A trivial program (its results are its arguments, laid out alike, or its constants) is
    /// not compiled at all ([`Compiled::is_trivial`]).
    pub fn compile(&self, client: &Client) -> Result<Compiled, JitError> {
        layout::check_devices(client, &self.devices)?;
        let jit = &self.jit;
        let declared = jit.out_shardings.iter().zip(&jit.unspecified);
        let given = jit.in_shardings.iter().zip(&jit.auto_inputs);
        let shardings: Vec<NamedSharding> = (given.filter(|(_, auto)| !**auto).map(|(s, _)| s))
            .chain(declared.filter(|(_, open)| !**open).map(|(s, _)| s))
            .cloned()
            .collect();
        let device = self.devices.first().copied().unwrap_or_default();
        layout::check_memory_kinds(client, device, &shardings)?;
        let chooses = jit.unspecified.contains(&true) || jit.auto_inputs.contains(&true);
        let trivial = !chooses
            && crate::jit_trivial::is_trivial(
                &jit.program,
                &jit.in_shardings,
                &jit.out_shardings,
                !jit.donated.is_empty(),
            );
        let executable = match trivial {
            true => None,
            false => {
                let mut options = CompileOptions::spmd(&self.devices)
                    .with_shardy(self.module.partitioner.is_shardy());
                options.overrides = jit.compiler_options.clone();
                if jit.unspecified.contains(&true) {
                    options = options.with_output_propagation(&jit.unspecified);
                }
                if jit.auto_inputs.contains(&true) {
                    let kept: Vec<bool> = self.kept.iter().map(|&i| jit.auto_inputs[i]).collect();
                    options = options.with_parameter_propagation(&kept);
                }
                let outputs: Vec<Option<&NamedSharding>> = (jit.out_shardings.iter())
                    .zip(&jit.unspecified)
                    .map(|(s, &open)| (!open).then_some(s))
                    .collect();
                let placed = memory::placed_results(&outputs);
                let executable = client
                    .compile_cached(self.module.text.as_bytes(), &options)
                    .map_err(|e| memory::compile_error(e, client, &placed))?;
                memory::check_compiled_kinds(&executable, &placed)?;
                Some(std::sync::Arc::new(executable))
            }
        };
        let mut compiled = Compiled {
            jit: self.jit.clone(),
            executable,
            client: client.clone(),
            devices: self.devices.clone(),
            text: self.module.text.clone(),
            kept: self.kept.clone(),
        };
        if !trivial {
            compiled.adopt_chosen_shardings()?;
        }
        Ok(compiled)
    }
}

impl Compiled {
    /// The same executable taking and returning arrays laid out by `jit`'s shardings, which
    /// the cache has found equivalent to this one's.
    fn with_jit(&self, mut jit: Jit) -> Compiled {
        for (k, &open) in jit.unspecified.iter().enumerate() {
            if open {
                jit.out_shardings[k] = self.jit.out_shardings[k].clone();
            }
        }
        for (k, &auto) in jit.auto_inputs.iter().enumerate() {
            if auto {
                jit.in_shardings[k] = self.jit.in_shardings[k].clone();
            }
        }
        Compiled {
            jit,
            executable: self.executable.clone(),
            client: self.client.clone(),
            devices: self.devices.clone(),
            text: self.text.clone(),
            kept: self.kept.clone(),
        }
    }

    /// The shardings the executable takes its arguments in (JAX's `compiled.input_shardings`):
    /// as declared, and for an argument left to XLA ([`Jit::with_auto_inputs`]) the one it
    /// chose. An argument laid out otherwise is refused by [`Compiled::call`] and can be moved
    /// there with `Array::reshard`.
    pub fn input_shardings(&self) -> &[NamedSharding] {
        &self.jit.in_shardings
    }

    /// The shardings the executable's results are returned in: as declared, and for a result
    /// left to XLA ([`Jit::with_unspecified_outputs`]) the one it chose.
    pub fn output_shardings(&self) -> &[NamedSharding] {
        &self.jit.out_shardings
    }

    /// The StableHLO the executable was compiled from.
    pub fn as_text(&self) -> &str {
        &self.text
    }

    /// Whether the program runs without an executable (the trivial-program fast path).
    pub fn is_trivial(&self) -> bool {
        self.executable.is_none()
    }

    fn executable(&self) -> Result<&LoadedExecutable, JitError> {
        self.executable.as_deref().ok_or_else(|| {
            JitError::Convert(
                "the program's results are its arguments or constants, so nothing was compiled \
                 (the trivial-program fast path): there is no executable to analyse"
                    .into(),
            )
        })
    }

    /// The optimized module XLA compiled (per-device shapes after partitioning).
    pub fn optimized_program(&self) -> Result<tessera_pjrt::OptimizedProgram, JitError> {
        Ok(self.executable()?.optimized_program()?)
    }

    /// XLA's cost analysis (FLOPs, bytes accessed, ...: JAX's `compiled.cost_analysis()`); a
    /// plugin that does not implement it (the default CPU plugin) gives its `Unimplemented`
    /// error.
    pub fn cost_analysis(&self) -> Result<tessera_pjrt::CostAnalysis, JitError> {
        Ok(self.executable()?.cost_analysis()?)
    }

    /// XLA's memory analysis (argument, output, alias, temporary and code bytes: JAX's
    /// `compiled.memory_analysis()`).
    pub fn memory_analysis(&self) -> Result<tessera_pjrt::MemoryAnalysis, JitError> {
        Ok(self.executable()?.memory_analysis()?)
    }

    /// The shardings XLA gave the results, read back from the compiled executable and put on
    /// the program's mesh (as JAX's pxla does): for each result, a `NamedSharding`.
    /// A trivial program's are its declared output shardings.
    pub fn compiled_output_shardings(&self) -> Result<Vec<NamedSharding>, JitError> {
        if self.is_trivial() {
            return Ok(self.jit.out_shardings.clone());
        }
        let program = self.optimized_program()?;
        let hlo = program.output_shardings()?.unwrap_or_default();
        let mesh = self
            .jit
            .out_shardings
            .first()
            .and_then(NamedSharding::concrete_mesh);
        let Some(mesh) = mesh else {
            return Err(JitError::Convert(
                "the program's output shardings name no concrete mesh".into(),
            ));
        };
        hlo.iter()
            .map(|h| {
                NamedSharding::from_hlo_sharding(h, mesh)
                    .map_err(|e| JitError::Convert(format!("output sharding {h}: {e}")))
            })
            .collect()
    }

    /// The shardings XLA gave the arguments, read back from the compiled executable and put on
    /// the program's mesh (JAX's `compiled.input_shardings` after compilation): with explicit
    /// input shardings, layouts equivalent to [`Compiled::input_shardings`].
    pub fn compiled_input_shardings(&self) -> Result<Vec<NamedSharding>, JitError> {
        let hlo = self.optimized_program()?.parameter_shardings()?;
        let mesh = self
            .jit
            .in_shardings
            .iter()
            .chain(&self.jit.out_shardings)
            .find_map(NamedSharding::concrete_mesh)
            .ok_or_else(|| {
                JitError::Convert("the program's shardings name no concrete mesh".into())
            })?;
        hlo.iter()
            .map(|h| {
                NamedSharding::from_hlo_sharding(h, mesh)
                    .map_err(|e| JitError::Convert(format!("parameter sharding {h}: {e}")))
            })
            .collect()
    }

    /// Runs on arrays laid out by the input shardings; returns arrays laid out by the output
    /// shardings. Types and device assignments are checked first. A program that donates
    /// arguments runs with [`Compiled::call_donated`] only.
    pub fn call(&self, args: &[&DeviceArray]) -> Result<Vec<DeviceArray>, JitError> {
        if let Some(&(arg, _)) = self.jit.donated.first() {
            return Err(JitError::Convert(format!(
                "the program donates argument {arg}; run it with call_donated, which takes the donated arrays and deletes them"
            )));
        }
        self.run(args)
    }

    /// Runs a program that donates arguments: like [`Compiled::call`], then deletes the arrays
    /// passed for donated arguments (their buffers now hold results). Passing a deleted array
    /// again is an error naming the argument.
    pub fn call_donated(&self, args: &mut [DeviceArray]) -> Result<Vec<DeviceArray>, JitError> {
        let outputs = {
            let refs: Vec<&DeviceArray> = args.iter().collect();
            self.run(&refs)?
        };
        for &(arg, _) in &self.jit.donated {
            if let Some(a) = args.get_mut(arg) {
                a.delete();
            }
        }
        Ok(outputs)
    }

    fn run(&self, args: &[&DeviceArray]) -> Result<Vec<DeviceArray>, JitError> {
        let outputs = self.execute(args)?;
        if self.jit.debug_nans {
            nans::check(nans::Bad::Nan, &self.jit.program, args, &outputs)?;
        }
        if self.jit.debug_infs {
            nans::check(nans::Bad::Inf, &self.jit.program, args, &outputs)?;
        }
        Ok(outputs)
    }

    fn execute(&self, args: &[&DeviceArray]) -> Result<Vec<DeviceArray>, JitError> {
        let jaxpr = &self.jit.program.jaxpr;
        let in_avals = jaxpr.in_avals();
        if args.len() != in_avals.len() {
            return Err(JitError::Convert(format!(
                "the program takes {} arguments, got {}",
                in_avals.len(),
                args.len()
            )));
        }
        for (i, ((arg, aval), sharding)) in args
            .iter()
            .zip(&in_avals)
            .zip(&self.jit.in_shardings)
            .enumerate()
        {
            if arg.is_deleted() {
                let donated = self.jit.donated.iter().any(|&(a, _)| a == i);
                return Err(JitError::Convert(format!(
                    "argument {i} ({aval}) is a deleted array{}; pass a live array",
                    if donated {
                        " (donated to an earlier call of this program)"
                    } else {
                        " (donated to an earlier call, or deleted)"
                    }
                )));
            }
            if arg.shape() != aval.shape.as_slice()
                || arg.element_type() != tessera_pjrt::ElementType::from_dtype(aval.dtype)
            {
                return Err(JitError::Convert(format!(
                    "argument {i} is {:?}{:?} but the program takes {aval}",
                    arg.element_type(),
                    arg.shape()
                )));
            }
            layout::check_argument_layout(i, arg.sharding(), sharding, aval.shape.len())?;
            let held = arg.addressable_shards()?.len();
            let total = arg.sharding().num_devices() as usize;
            if held != total {
                return Err(JitError::NotAddressable {
                    index: i,
                    held,
                    total,
                });
            }
        }
        let Some(executable) = &self.executable else {
            let jit = &self.jit;
            return crate::jit_trivial::run(
                &self.client,
                &jit.program,
                &jit.in_shardings,
                &jit.out_shardings,
                args,
            );
        };
        let per_arg = self
            .kept
            .iter()
            .map(|&i| args[i].addressable_shards())
            .collect::<Result<Vec<_>, _>>()?;
        let lists: Vec<Vec<&Buffer>> = (0..self.devices.len())
            .map(|d| per_arg.iter().map(|s| s[d].buffer.as_ref()).collect())
            .collect();
        let mut per_device = executable.execute(&lists)?;
        let out_avals = jaxpr.out_avals();
        let mut outputs = Vec::with_capacity(out_avals.len());
        for (k, (aval, sharding)) in out_avals
            .iter()
            .zip(&self.jit.out_shardings)
            .enumerate()
            .rev()
        {
            let buffers: Vec<Buffer> = per_device.iter_mut().map(|outs| outs.remove(k)).collect();
            if sharding.memory_kind().is_some() {
                memory::check_result_memory(k, sharding, &buffers)?;
            }
            outputs.push(DeviceArray::from_shards(
                &aval.shape,
                tessera_pjrt::ElementType::from_dtype(aval.dtype),
                sharding,
                buffers,
            )?);
        }
        outputs.reverse();
        Ok(outputs)
    }
}

/// Compiles a program that contains `shard_map`s or sharding constraints for the devices of
/// their mesh (positions `0..n` of `client`'s devices, all on one mesh) and runs it on host
/// `inputs`, which are replicated in and gathered out (the `shard_map`s split and assemble the
/// blocks, as `jax.jit(shard_map(f))` does with unspecified shardings; constraints change the
/// layout inside, not the values).
pub fn run_spmd(
    client: &Client,
    program: &ClosedJaxpr,
    inputs: &[Array],
) -> Result<Vec<Array>, JitError> {
    let mesh = program_mesh(program)
        .map_err(|e| JitError::Convert(e.to_string()))?
        .ok_or_else(|| {
            JitError::Convert(
                "the program has no shard_map or sharding constraint; use run_on_device".into(),
            )
        })?;
    let mesh = tessera_sharding::Mesh::iota(mesh);
    let replicated = |n: usize| {
        NamedSharding::new(&mesh, tessera_sharding::PartitionSpec::replicated())
            .map(|s| vec![s; n])
            .map_err(|e| JitError::Convert(e.to_string()))
    };
    let jaxpr = &program.jaxpr;
    let (ins, outs) = (
        replicated(jaxpr.invars.len())?,
        replicated(jaxpr.outvars.len())?,
    );
    let compiled = Jit::new(program.clone(), ins.clone(), outs)?
        .lower()?
        .compile(client)?;
    let args = inputs
        .iter()
        .zip(&ins)
        .map(|(a, s)| Ok(DeviceArray::device_put(client, &to_host(a)?, s)?))
        .collect::<Result<Vec<_>, JitError>>()?;
    let results = compiled.call(&args.iter().collect::<Vec<_>>())?;
    results
        .iter()
        .zip(jaxpr.out_avals())
        .map(|(r, aval)| from_host(&r.to_host()?, aval.dtype))
        .collect()
}
