//! Evaluation rules of the `elementwise` family (moved from the core crate's `prim/elementwise.rs`).

use ndarray::{ArrayD, IxDyn, Zip};
use tessera_ir_core::array::{Array, Elem, is_exact_int};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::elementwise::{UnaryParams, needs_float};
use tessera_ir_core::prim::{BinaryOp, ElementwiseOp, UnaryOp};

pub(crate) fn eval(
    op: ElementwiseOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let out = &outputs[0];
    let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
    let dtype = inputs[0].dtype();
    let int = is_exact_int(dtype);
    let result = match op {
        ElementwiseOp::SelectN => Array::from_elems(out.dtype, select_n(inputs, out.dtype, &dims)?),
        ElementwiseOp::Clamp if int => {
            let [lo, x, hi] = [0, 1, 2].map(|i| bcast(&inputs[i], &dims).map(|a| a.ints()));
            let (lo, x, hi) = (lo?, x?, hi?);
            let data = Zip::from(&lo)
                .and(&x)
                .and(&hi)
                .map_collect(|&l, &v, &h| v.max(l).min(h));
            Array::from_ints(out.dtype, data)
        }
        ElementwiseOp::Clamp => {
            let [lo, x, hi] = [0, 1, 2].map(|i| bcast(&inputs[i], &dims).map(|a| a.values()));
            let (lo, x, hi) = (lo?, x?, hi?);
            let data = Zip::from(&lo)
                .and(&x)
                .and(&hi)
                .map_collect(|&l, &v, &h| v.max(l).min(h));
            Array::from_values(out.dtype, data)
        }
        ElementwiseOp::Convert => inputs[0].converted(out.dtype),
        ElementwiseOp::Unary(u) => {
            let args = UnaryParams::read(u, params)?;
            if int && !needs_float(u) {
                Array::from_ints(
                    out.dtype,
                    inputs[0].ints().mapv(|x| unary_int(u, x, args, dtype)),
                )
            } else {
                Array::from_values(out.dtype, inputs[0].values().mapv(|x| unary(u, x, args)))
            }
        }
        ElementwiseOp::Binary(b) => {
            let (x, y) = (bcast(&inputs[0], &dims)?, bcast(&inputs[1], &dims)?);
            if int {
                let data = Zip::from(&x.ints())
                    .and(&y.ints())
                    .map_collect(|&x, &y| binary_int(b, x, y, dtype));
                Array::from_ints(out.dtype, data)
            } else {
                let data = Zip::from(&x.values())
                    .and(&y.values())
                    .map_collect(|&x, &y| binary(b, x, y));
                Array::from_values(out.dtype, data)
            }
        }
        ElementwiseOp::Compare(c) => {
            let (x, y) = (bcast(&inputs[0], &dims)?, bcast(&inputs[1], &dims)?);
            let data = if int {
                Zip::from(&x.ints())
                    .and(&y.ints())
                    .map_collect(|&x, &y| i128::from(c.holds(x, y)))
            } else {
                Zip::from(&x.values())
                    .and(&y.values())
                    .map_collect(|&x, &y| i128::from(c.holds(x, y)))
            };
            Array::from_ints(out.dtype, data)
        }
    };
    Ok(vec![result])
}

/// `a` broadcast to `dims` (scalar and size-1 broadcasting).
fn bcast(a: &Array, dims: &[usize]) -> Result<Array> {
    if a.dims()
        .iter()
        .map(|&d| d as usize)
        .eq(dims.iter().copied())
    {
        return Ok(a.clone());
    }
    let data = a
        .elems()
        .broadcast(IxDyn(dims))
        .map(|v| v.to_owned())
        .ok_or_else(|| {
            tessera_ir_core::error::IrError::Eval(format!(
                "cannot broadcast {:?} to {dims:?}",
                a.shape()
            ))
        })?;
    Ok(a.with_elems(data))
}

fn select_n(inputs: &[Array], dtype: DType, dims: &[usize]) -> Result<ArrayD<Elem>> {
    let pred = bcast(&inputs[0], dims)?.ints();
    // A weakly typed case of another dtype is converted before its elements are copied.
    let cases = inputs[1..]
        .iter()
        .map(|c| bcast(&c.converted(dtype), dims))
        .collect::<Result<Vec<_>>>()?;
    let cases: Vec<ArrayD<Elem>> = cases.iter().map(Array::elems).collect();
    let mut out = cases[0].clone();
    for (idx, value) in out.indexed_iter_mut() {
        let which = (pred[&idx].max(0) as usize).min(cases.len() - 1);
        *value = cases[which][&idx];
    }
    Ok(out)
}

/// A unary operation on an exact integer (or boolean); the caller wraps the result.
fn unary_int(op: UnaryOp, x: i128, args: UnaryParams, dtype: DType) -> i128 {
    use UnaryOp::*;
    match op {
        Neg => -x,
        Abs => x.abs(),
        Sign => x.signum(),
        Not if dtype == DType::Bool => i128::from(x == 0),
        Not => !x,
        IntegerPow => int_pow(x, args.y, dtype),
        Exp | Exp2 | Log | Log1p | Expm1 | Tanh | Logistic | Sin | Cos | Sqrt | Rsqrt | Floor
        | Ceil | Round => unary(op, x as f64, args) as i128,
    }
}

fn unary(op: UnaryOp, x: f64, args: UnaryParams) -> f64 {
    use UnaryOp::*;
    match op {
        Neg => -x,
        Abs => x.abs(),
        Sign => {
            if x.is_nan() {
                x
            } else if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        Exp => x.exp(),
        Exp2 => x.exp2(),
        Log => x.ln(),
        Log1p => x.ln_1p(),
        Expm1 => x.exp_m1(),
        Tanh => x.tanh(),
        Logistic => 1.0 / (1.0 + (-x).exp()),
        Sin => x.sin(),
        Cos => x.cos(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => args.rounding.round(x),
        Not => f64::from(u8::from(x == 0.0)),
        IntegerPow => x.powi(args.y as i32),
    }
}

/// `x ** n` for integers: wrapping multiplication in the dtype, as XLA computes it (by
/// squaring; a negative `n` is XLA's integer `1 / x^|n|`).
fn int_pow(x: i128, n: i64, dtype: DType) -> i128 {
    if n < 0 {
        // 1 / x^|n| truncated: 1 for x = 1, +-1 for x = -1, 0 otherwise (XLA's integer division).
        return if x == 1 || (x == -1 && n % 2 == 0) {
            1
        } else if x == -1 {
            -1
        } else {
            0
        };
    }
    let wrap = |v: i128| Elem::from_int(dtype, v).to_int(dtype);
    let (mut acc, mut base, mut n) = (1_i128, wrap(x), n);
    while n > 0 {
        if n & 1 == 1 {
            acc = wrap(acc.wrapping_mul(base));
        }
        base = wrap(base.wrapping_mul(base));
        n >>= 1;
    }
    acc
}

/// A binary operation on exact integers (or booleans), in `i128`; the caller wraps the result
/// to the dtype (XLA's two's-complement arithmetic).
fn binary_int(op: BinaryOp, i: i128, j: i128, dtype: DType) -> i128 {
    use BinaryOp::*;
    match op {
        Add | AddAny => i.wrapping_add(j),
        Sub => i.wrapping_sub(j),
        Mul => i.wrapping_mul(j),
        // XLA: x / 0 is -1 (all bits set: the maximum of unsigned types); MIN / -1 wraps to MIN.
        Div if j == 0 => -1,
        Div => i / j,
        // XLA: x % 0 is x; the remainder has the dividend's sign.
        Rem if j == 0 => i,
        Rem => i % j,
        Pow => int_pow(
            i,
            j.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            dtype,
        ),
        Max => i.max(j),
        Min => i.min(j),
        And => i & j,
        Or => i | j,
        Xor => i ^ j,
    }
}

fn binary(op: BinaryOp, x: f64, y: f64) -> f64 {
    use BinaryOp::*;
    match op {
        Add | AddAny => x + y,
        Sub => x - y,
        Mul => x * y,
        Div => x / y,
        Rem => x % y,
        Pow => x.powf(y),
        Max => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.max(y)
            }
        }
        Min => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.min(y)
            }
        }
        // Bitwise operations are integer-only; the shape rule refuses floats.
        And | Or | Xor => binary_int(op, x as i128, y as i128, DType::I64) as f64,
    }
}
