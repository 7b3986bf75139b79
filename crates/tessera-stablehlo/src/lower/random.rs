//! The PRNG primitives on physical keys: a `key<fry>` array of shape `S` is a
//! `tensor<S x 2 x ui32>` (see `mlir_type`), so `random_wrap`/`random_unwrap` are identities,
//! and `random_bits`, `random_split`, `random_fold_in`, `random_seed` and `threefry2x32` expand
//! into StableHLO integer operations: Threefry-2x32's 20 rounds of add, rotate and xor on
//! `ui32` tensors, over counters from `iota` (JAX's partitionable layout: element `i` of a
//! block uses the counter `(0, i)`).

use melior::ir::Value;
use tessera_ir::prim::{PrngImpl, RandomParams, StructuralParams};
use tessera_ir::{DType, ParamValue, Params, Prim, ShapedArray};

use super::control::splat;
use super::elementwise::broadcast;
use super::{Ctx, i64_array, ir};
use crate::context::LowerError;

type V<'c, 'b> = Value<'c, 'b>;

fn u32s(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::U32, shape)
}

/// Every PRNG primitive.
pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[V<'c, 'b>],
) -> Result<Vec<V<'c, 'b>>, LowerError> {
    let typed = RandomParams::read(prim, params).map_err(ir)?;
    let out = &ctx.out_avals[0];
    match typed {
        RandomParams::Wrap(PrngImpl::Threefry) | RandomParams::Unwrap => Ok(inputs.to_vec()),
        RandomParams::Seed(PrngImpl::Threefry) => Ok(vec![seed(ctx, inputs[0], &ctx.in_avals[0])?]),
        RandomParams::Bits { .. } | RandomParams::Split { .. } => {
            let key_shape = &ctx.in_avals[0].shape;
            let (k0, k1) = words(ctx, inputs[0], key_shape)?;
            let full = &out.shape;
            let block: Vec<i64> = full[key_shape.len()..].to_vec();
            let lead: Vec<i64> = (0..key_shape.len() as i64).collect();
            let k0 = bcast(ctx, k0, key_shape, full, &lead)?;
            let k1 = bcast(ctx, k1, key_shape, full, &lead)?;
            let lo = block_counter(ctx, &block, full)?;
            let hi = splat(ctx.body, 0.0, &u32s(full))?;
            let [y0, y1] = threefry(ctx, [k0, k1], [hi, lo], full)?;
            if let RandomParams::Split { .. } = typed {
                return Ok(vec![stack(ctx, y0, y1, full)?]);
            }
            Ok(vec![bits(ctx, y0, y1, out)?])
        }
        RandomParams::FoldIn => {
            let full = &out.shape;
            let (k0, k1) = words(ctx, inputs[0], &ctx.in_avals[0].shape)?;
            let key_words = u32s(&ctx.in_avals[0].shape);
            let k0 = broadcast(ctx, k0, &key_words, full)?;
            let k1 = broadcast(ctx, k1, &key_words, full)?;
            let data = broadcast(ctx, inputs[1], &ctx.in_avals[1], full)?;
            let zero = splat(ctx.body, 0.0, &u32s(full))?;
            let [y0, y1] = threefry(ctx, [k0, k1], [zero, data], full)?;
            Ok(vec![stack(ctx, y0, y1, full)?])
        }
        RandomParams::Threefry2x32 => {
            let full = &out.shape;
            let args: Vec<V<'c, 'b>> = inputs
                .iter()
                .zip(ctx.in_avals)
                .map(|(&v, a)| broadcast(ctx, v, a, full))
                .collect::<Result<_, _>>()?;
            let [y0, y1] = threefry(ctx, [args[0], args[1]], [args[2], args[3]], full)?;
            Ok(vec![y0, y1])
        }
    }
}

/// The two words of physical keys of shape `shape` (each `ui32` of that shape).
fn words<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    key: V<'c, 'b>,
    shape: &[i64],
) -> Result<(V<'c, 'b>, V<'c, 'b>), LowerError> {
    let rank = shape.len();
    let mut one = shape.to_vec();
    one.push(1);
    let word = |w: i64| {
        let mut start = vec![0; rank + 1];
        start[rank] = w;
        let mut limit = shape.to_vec();
        limit.push(w + 1);
        let attrs = [
            ("start_indices", i64_array(&start)),
            ("limit_indices", i64_array(&limit)),
            ("strides", i64_array(&vec![1; rank + 1])),
        ];
        let sliced = ctx.op1("stablehlo.slice", &[key], &u32s(&one), &attrs)?;
        ctx.op1("stablehlo.reshape", &[sliced], &u32s(shape), &[])
    };
    Ok((word(0)?, word(1)?))
}

/// Physical keys of shape `shape` from their two words.
fn stack<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    a: V<'c, 'b>,
    b: V<'c, 'b>,
    shape: &[i64],
) -> Result<V<'c, 'b>, LowerError> {
    let mut one = shape.to_vec();
    one.push(1);
    let mut two = shape.to_vec();
    two.push(2);
    let a = ctx.op1("stablehlo.reshape", &[a], &u32s(&one), &[])?;
    let b = ctx.op1("stablehlo.reshape", &[b], &u32s(&one), &[])?;
    ctx.op1(
        "stablehlo.concatenate",
        &[a, b],
        &u32s(&two),
        &[("dimension", format!("{} : i64", shape.len()))],
    )
}

/// `ui32` values of shape `from` broadcast to `to` along `dims`.
fn bcast<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    v: V<'c, 'b>,
    from: &[i64],
    to: &[i64],
    dims: &[i64],
) -> Result<V<'c, 'b>, LowerError> {
    if from == to {
        return Ok(v);
    }
    ctx.op1(
        "stablehlo.broadcast_in_dim",
        &[v],
        &u32s(to),
        &[("broadcast_dimensions", i64_array(dims))],
    )
}

/// The row-major index within the trailing `block` dimensions of `full`, as `ui32`.
fn block_counter<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    block: &[i64],
    full: &[i64],
) -> Result<V<'c, 'b>, LowerError> {
    let size: i64 = block.iter().product();
    if size > i64::from(u32::MAX) {
        return Err(LowerError::Build(format!(
            "random blocks of more than 2^32 elements are not lowered (got {size})"
        )));
    }
    let flat = ctx.op1(
        "stablehlo.iota",
        &[],
        &u32s(&[size]),
        &[("iota_dimension", "0 : i64".into())],
    )?;
    let shaped = ctx.op1("stablehlo.reshape", &[flat], &u32s(block), &[])?;
    let lead = (full.len() - block.len()) as i64;
    let dims: Vec<i64> = (lead..full.len() as i64).collect();
    bcast(ctx, shaped, block, full, &dims)
}

/// Threefry-2x32 (20 rounds) of counters `x` under keys `k`, all `ui32` of `shape`.
fn threefry<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    k: [V<'c, 'b>; 2],
    x: [V<'c, 'b>; 2],
    shape: &[i64],
) -> Result<[V<'c, 'b>; 2], LowerError> {
    const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];
    let ty = u32s(shape);
    let op = |name: &str, a: V<'c, 'b>, b: V<'c, 'b>| ctx.op1(name, &[a, b], &ty, &[]);
    let add = |a, b| op("stablehlo.add", a, b);
    let xor = |a, b| op("stablehlo.xor", a, b);
    let constant = |c: u32| splat(ctx.body, f64::from(c), &ty);
    let rotl = |v: V<'c, 'b>, r: u32| -> Result<V<'c, 'b>, LowerError> {
        let left = op("stablehlo.shift_left", v, constant(r)?)?;
        let right = op("stablehlo.shift_right_logical", v, constant(32 - r)?)?;
        op("stablehlo.or", left, right)
    };
    let ks = [
        k[0],
        k[1],
        xor(xor(k[0], k[1])?, constant(tessera_ir::prim::PARITY)?)?,
    ];
    let mut x = [add(x[0], ks[0])?, add(x[1], ks[1])?];
    for i in 0..5usize {
        for &r in &ROTATIONS[i % 2] {
            x[0] = add(x[0], x[1])?;
            x[1] = xor(rotl(x[1], r)?, x[0])?;
        }
        x[0] = add(x[0], ks[(i + 1) % 3])?;
        let step = constant(i as u32 + 1)?;
        x[1] = add(add(x[1], ks[(i + 2) % 3])?, step)?;
    }
    Ok(x)
}

/// `random_bits`' result of type `out` (`uint8` ... `uint64`): the two words XORed (converted
/// to 8 or 16 bits), or both words for 64 bits.
fn bits<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    y0: V<'c, 'b>,
    y1: V<'c, 'b>,
    out: &ShapedArray,
) -> Result<V<'c, 'b>, LowerError> {
    let ty = u32s(&out.shape);
    let width = out.dtype.size_in_bytes() * 8;
    if width == 64 {
        let hi = ctx.op1("stablehlo.convert", &[y0], out, &[])?;
        let lo = ctx.op1("stablehlo.convert", &[y1], out, &[])?;
        let shift = splat(ctx.body, 32.0, out)?;
        let hi = ctx.op1("stablehlo.shift_left", &[hi, shift], out, &[])?;
        return ctx.op1("stablehlo.or", &[hi, lo], out, &[]);
    }
    let x = ctx.op1("stablehlo.xor", &[y0, y1], &ty, &[])?;
    if width == 32 {
        Ok(x)
    } else {
        ctx.op1("stablehlo.convert", &[x], out, &[])
    }
}

/// JAX's `threefry_seed`: the words `(seed >> 32, seed)` of an integer seed, as `ui32`.
fn seed<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    seed: V<'c, 'b>,
    aval: &ShapedArray,
) -> Result<V<'c, 'b>, LowerError> {
    let shape = &aval.shape;
    let lo = ctx.op1("stablehlo.convert", &[seed], &u32s(shape), &[])?;
    let hi = if aval.dtype.size_in_bytes() == 8 {
        let shift = splat(ctx.body, 32.0, aval)?;
        let high = ctx.op1("stablehlo.shift_right_logical", &[seed, shift], aval, &[])?;
        ctx.op1("stablehlo.convert", &[high], &u32s(shape), &[])?
    } else {
        splat(ctx.body, 0.0, &u32s(shape))?
    };
    stack(ctx, hi, lo, shape)
}

/// The parameters a structural rule needs to act on physical keys (`tensor<S x 2 x ui32>`)
/// when an equation reads or makes key arrays: `slice`, `transpose` and `broadcast_in_dim`
/// get the trailing word dimension appended; rules that need nothing (reshapes, concatenation,
/// identities, calls, the PRNG primitives) keep theirs (`None`); the rest are refused.
pub(super) fn physical_params(
    prim: Prim,
    params: &Params,
    in_avals: &[ShapedArray],
    out_avals: &[ShapedArray],
) -> Result<Option<Params>, LowerError> {
    use Prim::*;
    let keyed = in_avals.iter().chain(out_avals).any(|a| a.dtype.is_key());
    let as_is = prim.random().is_some()
        || matches!(
            prim,
            Reshape
                | Squeeze
                | ExpandDims
                | Concatenate
                | Copy
                | StopGradient
                | Jit
                | Checkpoint
                | PipelineEnterStage
        );
    if !keyed || as_is {
        return Ok(None);
    }
    let name = prim.name();
    let refused = || {
        LowerError::Build(format!(
            "{name} on key arrays is not lowered yet; apply it to the key data \
             (random_unwrap, then random_wrap)"
        ))
    };
    let op = prim.structural().ok_or_else(refused)?;
    // Each list of the typed parameters with the word dimension's entry appended.
    let with_word = |v: &[i64], word: i64| {
        let mut v = v.to_vec();
        v.push(word);
        ParamValue::ints(&v)
    };
    let rank = in_avals.first().map_or(0, ShapedArray::rank) as i64;
    match StructuralParams::read(op, params).map_err(ir)? {
        StructuralParams::Slice {
            start_indices,
            limit_indices,
            strides,
        } => Ok(Some(
            params
                .clone()
                .with("start_indices", with_word(&start_indices, 0))
                .with("limit_indices", with_word(&limit_indices, 2))
                .with("strides", with_word(&strides, 1)),
        )),
        StructuralParams::Transpose { permutation } => Ok(Some(
            params
                .clone()
                .with("permutation", with_word(&permutation, rank)),
        )),
        // An absent `broadcast_dimensions` is empty: JAX leaves an empty tuple out.
        StructuralParams::BroadcastInDim {
            broadcast_dimensions,
            ..
        } => {
            let out_rank = out_avals.first().map_or(0, ShapedArray::rank) as i64;
            let dims = with_word(&broadcast_dimensions, out_rank);
            Ok(Some(params.clone().with("broadcast_dimensions", dims)))
        }
        StructuralParams::Iota { .. }
        | StructuralParams::Reshape { .. }
        | StructuralParams::Squeeze { .. }
        | StructuralParams::ExpandDims { .. }
        | StructuralParams::DynamicSlice { .. }
        | StructuralParams::DynamicUpdateSlice
        | StructuralParams::Concatenate { .. }
        | StructuralParams::Pad { .. } => Err(refused()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(shape: &[i64]) -> ShapedArray {
        ShapedArray::new(DType::KeyFry, shape)
    }

    fn physical(prim: Prim, params: &Params, out: &[i64]) -> Result<Option<Params>, LowerError> {
        physical_params(prim, params, &[keys(&[4])], &[keys(out)])
    }

    #[test]
    fn key_array_parameters_gain_the_word_dimension_and_never_default() {
        let ints = ParamValue::ints;
        let slice = Params::new()
            .with("start_indices", ints(&[1]))
            .with("limit_indices", ints(&[3]))
            .with("strides", ParamValue::Name("None".into()));
        let got = physical(Prim::Slice, &slice, &[2]).unwrap().unwrap();
        assert_eq!(got.get("start_indices"), Some(&ints(&[1, 0])));
        assert_eq!(got.get("limit_indices"), Some(&ints(&[3, 2])));
        assert_eq!(got.get("strides"), Some(&ints(&[1, 1])));
        let no_limit = Params::new().with("start_indices", ints(&[1]));
        let err = physical(Prim::Slice, &no_limit, &[2]).unwrap_err();
        assert!(err.to_string().contains("limit_indices"), "{err}");
        let err = physical(Prim::Transpose, &Params::new(), &[4]).unwrap_err();
        assert!(err.to_string().contains("permutation"), "{err}");
        // JAX leaves an empty `broadcast_dimensions` out: a scalar key broadcast to [3].
        let got = physical_params(
            Prim::BroadcastInDim,
            &Params::new(),
            &[keys(&[])],
            &[keys(&[3])],
        );
        let dims = got.unwrap().unwrap().get("broadcast_dimensions").cloned();
        assert_eq!(dims, Some(ints(&[1])));
    }
}
