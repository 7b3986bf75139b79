//! Lowering a closed jaxpr to a StableHLO module. Each primitive has one rule, reached through an
//! exhaustive `match` in [`lower_eqn`], in the file of its family (mirroring `tessera-ir`'s
//! `prim/` layout). Nested `jit` calls become private functions called with `func.call`.

mod attention;
mod callback;
mod constraint;
mod control;
mod conv;
mod elementwise;
mod flow;
mod indexing;
mod loops;
mod memory;
mod numeric;
mod p2p;
mod parallel;
mod pending;
mod random;
mod reduce;
mod sort;
mod structural;
mod window;

use std::collections::HashMap;

use tessera_ir::{Atom, ClosedJaxpr, DType, Eqn, Jaxpr, Prim, ShapedArray, Var};

use crate::context::LowerError;
use crate::emit::{ArgSpec, Body, EmittedModule, ModuleEmitter, ResultSpec, tensor_type};
use crate::sharding::Partitioner;
use melior::ir::Value;
use tessera_sharding::NamedSharding;

pub use attention::AttentionLowering;
pub use memory::DEFAULT_MEMORY_KIND;

/// How the entry function is laid out over devices, and for which partitioner. The memory kinds
/// of the argument and result shardings are lowered as JAX lowers them (`mhlo.memory_kind`, and
/// `annotate_device_placement` on results outside the default memory).
#[derive(Debug, Clone, Default)]
pub struct LowerOptions {
    /// SPMD partitions (devices) the module is compiled for.
    pub num_partitions: usize,
    /// The sharding of each argument (`None`: left to the partitioner), emitted as the
    /// partitioner reads it (`sdy.sharding` or `mhlo.sharding`).
    pub arg_shardings: Vec<Option<NamedSharding>>,
    /// The sharding of each result.
    pub result_shardings: Vec<Option<NamedSharding>>,
    /// Per argument, the result its buffer is donated to (`tf.aliasing_output`); missing
    /// entries donate nothing.
    pub aliased_outputs: Vec<Option<usize>>,
    /// The partitioner the module is annotated for (by default [`Partitioner::default`]:
    /// `TESSERA_PARTITIONER`, else the built-in one); compile it with the same one.
    pub partitioner: Partitioner,
    /// How `dot_product_attention` is lowered (decomposed by default).
    pub attention: AttentionLowering,
}

/// The MLIR element type of a dtype.
pub fn element_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "i1",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "ui8",
        DType::U16 => "ui16",
        DType::U32 => "ui32",
        DType::U64 => "ui64",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::KeyFry => "ui32",
        DType::Token => p2p::TOKEN,
    }
}

/// The MLIR tensor type of an aval.
pub fn mlir_type(aval: &ShapedArray) -> String {
    if aval.dtype.is_token() {
        return p2p::TOKEN.to_owned();
    }
    if aval.dtype.is_key() {
        // A key array's physical type: its two `u32` words in a trailing dimension.
        let mut dims = aval.shape.clone();
        dims.push(2);
        return tensor_type(&dims, element_type(aval.dtype));
    }
    tensor_type(&aval.shape, element_type(aval.dtype))
}

/// Lowers `closed` (with its constants inlined as `stablehlo.constant`s) to a verified module
/// whose public `main` takes the jaxpr's arguments and returns its results. A `treduce` becomes
/// one `stablehlo.while` (see [`lower_closed_unrolled`] for the unrolled form).
pub fn lower_closed(
    closed: &ClosedJaxpr,
    options: &LowerOptions,
) -> Result<EmittedModule, LowerError> {
    lower_module(closed, options)
}

/// Like [`lower_closed`] with every `treduce` unrolled first (`passes::unroll_treduce`): one
/// copy of the body per micro-batch, so module size and compile time grow with their number.
pub fn lower_closed_unrolled(
    closed: &ClosedJaxpr,
    options: &LowerOptions,
) -> Result<EmittedModule, LowerError> {
    let unrolled = tessera_ir::passes::unroll_treduce(closed).map_err(ir)?;
    lower_module(&unrolled, options)
}

fn lower_module(closed: &ClosedJaxpr, options: &LowerOptions) -> Result<EmittedModule, LowerError> {
    // The mesh a `reshard`'s destination is over: the one set around the lowering
    // (`trace::use_mesh`), else that of the entry shardings (a `jit`'s `ctx_mesh` overrides
    // either inside its call).
    let entry_mesh = options
        .arg_shardings
        .iter()
        .chain(&options.result_shardings)
        .flatten()
        .next()
        .map(|s| s.mesh().clone());
    match (tessera_ir::trace::context_mesh(), entry_mesh) {
        (None, Some(mesh)) => tessera_ir::trace::use_mesh(&mesh, || {
            crate::with_context(|context| lower_in(context, closed, options))
        }),
        (Some(_) | None, _) => crate::with_context(|context| lower_in(context, closed, options)),
    }
}

fn lower_in(
    context: &melior::Context,
    closed: &ClosedJaxpr,
    options: &LowerOptions,
) -> Result<EmittedModule, LowerError> {
    let emitter = ModuleEmitter::new(
        context,
        "jit_main",
        options.num_partitions.max(1),
        1,
        options.partitioner,
    )?;
    emitter.set_attention(options.attention);
    let mut functions = Functions {
        emitter: Some(&emitter),
        next: 0,
    };
    let jaxpr = &closed.jaxpr;
    let out_avals = jaxpr.out_avals();
    let memory = memory::entry_memory_kinds(&options.arg_shardings, &options.result_shardings);
    let args: Vec<ArgSpec> = jaxpr
        .invars
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let mut arg = ArgSpec::new(mlir_type(jaxpr.aval(v)))
                .with_sharding(options.arg_shardings.get(i).cloned().flatten())
                .with_memory_kind(memory.args.get(i).cloned().flatten());
            arg.aliased_output = options.aliased_outputs.get(i).copied().flatten();
            arg
        })
        .collect();
    let results: Vec<ResultSpec> = out_avals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            ResultSpec::new(mlir_type(a))
                .with_sharding(options.result_shardings.get(i).cloned().flatten())
                .with_memory_kind(memory.results.get(i).cloned().flatten())
        })
        .collect();
    emitter.add_function("main", &args, &results, true, |body, params| {
        let consts = closed
            .consts
            .iter()
            .map(|c| control::constant_array(body, c))
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = lower_body(body, jaxpr, &consts, params, &mut functions)?;
        memory::place_results(body, outputs, &memory.results, &out_avals)
    })?;
    emitter.finish()
}

/// Names and emits private functions for nested jaxprs.
pub(crate) struct Functions<'e, 'c> {
    emitter: Option<&'e ModuleEmitter<'c>>,
    next: usize,
}

impl Functions<'_, '_> {
    /// Emits `closed` as a private function and returns its symbol name.
    pub(crate) fn add(&mut self, name: &str, closed: &ClosedJaxpr) -> Result<String, LowerError> {
        let symbol = format!("{}_{}", sanitize(name), self.next);
        self.next += 1;
        let jaxpr = &closed.jaxpr;
        let args: Vec<ArgSpec> = jaxpr
            .invars
            .iter()
            .map(|&v| ArgSpec::new(mlir_type(jaxpr.aval(v))))
            .collect();
        let results: Vec<ResultSpec> = jaxpr
            .out_avals()
            .iter()
            .map(|a| ResultSpec::new(mlir_type(a)))
            .collect();
        let emitter = self.emitter.ok_or_else(|| {
            LowerError::Build(
                "nested calls cannot be lowered here; inline them first (passes::inline_calls)"
                    .into(),
            )
        })?;
        let mut nested = Functions {
            emitter: Some(emitter),
            next: self.next + 1000,
        };
        emitter.add_function(&symbol, &args, &results, false, |body, params| {
            let consts = closed
                .consts
                .iter()
                .map(|c| control::constant_array(body, c))
                .collect::<Result<Vec<_>, _>>()?;
            lower_body(body, jaxpr, &consts, params, &mut nested)
        })?;
        self.next = nested.next.saturating_sub(1000).max(self.next);
        Ok(symbol)
    }
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "f".into() } else { s }
}

/// Lowers a program without nested calls into `body` (e.g. a part of a composed module), given
/// values for its arguments; returns the values of its results.
pub fn lower_flat<'c, 'b>(
    body: &Body<'c, 'b>,
    program: &ClosedJaxpr,
    args: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let consts = program
        .consts
        .iter()
        .map(|c| control::constant_array(body, c))
        .collect::<Result<Vec<_>, _>>()?;
    lower_body(
        body,
        &program.jaxpr,
        &consts,
        args,
        &mut Functions {
            emitter: None,
            next: 0,
        },
    )
}

/// Lowers the equations of `jaxpr` into `body`, given values for its constvars and invars.
pub(crate) fn lower_body<'c, 'b>(
    body: &Body<'c, 'b>,
    jaxpr: &Jaxpr,
    consts: &[Value<'c, 'b>],
    args: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let mut env: HashMap<Var, Value<'c, 'b>> = HashMap::new();
    for (&v, &value) in jaxpr
        .constvars
        .iter()
        .zip(consts)
        .chain(jaxpr.invars.iter().zip(args))
    {
        env.insert(v, value);
    }
    // The order token of the body's ordered `io_callback`s (`callback.rs`).
    let mut order: Option<Value<'c, 'b>> = None;
    for eqn in &jaxpr.eqns {
        let inputs = eqn
            .inputs
            .iter()
            .map(|a| operand(body, jaxpr, &env, a))
            .collect::<Result<Vec<_>, _>>()?;
        let in_avals: Vec<ShapedArray> = eqn
            .inputs
            .iter()
            .map(|a| jaxpr.atom_aval(a).clone())
            .collect();
        let out_avals: Vec<ShapedArray> =
            eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        let ctx = Ctx {
            body,
            in_avals: &in_avals,
            out_avals: &out_avals,
        };
        let results = if tessera_ir::prim::is_ordered(eqn.prim, &eqn.params) {
            let mut results = callback::ordered(&ctx, eqn.prim, &eqn.params, &inputs, order)?;
            order = results.pop();
            Ok(results)
        } else {
            lower_eqn(&ctx, eqn, &inputs, functions)
        };
        let results = results.map_err(|e| match e {
            LowerError::Build(m) => LowerError::Build(format!("{}: {m}", eqn.prim.name())),
            other => other,
        })?;
        for (&v, value) in eqn.outputs.iter().zip(results) {
            env.insert(v, value);
        }
    }
    jaxpr
        .outvars
        .iter()
        .map(|a| operand(body, jaxpr, &env, a))
        .collect()
}

fn operand<'c, 'b>(
    body: &Body<'c, 'b>,
    _jaxpr: &Jaxpr,
    env: &HashMap<Var, Value<'c, 'b>>,
    atom: &Atom,
) -> Result<Value<'c, 'b>, LowerError> {
    match atom {
        Atom::Var(v) => env
            .get(v)
            .copied()
            .ok_or_else(|| LowerError::Build(format!("variable {} has no value", v.0))),
        Atom::Lit(l) => control::constant_elem(body, l.value, &l.aval),
    }
}

/// What a lowering rule sees besides its operands.
pub(crate) struct Ctx<'a, 'c, 'b> {
    pub body: &'a Body<'c, 'b>,
    pub in_avals: &'a [ShapedArray],
    pub out_avals: &'a [ShapedArray],
}

impl<'c, 'b> Ctx<'_, 'c, 'b> {
    /// Emits one generic operation with result types given as avals.
    pub fn op(
        &self,
        name: &str,
        operands: &[Value<'c, 'b>],
        results: &[&ShapedArray],
        attrs: &[(&str, String)],
    ) -> Result<Vec<Value<'c, 'b>>, LowerError> {
        let types: Vec<String> = results.iter().map(|a| mlir_type(a)).collect();
        let refs: Vec<&str> = types.iter().map(String::as_str).collect();
        self.body.op(name, operands, &refs, attrs)
    }

    /// Like [`Ctx::op`] with one result.
    pub fn op1(
        &self,
        name: &str,
        operands: &[Value<'c, 'b>],
        result: &ShapedArray,
        attrs: &[(&str, String)],
    ) -> Result<Value<'c, 'b>, LowerError> {
        Ok(self.op(name, operands, &[result], attrs)?.remove(0))
    }
}

/// The one place that maps every primitive to its lowering rule.
fn lower_eqn<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    eqn: &Eqn,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    use Prim::*;
    // structural rules on key arrays read their physical parameters.
    let physical = random::physical_params(eqn.prim, &eqn.params, ctx.in_avals, ctx.out_avals)?;
    let p = physical.as_ref().unwrap_or(&eqn.params);
    match eqn.prim {
        Neg | Abs | Sign | Exp | Exp2 | Log | Log1p | Expm1 | Tanh | Logistic | Sin | Cos
        | Sqrt | Rsqrt | Floor | Ceil | Round | Not | IntegerPow | Add | Sub | Mul | Div | Rem
        | Pow | Max | Min | And | Or | Xor | AddAny | Eq | Ne | Lt | Le | Gt | Ge | SelectN
        | Clamp | ConvertElementType => elementwise::lower(ctx, eqn.prim, p, inputs),
        Iota | BroadcastInDim | Reshape | Squeeze | ExpandDims | Transpose | Slice
        | DynamicSlice | DynamicUpdateSlice | Concatenate | Pad => {
            structural::lower(ctx, eqn.prim, p, inputs)
        }
        ReduceSum | ReduceMax | ReduceMin | ReduceProd | ReduceAnd | ReduceOr | Argmax | Argmin
        | Cumsum | Cumprod | Cummax | Cummin | Cumlogsumexp => {
            reduce::lower(ctx, eqn.prim, p, inputs)
        }
        DotGeneral => structural::dot_general(ctx, p, inputs),
        DotProductAttention => {
            attention::lower(ctx, tessera_ir::prim::AttentionOp::Forward, p, inputs)
        }
        DotProductAttentionBwd => {
            attention::lower(ctx, tessera_ir::prim::AttentionOp::Backward, p, inputs)
        }
        Gather => indexing::gather(ctx, p, inputs),
        ScatterAdd | Scatter | ScatterMul | ScatterMin | ScatterMax => {
            indexing::scatter(ctx, eqn.prim, p, inputs)
        }
        StopGradient | Copy | PipelineEnterStage => Ok(inputs.to_vec()),
        OptimizationBarrier => {
            let results: Vec<&ShapedArray> = ctx.out_avals.iter().collect();
            ctx.op("stablehlo.optimization_barrier", inputs, &results, &[])
        }
        Reshard => constraint::reshard(ctx, inputs),
        ShardingConstraint => constraint::sharding_constraint(ctx, p, inputs),
        Jit => match tessera_ir::prim::context_mesh(p) {
            Some(mesh) => tessera_ir::trace::use_mesh(&mesh, || {
                control::call(ctx, p, inputs, functions, None)
            }),
            None => control::call(ctx, p, inputs, functions, None),
        },
        Checkpoint => control::call(ctx, p, inputs, functions, Some("checkpoint")),
        Psum
        | Pmax
        | Pmin
        | AllGather
        | ReduceScatter
        | Ppermute
        | AllToAll
        | AxisIndex
        | Pvary
        | Pbroadcast
        | PsumInvariant
        | AllGatherInvariant
        | Preduced
        | VaryUnreducedCast
        | UnreducedPsum
        | ReducedVaryCast
        | AllGatherReduced
        | UnreducedReduceScatter
        | RaggedAllToAll => parallel::collective(ctx, eqn.prim, p, inputs),
        // `stablehlo.send`/`stablehlo.recv` as JAX's GPU lowering emits them.
        Psend => p2p::lower(ctx, p2p::Direction::Send, eqn.prim, p, inputs),
        Precv => p2p::lower(ctx, p2p::Direction::Receive, eqn.prim, p, inputs),
        // A start lowers to `async_start` around its collective, its done to `async_done`
        // (or both synchronously where the collective takes several operations: `pending.rs`).
        PsumStart
        | AllGatherStart
        | ReduceScatterStart
        | AllToAllStart
        | PbroadcastStart
        | PpermuteStart
        | PsumInvariantStart
        | UnreducedPsumStart
        | UnreducedReduceScatterStart
        | AllGatherReducedStart => pending::start(ctx, eqn.prim, p, inputs),
        PsumDone | AllGatherDone | ReduceScatterDone | AllToAllDone | PbroadcastDone
        | PpermuteDone => pending::done(ctx, inputs),
        ShardMap => parallel::shard_map(ctx, p, inputs, functions),
        Treduce => loops::treduce(ctx, p, inputs, functions),
        // Special functions, bit operations, random numbers, sorting.
        Erf | Erfc | ErfInv | Lgamma | Digamma | Polygamma | Tan | Asin | Acos | Atan | Sinh
        | Cosh | Asinh | Acosh | Atanh | Cbrt | Square | IsFinite | Atan2 | ShiftLeft
        | ShiftRightLogical | ShiftRightArithmetic | BitcastConvertType | PopulationCount => {
            numeric::lower(ctx, eqn.prim, inputs)
        }
        RandomSeed | RandomWrap | RandomUnwrap | RandomBits | RandomSplit | RandomFoldIn
        | Threefry2x32 => random::lower(ctx, eqn.prim, p, inputs),
        Sort => sort::sort(ctx, p, inputs),
        TopK => sort::top_k(ctx, p, inputs),
        // Cumulative ops, scatters, windows, convolution.
        ReduceWindowSum | ReduceWindowMax | ReduceWindowMin | ReduceWindow
        | SelectAndScatterAdd => window::lower(ctx, eqn.prim, p, inputs),
        ConvGeneralDilated => conv::conv(ctx, p, inputs),
        CustomJvpCall | CustomVjpCall => flow::custom_call(ctx, eqn.prim, p, inputs, functions),
        Scan => flow::scan(ctx, p, inputs, functions),
        Cond => flow::cond(ctx, p, inputs, functions),
        While => flow::while_loop(ctx, p, inputs, functions),
        PureCallback | IoCallback | DebugCallback => callback::callback(ctx, eqn.prim, p, inputs),
    }
}

/// `array<i64: 1, 2>` text.
pub(crate) fn i64_array(values: &[i64]) -> String {
    if values.is_empty() {
        "array<i64>".into()
    } else {
        format!(
            "array<i64: {}>",
            values
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Maps an IR error in a rule to a lowering error.
pub(crate) fn ir(e: tessera_ir::IrError) -> LowerError {
    LowerError::Build(e.to_string())
}
