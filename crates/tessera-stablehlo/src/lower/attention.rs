//! `dot_product_attention` and its backward. Decomposed (`tessera_ir::prim::attention_program`:
//! the attention the model library computed before the operation existed) everywhere, unless
//! the operation (`implementation=cudnn`) or the module ([`AttentionLowering::Cudnn`]) asks for
//! cuDNN and the shapes are ones cuDNN's flash attention takes: then the custom calls XLA's GPU
//! compiler runs on cuDNN, as JAX 0.10's `implementation='cudnn'` lowering emits them
//! (`__cudnn$fmhaSoftmax` with the softmax statistics, `__cudnn$fmhaSoftmaxBackward`; with a
//! mask, `__cudnn$fmhaScaleBiasSoftmax` and its backward, the mask an additive bias as JAX
//! makes it; the `backend_config`, layouts and the workspace result as JAX writes them,
//! `tests/data/cudnn/` holds JAX's own text). Their operands are in
//! JAX's `[batch, seq, heads, head_dim]` layout (transposed from the operation's), and their
//! results come out in the operation's `[batch, heads, seq, head_dim]`, as JAX's do before it
//! transposes them back. XLA cannot partition these calls: in a module over several devices
//! they run inside a manual region, either one the program has (a `shard_map` body) or one
//! made here from the operation's `shard_*` parameters (`AttentionShards`: batch and heads
//! split over named axes), as JAX's `custom_partitioning` of the same calls runs them per shard.

use melior::ir::Value;
use tessera_ir::params::Params;
use tessera_ir::prim::attention::operands;
use tessera_ir::prim::{AttentionImpl, AttentionOp, AttentionParams, AttentionShards};
use tessera_ir::{DType, Prim, ShapedArray, axis_env};

use super::{Ctx, LowerError};
use crate::emit::quote;

/// An attention's `q`, `k`, `v` and mask types.
type Operands<'a> = (
    &'a ShapedArray,
    &'a ShapedArray,
    &'a ShapedArray,
    Option<&'a ShapedArray>,
);

/// How a module lowers `dot_product_attention`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AttentionLowering {
    /// The decomposition (XLA fuses what it can), on every plugin.
    #[default]
    Decomposed,
    /// cuDNN's fused flash attention (CUDA plugins) where the shapes allow: bfloat16 or float16,
    /// a head dimension that is a multiple of 8 and at most 256 (Hopper's limit) and equal for
    /// keys and values, causal or not, a mask operand as an additive bias (as JAX passes it,
    /// with even lengths); in a partitioned module, only inside a manual region (a `shard_map`
    /// body) or per shard where the operation's parameters lay it out (`AttentionShards`). The
    /// decomposition elsewhere.
    Cudnn,
}

pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    op: AttentionOp,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let p = AttentionParams::read(op.prim(), params).map_err(super::ir)?;
    let asked = ctx.body.attention() == AttentionLowering::Cudnn
        || p.implementation == AttentionImpl::Cudnn;
    if asked && manual_everywhere(ctx) {
        if let Some(shape) = CudnnShape::of(ctx, op) {
            return match op {
                AttentionOp::Forward => forward(ctx, &shape, p, inputs),
                AttentionOp::Backward => backward(ctx, &shape, p, inputs),
            };
        }
    } else if asked && let Some(program) = per_shard(ctx, op, params)? {
        return super::lower_flat(ctx.body, &program, inputs);
    }
    let program =
        tessera_ir::prim::attention_program(op, params, ctx.in_avals).map_err(super::ir)?;
    super::lower_flat(ctx.body, &program, inputs)
}

/// Whether each device computes the operation on values of its own: one partition, or inside a
/// manual region (a `shard_map` body) over every device.
fn manual_everywhere(ctx: &Ctx<'_, '_, '_>) -> bool {
    let devices = ctx.body.num_partitions();
    devices == 1
        || axis_env::current_mesh().is_some_and(|m| usize::try_from(m.size()) == Ok(devices))
}

/// The operation run per shard, where its parameters lay it out over the module's devices
/// (`AttentionShards`) and cuDNN takes each device's blocks: a `shard_map` of it, lowered to a
/// manual region (`sdy.manual_computation`, or GSPMD's full-to-shard custom calls) whose body
/// is the cuDNN call on the blocks. `None` elsewhere (the decomposition, partitioned by XLA).
fn per_shard(
    ctx: &Ctx<'_, '_, '_>,
    op: AttentionOp,
    params: &Params,
) -> Result<Option<tessera_ir::ClosedJaxpr>, LowerError> {
    let prim = op.prim();
    let Some(shards) = AttentionShards::read(prim, params).map_err(super::ir)? else {
        return Ok(None);
    };
    if usize::try_from(shards.mesh.size()) != Ok(ctx.body.num_partitions()) {
        return Ok(None);
    }
    let program = tessera_ir::prim::attention_per_shard_program(op, params, ctx.in_avals)
        .map_err(super::ir)?;
    let Some(program) = program else {
        return Ok(None);
    };
    let body = program
        .jaxpr
        .eqns
        .first()
        .and_then(|e| e.params.jaxpr(Prim::ShardMap.name(), "jaxpr").ok());
    let takes = body.is_some_and(|b| {
        let blocks = b.jaxpr.in_avals();
        CudnnShape::fits(operands(op, &blocks[..]))
    });
    Ok(takes.then_some(program))
}

/// The sizes of an attention cuDNN takes.
struct CudnnShape {
    batch: i64,
    heads: i64,
    kv_heads: i64,
    q_len: i64,
    kv_len: i64,
    head_dim: i64,
    dtype: DType,
    /// Whether a boolean mask operand comes after `v` (cuDNN takes it as an additive bias).
    masked: bool,
}

impl CudnnShape {
    /// Whether cuDNN takes an attention of these operands.
    fn fits(operands: Option<Operands<'_>>) -> bool {
        operands.is_some_and(|(q, _, v, mask)| {
            let head_dim = q.shape[3];
            matches!(q.dtype, DType::BF16 | DType::F16)
                && head_dim % 8 == 0
                && head_dim <= 256
                && v.shape[3] == head_dim
                // With a mask (a bias), cuDNN's flash attention wants even lengths.
                && mask.is_none_or(|m| {
                    m.shape == [q.shape[2], v.shape[2]] && q.shape[2] % 2 == 0 && v.shape[2] % 2 == 0
                })
        })
    }

    fn of(ctx: &Ctx<'_, '_, '_>, op: AttentionOp) -> Option<CudnnShape> {
        let found = operands(op, ctx.in_avals);
        let (q, k, _, mask) = found?;
        let head_dim = q.shape[3];
        CudnnShape::fits(found).then(|| CudnnShape {
            batch: q.shape[0],
            heads: q.shape[1],
            kv_heads: k.shape[1],
            q_len: q.shape[2],
            kv_len: k.shape[2],
            head_dim,
            dtype: q.dtype,
            masked: mask.is_some(),
        })
    }

    /// `[batch, seq, heads, head_dim]`: JAX's layout of the custom calls' operands.
    fn btnh(&self, seq: i64, heads: i64) -> ShapedArray {
        ShapedArray::new(self.dtype, &[self.batch, seq, heads, self.head_dim])
    }

    fn bnth(&self, heads: i64, seq: i64) -> ShapedArray {
        ShapedArray::new(self.dtype, &[self.batch, heads, seq, self.head_dim])
    }

    fn stats(&self) -> ShapedArray {
        ShapedArray::new(DType::F32, &[self.batch, self.heads, self.q_len])
    }

    /// The bias a mask becomes: `[1, 1, q_len, kv_len]` in the operands' dtype.
    fn bias(&self) -> ShapedArray {
        ShapedArray::new(self.dtype, &[1, 1, self.q_len, self.kv_len])
    }

    /// The custom call's target: with the bias operand or without.
    fn target(&self, backward: bool) -> String {
        let kind = if self.masked {
            "ScaleBiasSoftmax"
        } else {
            "Softmax"
        };
        let direction = if backward { "Backward" } else { "" };
        quote(&format!("__cudnn$fmha{kind}{direction}"))
    }
}

/// The additive bias cuDNN takes for the boolean `mask` (`[q_len, kv_len]`): 0 where a query
/// sees a key, else JAX's large negative number for the dtype (-2^41 in bfloat16, -2^15 in
/// float16: JAX keeps them small enough that cuDNN's subtraction of two of them stays finite).
fn mask_bias<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    s: &CudnnShape,
    mask: Value<'c, 'b>,
) -> Result<Value<'c, 'b>, LowerError> {
    let bias = s.bias();
    let shaped = ShapedArray::new(DType::Bool, &bias.shape);
    let mask = ctx.op1("stablehlo.reshape", &[mask], &shaped, &[])?;
    let hidden = if s.dtype == DType::F16 {
        -32768.0
    } else {
        -2_199_023_255_552.0
    };
    let zero = super::control::constant_scalar(ctx.body, 0.0, &bias)?;
    let hidden = super::control::constant_scalar(ctx.body, hidden, &bias)?;
    ctx.op1("stablehlo.select", &[mask, zero, hidden], &bias, &[])
}

/// `x` (`[b, n, t, h]`) as `[b, t, n, h]`.
fn to_btnh<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    x: Value<'c, 'b>,
    to: &ShapedArray,
) -> Result<Value<'c, 'b>, LowerError> {
    ctx.op1(
        "stablehlo.transpose",
        &[x],
        to,
        &[("permutation", "array<i64: 0, 2, 1, 3>".to_string())],
    )
}

/// The operation's `q`, `k` and `v` (its first operands) in JAX's `[b, t, n, h]`.
fn qkv_btnh<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    s: &CudnnShape,
    inputs: &[Value<'c, 'b>],
) -> Result<[Value<'c, 'b>; 3], LowerError> {
    Ok([
        to_btnh(ctx, inputs[0], &s.btnh(s.q_len, s.heads))?,
        to_btnh(ctx, inputs[1], &s.btnh(s.kv_len, s.kv_heads))?,
        to_btnh(ctx, inputs[2], &s.btnh(s.kv_len, s.kv_heads))?,
    ])
}

/// The workspace result the custom calls end with (empty: XLA sizes it).
fn workspace() -> ShapedArray {
    ShapedArray::new(DType::U8, &[0])
}

fn layouts(list: &[&[i64]]) -> String {
    let each: Vec<String> = list
        .iter()
        .map(|l| {
            let dims: Vec<String> = l.iter().map(i64::to_string).collect();
            format!("dense<[{}]> : tensor<{}xindex>", dims.join(", "), l.len())
        })
        .collect();
    format!("[{}]", each.join(", "))
}

const ROW_MAJOR_4: &[i64] = &[3, 2, 1, 0];
const ROW_MAJOR_3: &[i64] = &[2, 1, 0];
/// A `[b, n, t, h]` result laid out as `[b, t, n, h]` in memory.
const BNTH_AS_BTNH: &[i64] = &[3, 1, 2, 0];
const SCALAR_ORDER: &[i64] = &[0];

fn forward<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    s: &CudnnShape,
    p: AttentionParams,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let [q, k, v] = qkv_btnh(ctx, s, inputs)?;
    let mut operands = vec![q, k, v];
    if s.masked {
        operands.push(mask_bias(ctx, s, inputs[3])?);
    }
    let (out, stats, ws) = (s.bnth(s.heads, s.q_len), s.stats(), workspace());
    let attrs = [
        ("call_target_name", s.target(false)),
        ("api_version", "2 : i32".to_string()),
        ("backend_config", quote(&backend_config(s, p, false))),
        (
            "operand_layouts",
            layouts(&vec![ROW_MAJOR_4; operands.len()]),
        ),
        (
            "result_layouts",
            layouts(&[BNTH_AS_BTNH, ROW_MAJOR_3, SCALAR_ORDER]),
        ),
    ];
    let mut results = ctx.op(
        "stablehlo.custom_call",
        &operands,
        &[&out, &stats, &ws],
        &attrs,
    )?;
    results.truncate(2);
    Ok(results)
}

fn backward<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    s: &CudnnShape,
    p: AttentionParams,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let n = inputs.len();
    let (out, stats, grad) = (inputs[n - 3], inputs[n - 2], inputs[n - 1]);
    let [q, k, v] = qkv_btnh(ctx, s, inputs)?;
    let grad = to_btnh(ctx, grad, &s.btnh(s.q_len, s.heads))?;
    let out = to_btnh(ctx, out, &s.btnh(s.q_len, s.heads))?;
    let (dq, dk, dv) = (
        s.bnth(s.heads, s.q_len),
        s.bnth(s.kv_heads, s.kv_len),
        s.bnth(s.kv_heads, s.kv_len),
    );
    let (ws, bias) = (workspace(), s.bias());
    // cuDNN's operand order: q, k, v, the statistics, the output's cotangent, the bias if any,
    // the output; its results: the three cotangents, the bias's if any, the workspace.
    let mut operands = vec![q, k, v, stats, grad];
    let mut operand_layouts = vec![
        ROW_MAJOR_4,
        ROW_MAJOR_4,
        ROW_MAJOR_4,
        ROW_MAJOR_3,
        ROW_MAJOR_4,
    ];
    let mut result_types = vec![&dq, &dk, &dv];
    let mut result_layouts = vec![BNTH_AS_BTNH; 3];
    if s.masked {
        operands.push(mask_bias(ctx, s, inputs[3])?);
        operand_layouts.push(ROW_MAJOR_4);
        result_types.push(&bias);
        result_layouts.push(ROW_MAJOR_4);
    }
    operands.push(out);
    operand_layouts.push(ROW_MAJOR_4);
    result_types.push(&ws);
    result_layouts.push(SCALAR_ORDER);
    let attrs = [
        ("call_target_name", s.target(true)),
        ("api_version", "2 : i32".to_string()),
        ("backend_config", quote(&backend_config(s, p, true))),
        ("operand_layouts", layouts(&operand_layouts)),
        ("result_layouts", layouts(&result_layouts)),
    ];
    let mut results = ctx.op("stablehlo.custom_call", &operands, &result_types, &attrs)?;
    results.truncate(3);
    Ok(results)
}

/// JAX's `backend_config` of the custom calls, field for field in its order.
fn backend_config(s: &CudnnShape, p: AttentionParams, backward: bool) -> String {
    let strings = |v: &[i64]| -> String {
        let each: Vec<String> = v.iter().map(|x| format!("\"{x}\"")).collect();
        format!("[{}]", each.join(", "))
    };
    let dims = |lc: &[i64], rc: &[i64], lb: &[i64], rb: &[i64]| {
        format!(
            "{{\"lhs_contracting_dimensions\": {}, \"rhs_contracting_dimensions\": {}, \
             \"lhs_batch_dimensions\": {}, \"rhs_batch_dimensions\": {}}}",
            strings(lc),
            strings(rc),
            strings(lb),
            strings(rb)
        )
    };
    let element = if s.dtype == DType::F16 { "F16" } else { "BF16" };
    let intermediate = format!(
        "{{\"element_type\": \"{element}\", \"dimensions\": {}, \"tuple_shapes\": [], \"layout\": \
         {{\"dim_level_types\": [], \"dim_unique\": [], \"dim_ordered\": [], \"minor_to_major\": \
         {}, \"tiles\": [], \"element_size_in_bits\": \"0\", \"memory_space\": \"0\", \
         \"index_primitive_type\": \"PRIMITIVE_TYPE_INVALID\", \"pointer_primitive_type\": \
         \"PRIMITIVE_TYPE_INVALID\", \"dynamic_shape_metadata_prefix_bytes\": \"0\"}}, \
         \"is_dynamic_dimension\": [false, false, false, false]}}",
        strings(&[s.batch, s.heads, s.q_len, s.kv_len]),
        strings(&[3, 2, 1, 0]),
    );
    let gemms = match backward {
        false => format!(
            "\"bmm1_dot_dimension_numbers\": {}, \"bmm2_dot_dimension_numbers\": {}",
            dims(&[3], &[3], &[0, 2], &[0, 2]),
            dims(&[3], &[1], &[0, 1], &[0, 2]),
        ),
        true => format!(
            "\"bmm1_grad_gemm1_dot_dimension_numbers\": {}, \
             \"bmm1_grad_gemm2_dot_dimension_numbers\": {}, \
             \"bmm2_grad_gemm1_dot_dimension_numbers\": {}, \
             \"bmm2_grad_gemm2_dot_dimension_numbers\": {}",
            dims(&[2], &[1], &[0, 1], &[0, 2]),
            dims(&[3], &[1], &[0, 1], &[0, 2]),
            dims(&[2], &[1], &[0, 1], &[0, 2]),
            dims(&[3], &[3], &[0, 2], &[0, 2]),
        ),
    };
    let scale = p.scale;
    format!(
        "{{\"operation_queue_id\": \"0\", \"cudnn_fmha_backend_config\": {{\"algorithm\": \
         {{\"algo_id\": \"0\", \"math_type\": \"TENSOR_OP_MATH\", \"tuning_knobs\": {{\"17\": \
         \"1\", \"24\": \"0\"}}, \"is_cudnn_frontend\": true, \"workspace_size\": \"0\"}}, \
         \"fmha_scale\": {scale:?}, \"intermediate_tensor_shape\": {intermediate}, \
         \"is_flash_attention\": true, \"mask_type\": \"{}\", {gemms}, \"dropout_rate\": 0.0, \
         \"seed\": 42, \"sliding_window_length\": 0, \"max_seg_per_batch\": 1, \
         \"is_paged_attention\": false}}}}",
        if p.is_causal { "CAUSAL" } else { "NO_MASK" },
    )
}
