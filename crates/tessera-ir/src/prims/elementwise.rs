//! Elementwise primitives: unary and binary ops, `integer_pow`, `select_n`, `clamp`.
//!
//! Operands have one dtype; rank-0 operands broadcast against the others (as in JAX's jaxprs,
//! e.g. `max h 0.0:f32[]`).

use super::{Primitive, TypeError, type_err};
use crate::interp::{Array, EvalError, Wide, prim_err};
use crate::types::{DType, ShapedArray};
use ndarray::{ArrayD, IxDyn, Zip};

/// Elementwise unary ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `sign(x)`.
    Sign,
    /// `e^x`.
    Exp,
    /// `2^x`.
    Exp2,
    /// `ln x`.
    Log,
    /// `ln(1+x)`.
    Log1p,
    /// `e^x - 1`.
    Expm1,
    /// `tanh x`.
    Tanh,
    /// `1/(1+e^-x)`.
    Logistic,
    /// `sin x`.
    Sin,
    /// `cos x`.
    Cos,
    /// `sqrt x`.
    Sqrt,
    /// `1/sqrt x`.
    Rsqrt,
    /// `floor x`.
    Floor,
    /// `ceil x`.
    Ceil,
    /// Round half away from zero (`round[rounding_method=0]`).
    Round,
    /// Round half to even (`round[rounding_method=1]`, what `jnp.round` uses).
    RoundEven,
    /// Logical/bitwise not.
    Not,
}

/// Every unary op.
pub const UNARY_OPS: [UnaryOp; 19] = {
    use UnaryOp::*;
    [
        Neg, Abs, Sign, Exp, Exp2, Log, Log1p, Expm1, Tanh, Logistic, Sin, Cos, Sqrt, Rsqrt, Floor,
        Ceil, Round, RoundEven, Not,
    ]
};

impl UnaryOp {
    /// JAX's name.
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Sign => "sign",
            Exp => "exp",
            Exp2 => "exp2",
            Log => "log",
            Log1p => "log1p",
            Expm1 => "expm1",
            Tanh => "tanh",
            Logistic => "logistic",
            Sin => "sin",
            Cos => "cos",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Floor => "floor",
            Ceil => "ceil",
            Round | RoundEven => "round",
            Not => "not",
        }
    }

    /// Whether the op is defined only on floats.
    pub fn float_only(self) -> bool {
        !matches!(
            self,
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Not
        )
    }

    fn apply_f(self, x: f64) -> f64 {
        use UnaryOp::*;
        match self {
            Neg => -x,
            Abs => x.abs(),
            Sign => {
                if x.is_nan() || x == 0.0 {
                    x
                } else {
                    x.signum()
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
            Round => x.round(),
            RoundEven => x.round_ties_even(),
            Not => f64::NAN,
        }
    }
}

/// Elementwise binary ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/` (integers truncate).
    Div,
    /// Remainder with the sign of the dividend.
    Rem,
    /// `x ** y` (floats).
    Pow,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Logical/bitwise and.
    And,
    /// Logical/bitwise or.
    Or,
    /// Logical/bitwise xor.
    Xor,
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// Every binary op.
pub const BINARY_OPS: [BinaryOp; 17] = {
    use BinaryOp::*;
    [
        Add, Sub, Mul, Div, Rem, Pow, Max, Min, And, Or, Xor, Eq, Ne, Lt, Le, Gt, Ge,
    ]
};

impl BinaryOp {
    /// JAX's name.
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            Rem => "rem",
            Pow => "pow",
            Max => "max",
            Min => "min",
            And => "and",
            Or => "or",
            Xor => "xor",
            Eq => "eq",
            Ne => "ne",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
        }
    }

    /// Whether the result is boolean.
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }
}

/// The common shape of elementwise operands: rank-0 operands broadcast, and operands of one
/// rank broadcast their size-1 dimensions (as JAX 0.10's jaxprs do, e.g. `add f32[2,4] f32[1,4]`).
fn common_shape(prim: &Primitive, ins: &[ShapedArray]) -> Result<Vec<usize>, TypeError> {
    let shapes: Vec<&[usize]> = ins.iter().map(|a| a.shape.as_slice()).collect();
    broadcast_shapes(&shapes).ok_or_else(|| {
        type_err(prim, ins, "operand shapes do not broadcast; they need one rank with equal or size-1 dimensions (or rank 0)".into())
    })
}

fn broadcast_shapes(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let mut out: Option<Vec<usize>> = None;
    for s in shapes.iter().filter(|s| !s.is_empty()) {
        out = Some(match out {
            None => s.to_vec(),
            Some(o) if o.len() != s.len() => return None,
            Some(o) => o
                .iter()
                .zip(s.iter())
                .map(|(&a, &b)| {
                    if a == b || b == 1 {
                        Some(a)
                    } else if a == 1 {
                        Some(b)
                    } else {
                        None
                    }
                })
                .collect::<Option<Vec<_>>>()?,
        });
    }
    Some(out.unwrap_or_default())
}

fn check_arity(prim: &Primitive, ins: &[ShapedArray], n: usize) -> Result<(), TypeError> {
    if ins.len() != n {
        return Err(type_err(
            prim,
            ins,
            format!("takes {n} operands, got {}", ins.len()),
        ));
    }
    Ok(())
}

fn same_dtypes(prim: &Primitive, ins: &[ShapedArray]) -> Result<DType, TypeError> {
    let d = ins.first().map(|a| a.dtype).unwrap_or(DType::F32);
    if ins.iter().any(|a| a.dtype != d) {
        return Err(type_err(
            prim,
            ins,
            "operand dtypes differ; convert them first".into(),
        ));
    }
    Ok(d)
}

/// The shape/dtype rule of the elementwise family.
pub fn shape_rule(prim: &Primitive, ins: &[ShapedArray]) -> Result<ShapedArray, TypeError> {
    let weak = !ins.is_empty() && ins.iter().all(|a| a.weak_type);
    let out = |d: DType, s: Vec<usize>, w: bool| ShapedArray::new(d, &s).weak(w);
    match prim {
        Primitive::Unary(op) => {
            check_arity(prim, ins, 1)?;
            let d = ins[0].dtype;
            if op.float_only() && !d.is_float() || *op == UnaryOp::Not && d.is_float() {
                return Err(type_err(prim, ins, format!("not defined on {d}")));
            }
            Ok(ins[0].clone())
        }
        Primitive::Binary(op) => {
            check_arity(prim, ins, 2)?;
            let d = same_dtypes(prim, ins)?;
            let bad = match op {
                BinaryOp::Pow => !d.is_float(),
                BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => d.is_float(),
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
                    d == DType::Bool
                }
                _ => false,
            };
            if bad {
                return Err(type_err(prim, ins, format!("not defined on {d}")));
            }
            let s = common_shape(prim, ins)?;
            let d = if op.is_comparison() { DType::Bool } else { d };
            Ok(out(d, s, weak && !op.is_comparison()))
        }
        Primitive::IntegerPow { .. } => {
            check_arity(prim, ins, 1)?;
            if ins[0].dtype == DType::Bool {
                return Err(type_err(prim, ins, "not defined on bool".into()));
            }
            Ok(ins[0].clone())
        }
        Primitive::SelectN => {
            if ins.len() < 2 {
                return Err(type_err(
                    prim,
                    ins,
                    "needs a predicate and at least one case".into(),
                ));
            }
            if !matches!(ins[0].dtype, DType::Bool | DType::I32) {
                return Err(type_err(
                    prim,
                    ins,
                    "the predicate must be bool or i32".into(),
                ));
            }
            let d = same_dtypes(prim, &ins[1..])?;
            let s = common_shape(prim, &ins[1..])?;
            if ins[0].ndim() > 0 && ins[0].shape.as_slice() != s.as_slice() {
                return Err(type_err(
                    prim,
                    ins,
                    "the predicate must be a scalar or match the cases".into(),
                ));
            }
            Ok(out(d, s, ins[1..].iter().all(|a| a.weak_type)))
        }
        Primitive::Clamp => {
            check_arity(prim, ins, 3)?;
            let d = same_dtypes(prim, ins)?;
            let s = ins[1].shape.to_vec();
            if [&ins[0], &ins[2]]
                .iter()
                .any(|a| a.ndim() > 0 && a.shape.as_slice() != s.as_slice())
            {
                return Err(type_err(
                    prim,
                    ins,
                    "bounds must be scalars or match the operand".into(),
                ));
            }
            Ok(out(d, s, ins[1].weak_type))
        }
        _ => Err(type_err(prim, ins, "not an elementwise primitive".into())),
    }
}

/// Broadcasts a widened array to `shape` (rank 0 or size-1 dimensions).
fn bcast(w: &Wide, shape: &[usize]) -> Wide {
    if w.shape() == shape {
        return w.clone();
    }
    crate::wide_map!(w, a => a.broadcast(IxDyn(shape)).map(|v| v.to_owned()).unwrap_or_else(|| a.clone()))
}

fn out_shape(args: &[Array]) -> Vec<usize> {
    let shapes: Vec<&[usize]> = args.iter().map(|a| a.shape()).collect();
    broadcast_shapes(&shapes).unwrap_or_default()
}

fn zip2<A: Clone, B: Clone, C>(a: &ArrayD<A>, b: &ArrayD<B>, f: impl Fn(A, B) -> C) -> ArrayD<C> {
    Zip::from(a)
        .and(b)
        .map_collect(|x, y| f(x.clone(), y.clone()))
}

fn binary_wide(prim: &Primitive, op: BinaryOp, a: &Wide, b: &Wide) -> Result<Wide, EvalError> {
    use BinaryOp::*;
    let cmp = |o: std::cmp::Ordering| match op {
        Eq => o.is_eq(),
        Ne => !o.is_eq(),
        Lt => o.is_lt(),
        Le => o.is_le(),
        Gt => o.is_gt(),
        _ => o.is_ge(),
    };
    Ok(match (a, b) {
        (Wide::F(x), Wide::F(y)) if op.is_comparison() => Wide::B(zip2(x, y, |p, q| {
            p.partial_cmp(&q).map(cmp).unwrap_or(op == Ne)
        })),
        (Wide::F(x), Wide::F(y)) => Wide::F(zip2(x, y, |p, q| match op {
            Add => p + q,
            Sub => p - q,
            Mul => p * q,
            Div => p / q,
            Rem => p % q,
            Pow => p.powf(q),
            Max => {
                if p.is_nan() || q.is_nan() {
                    f64::NAN
                } else {
                    p.max(q)
                }
            }
            Min => {
                if p.is_nan() || q.is_nan() {
                    f64::NAN
                } else {
                    p.min(q)
                }
            }
            _ => f64::NAN,
        })),
        (Wide::I(x), Wide::I(y)) if op.is_comparison() => {
            Wide::B(zip2(x, y, |p, q| cmp(p.cmp(&q))))
        }
        (Wide::I(x), Wide::I(y)) => Wide::I(zip2(x, y, |p, q| match op {
            Add => p.wrapping_add(q),
            Sub => p.wrapping_sub(q),
            Mul => p.wrapping_mul(q),
            Div => {
                if q == 0 {
                    -1
                } else {
                    p.wrapping_div(q)
                }
            }
            Rem => {
                if q == 0 {
                    p
                } else {
                    p.wrapping_rem(q)
                }
            }
            Max => p.max(q),
            Min => p.min(q),
            And => p & q,
            Or => p | q,
            Xor => p ^ q,
            _ => 0,
        })),
        (Wide::U(x), Wide::U(y)) if op.is_comparison() => {
            Wide::B(zip2(x, y, |p, q| cmp(p.cmp(&q))))
        }
        (Wide::U(x), Wide::U(y)) => Wide::U(zip2(x, y, |p, q| match op {
            Add => p.wrapping_add(q),
            Sub => p.wrapping_sub(q),
            Mul => p.wrapping_mul(q),
            Div => p.checked_div(q).unwrap_or(u64::MAX),
            Rem => p.checked_rem(q).unwrap_or(p),
            Max => p.max(q),
            Min => p.min(q),
            And => p & q,
            Or => p | q,
            Xor => p ^ q,
            _ => 0,
        })),
        (Wide::B(x), Wide::B(y)) if op.is_comparison() => {
            Wide::B(zip2(x, y, |p, q| cmp(p.cmp(&q))))
        }
        (Wide::B(x), Wide::B(y)) => Wide::B(zip2(x, y, |p, q| match op {
            And | Min => p & q,
            Or | Max => p | q,
            Xor => p ^ q,
            _ => false,
        })),
        _ => return Err(prim_err(prim, "operands of different dtypes")),
    })
}

fn unary_wide(op: UnaryOp, w: &Wide) -> Wide {
    match w {
        Wide::F(a) => Wide::F(a.mapv(|x| op.apply_f(x))),
        Wide::I(a) => Wide::I(a.mapv(|x| match op {
            UnaryOp::Neg => x.wrapping_neg(),
            UnaryOp::Abs => x.wrapping_abs(),
            UnaryOp::Sign => x.signum(),
            UnaryOp::Not => !x,
            _ => x,
        })),
        Wide::U(a) => Wide::U(a.mapv(|x| match op {
            UnaryOp::Neg => x.wrapping_neg(),
            UnaryOp::Sign => u64::from(x != 0),
            UnaryOp::Not => !x,
            _ => x,
        })),
        Wide::B(a) => Wide::B(a.mapv(|x| if op == UnaryOp::Not { !x } else { x })),
    }
}

fn int_pow(w: &Wide, y: i32) -> Wide {
    match w {
        Wide::F(a) => Wide::F(a.mapv(|x| x.powi(y))),
        Wide::I(a) => Wide::I(a.mapv(|x| if y < 0 { 0 } else { x.wrapping_pow(y as u32) })),
        Wide::U(a) => Wide::U(a.mapv(|x| if y < 0 { 0 } else { x.wrapping_pow(y as u32) })),
        Wide::B(a) => Wide::B(a.clone()),
    }
}

/// Evaluates an elementwise primitive.
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Array, EvalError> {
    let avals: Vec<ShapedArray> = args.iter().map(Array::aval).collect();
    shape_rule(prim, &avals).map_err(|e| prim_err(prim, e.message))?;
    let shape = out_shape(args);
    let ws: Vec<Wide> = args.iter().map(|a| bcast(&a.widen(), &shape)).collect();
    let arity = |n: usize| {
        if ws.len() == n {
            Ok(())
        } else {
            Err(prim_err(prim, format!("takes {n} operands")))
        }
    };
    match prim {
        Primitive::Unary(op) => {
            arity(1)?;
            Ok(Array::from_wide(&unary_wide(*op, &ws[0]), args[0].dtype()))
        }
        Primitive::Binary(op) => {
            arity(2)?;
            let r = binary_wide(prim, *op, &ws[0], &ws[1])?;
            let d = if op.is_comparison() {
                DType::Bool
            } else {
                args[0].dtype()
            };
            Ok(Array::from_wide(&r, d))
        }
        Primitive::IntegerPow { y } => {
            arity(1)?;
            Ok(Array::from_wide(&int_pow(&ws[0], *y), args[0].dtype()))
        }
        Primitive::SelectN => {
            if ws.len() < 2 {
                return Err(prim_err(prim, "needs a predicate and a case"));
            }
            let which = ws[0].to_i64();
            let n = ws.len() - 1;
            let mut out = ws[1].clone();
            for (k, case) in ws[2..].iter().enumerate() {
                let pick =
                    which.mapv(|i| i as usize == k + 1 || (k + 2 == n + 1 && i as usize > n));
                out = select(&pick, case, &out);
            }
            Ok(Array::from_wide(&out, args[1].dtype()))
        }
        Primitive::Clamp => {
            arity(3)?;
            let lo = binary_wide(prim, BinaryOp::Max, &ws[1], &ws[0])?;
            let r = binary_wide(prim, BinaryOp::Min, &lo, &ws[2])?;
            Ok(Array::from_wide(&r, args[1].dtype()))
        }
        _ => Err(prim_err(prim, "not an elementwise primitive")),
    }
}

fn select(pick: &ArrayD<bool>, a: &Wide, b: &Wide) -> Wide {
    fn sel<T: Clone>(p: &ArrayD<bool>, a: &ArrayD<T>, b: &ArrayD<T>) -> ArrayD<T> {
        Zip::from(p)
            .and(a)
            .and(b)
            .map_collect(|&p, x, y| if p { x.clone() } else { y.clone() })
    }
    match (a, b) {
        (Wide::F(x), Wide::F(y)) => Wide::F(sel(pick, x, y)),
        (Wide::I(x), Wide::I(y)) => Wide::I(sel(pick, x, y)),
        (Wide::U(x), Wide::U(y)) => Wide::U(sel(pick, x, y)),
        (Wide::B(x), Wide::B(y)) => Wide::B(sel(pick, x, y)),
        _ => b.clone(),
    }
}
