//! Operations on [`Tensor`]s: operators with broadcasting and promotion, and named methods.

use super::{Operand, Tensor, TraceError, bind1, record};
use crate::ir::{Literal, Scalar};
use crate::prims::{BinaryOp, Primitive, ReduceOp, UnaryOp};
use crate::types::{DType, Shape, ShapedArray};
use std::ops;

fn op_err(op: &str, message: String) -> TraceError {
    TraceError::Op {
        op: op.into(),
        message,
    }
}

fn kind(d: DType) -> u8 {
    if d == DType::Bool {
        0
    } else if d.is_unsigned_int() {
        1
    } else if d.is_signed_int() {
        2
    } else {
        3
    }
}

fn width(d: DType) -> u8 {
    match d {
        DType::Bool | DType::I8 | DType::U8 => 1,
        DType::I16 | DType::U16 | DType::BF16 | DType::F16 => 2,
        DType::I32 | DType::U32 | DType::F32 => 4,
        DType::I64 | DType::U64 | DType::F64 => 8,
    }
}

/// The dtype two operands promote to (a weak operand yields to a strong one of its kind or above).
fn promote(a: &ShapedArray, b: &ShapedArray) -> DType {
    if a.dtype == b.dtype {
        return a.dtype;
    }
    if a.weak_type != b.weak_type {
        let (w, s) = if a.weak_type { (a, b) } else { (b, a) };
        if kind(w.dtype) <= kind(s.dtype) {
            return s.dtype;
        }
        return w.dtype;
    }
    let key = |d: DType| (kind(d), width(d));
    if key(a.dtype) >= key(b.dtype) {
        a.dtype
    } else {
        b.dtype
    }
}

/// A Rust scalar usable as an operand (a weakly typed literal).
pub trait IntoScalar: Copy {
    /// The literal value and its default dtype.
    fn scalar(self) -> (Scalar, DType);
}

impl IntoScalar for f32 {
    fn scalar(self) -> (Scalar, DType) {
        (Scalar::Float(f64::from(self)), DType::F32)
    }
}

impl IntoScalar for f64 {
    fn scalar(self) -> (Scalar, DType) {
        (Scalar::Float(self), DType::F32)
    }
}

impl IntoScalar for i32 {
    fn scalar(self) -> (Scalar, DType) {
        (Scalar::Int(i64::from(self)), DType::I32)
    }
}

impl IntoScalar for bool {
    fn scalar(self) -> (Scalar, DType) {
        (Scalar::Bool(self), DType::Bool)
    }
}

/// A weak literal of `dtype`; floats are rounded to the dtype's precision (as JAX stores them).
fn literal(value: Scalar, dtype: DType) -> Literal {
    let value = match (value, dtype) {
        (v, DType::F32) => Scalar::Float(f64::from(v.as_f64() as f32)),
        (v, DType::F16) => Scalar::Float(half::f16::from_f64(v.as_f64()).to_f64()),
        (v, DType::BF16) => Scalar::Float(half::bf16::from_f64(v.as_f64()).to_f64()),
        (v, d) if d.is_float() => Scalar::Float(v.as_f64()),
        (Scalar::Bool(b), DType::Bool) => Scalar::Bool(b),
        (v, DType::Bool) => Scalar::Bool(v.as_f64() != 0.0),
        (Scalar::Float(x), _) => Scalar::Int(x as i64),
        (v, _) => v,
    };
    Literal::new(value, dtype)
}

impl Tensor {
    fn convert_to(&self, d: DType) -> Tensor {
        if self.dtype() == d {
            return self.clone();
        }
        let weak = self.aval.weak_type;
        bind1(
            Primitive::ConvertElementType {
                new_dtype: d,
                weak_type: weak,
            },
            &[Operand::T(self.clone())],
        )
    }

    /// Broadcasts to rank `r` by adding leading size-1 dimensions (rank 0 stays scalar).
    fn to_rank(&self, r: usize) -> Tensor {
        let n = self.ndim();
        if n == 0 || n >= r {
            return self.clone();
        }
        let mut shape: Shape = std::iter::repeat_n(1, r - n).collect();
        shape.extend(self.shape().iter().copied());
        let bd = (r - n..r).collect();
        bind1(
            Primitive::BroadcastInDim {
                shape,
                broadcast_dimensions: bd,
            },
            &[Operand::T(self.clone())],
        )
    }

    fn binary(&self, op: BinaryOp, other: &Tensor) -> Tensor {
        let d = promote(&self.aval, &other.aval);
        let r = self.ndim().max(other.ndim());
        let (a, b) = (
            self.convert_to(d).to_rank(r),
            other.convert_to(d).to_rank(r),
        );
        bind1(Primitive::Binary(op), &[Operand::T(a), Operand::T(b)])
    }

    fn binary_scalar(&self, op: BinaryOp, s: impl IntoScalar, scalar_first: bool) -> Tensor {
        let (v, sd) = s.scalar();
        let lit_aval = ShapedArray::scalar(sd).weak(true);
        let d = promote(&self.aval, &lit_aval);
        let t = Operand::T(self.convert_to(d));
        let l = Operand::L(literal(v, d));
        let ins = if scalar_first { [l, t] } else { [t, l] };
        bind1(Primitive::Binary(op), &ins)
    }

    fn unary(&self, op: UnaryOp) -> Tensor {
        bind1(Primitive::Unary(op), &[Operand::T(self.clone())])
    }

    /// Normalises a possibly negative axis; records an error naming `op` when out of range.
    pub(crate) fn axis(&self, op: &str, axis: isize) -> Option<usize> {
        let n = self.ndim() as isize;
        let a = if axis < 0 { axis + n } else { axis };
        if (0..n).contains(&a) {
            Some(a as usize)
        } else {
            record(op_err(
                op,
                format!("axis {axis} is out of range for {}", self.aval),
            ));
            None
        }
    }

    fn axes(&self, op: &str, axes: &[isize]) -> Option<Vec<usize>> {
        let mut v: Vec<usize> = axes
            .iter()
            .map(|&a| self.axis(op, a))
            .collect::<Option<_>>()?;
        v.sort_unstable();
        v.dedup();
        Some(v)
    }
}

macro_rules! unary_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "`.")]
                pub fn $name(&self) -> Tensor {
                    self.unary(UnaryOp::$op)
                }
            )*
        }
    };
}

unary_methods!(
    exp => Exp, exp2 => Exp2, log => Log, log1p => Log1p, expm1 => Expm1, tanh => Tanh,
    logistic => Logistic, sin => Sin, cos => Cos, sqrt => Sqrt, rsqrt => Rsqrt, abs => Abs,
    sign => Sign, floor => Floor, ceil => Ceil, round => RoundEven, logical_not => Not,
);

macro_rules! binary_methods {
    ($($name:ident, $sname:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting.")]
                pub fn $name(&self, other: &Tensor) -> Tensor {
                    self.binary(BinaryOp::$op, other)
                }
                #[doc = concat!("Elementwise `", stringify!($name), "` with a scalar.")]
                pub fn $sname(&self, s: impl IntoScalar) -> Tensor {
                    self.binary_scalar(BinaryOp::$op, s, false)
                }
            )*
        }
    };
}

binary_methods!(
    maximum, max_scalar => Max, minimum, min_scalar => Min, pow, pow_scalar => Pow,
    rem, rem_scalar => Rem, eq, eq_scalar => Eq, ne, ne_scalar => Ne, lt, lt_scalar => Lt,
    le, le_scalar => Le, gt, gt_scalar => Gt, ge, ge_scalar => Ge, and, and_scalar => And,
    or, or_scalar => Or,
);

impl Tensor {
    /// `x ** y` for a constant integer.
    pub fn integer_pow(&self, y: i32) -> Tensor {
        bind1(Primitive::IntegerPow { y }, &[Operand::T(self.clone())])
    }

    /// Converts to `dtype` (`convert_element_type`).
    pub fn astype(&self, dtype: DType) -> Tensor {
        bind1(
            Primitive::ConvertElementType {
                new_dtype: dtype,
                weak_type: false,
            },
            &[Operand::T(self.clone())],
        )
    }

    /// `stop_gradient`.
    pub fn stop_gradient(&self) -> Tensor {
        bind1(Primitive::StopGradient, &[Operand::T(self.clone())])
    }

    /// Row-major reshape.
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        bind1(
            Primitive::Reshape {
                new_sizes: shape.iter().copied().collect(),
            },
            &[Operand::T(self.clone())],
        )
    }

    /// Permutes dimensions.
    pub fn transpose(&self, permutation: &[usize]) -> Tensor {
        bind1(
            Primitive::Transpose {
                permutation: permutation.to_vec(),
            },
            &[Operand::T(self.clone())],
        )
    }

    /// `broadcast_in_dim`: operand dimension `i` becomes dimension `dims[i]` of `shape`.
    pub fn broadcast_in_dim(&self, shape: &[usize], dims: &[usize]) -> Tensor {
        let p = Primitive::BroadcastInDim {
            shape: shape.iter().copied().collect(),
            broadcast_dimensions: dims.to_vec(),
        };
        bind1(p, &[Operand::T(self.clone())])
    }

    /// Numpy-style broadcast to `shape` (trailing dimensions aligned).
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        if shape.len() < self.ndim() {
            record(op_err(
                "broadcast_to",
                format!("cannot broadcast {} to {shape:?}", self.aval),
            ));
            return self.clone();
        }
        let off = shape.len() - self.ndim();
        self.broadcast_in_dim(shape, &(off..shape.len()).collect::<Vec<_>>())
    }

    fn reduce(&self, op: ReduceOp, axes: &[isize], keepdims: bool) -> Tensor {
        let Some(axes) = self.axes(op.name(), axes) else {
            return self.clone();
        };
        let r = bind1(
            Primitive::Reduce {
                op,
                axes: axes.clone(),
            },
            &[Operand::T(self.clone())],
        );
        if !keepdims {
            return r;
        }
        let shape: Vec<usize> = (0..self.ndim())
            .map(|d| {
                if axes.contains(&d) {
                    1
                } else {
                    self.shape()[d]
                }
            })
            .collect();
        let kept: Vec<usize> = (0..self.ndim()).filter(|d| !axes.contains(d)).collect();
        r.broadcast_in_dim(&shape, &kept)
    }

    /// Sum over `axes` (negative axes count from the end).
    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Tensor {
        self.reduce(ReduceOp::Sum, axes, keepdims)
    }

    /// Maximum over `axes`.
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Tensor {
        self.reduce(ReduceOp::Max, axes, keepdims)
    }

    /// Minimum over `axes`.
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Tensor {
        self.reduce(ReduceOp::Min, axes, keepdims)
    }

    /// Product over `axes`.
    pub fn prod(&self, axes: &[isize], keepdims: bool) -> Tensor {
        self.reduce(ReduceOp::Prod, axes, keepdims)
    }

    /// Index of the maximum along `axis` (as i32).
    pub fn argmax(&self, axis: isize) -> Tensor {
        let Some(axis) = self.axis("argmax", axis) else {
            return self.clone();
        };
        let p = Primitive::ArgReduce {
            op: crate::prims::ArgOp::Max,
            axis,
            index_dtype: DType::I32,
        };
        bind1(p, &[Operand::T(self.clone())])
    }

    /// `dot_general` with `(lhs, rhs)` contracting and batch dimensions.
    pub fn dot_general(
        &self,
        rhs: &Tensor,
        contracting: (&[usize], &[usize]),
        batch: (&[usize], &[usize]),
    ) -> Tensor {
        let d = promote(&self.aval, &rhs.aval);
        let p = Primitive::DotGeneral {
            lhs_contracting: contracting.0.to_vec(),
            rhs_contracting: contracting.1.to_vec(),
            lhs_batch: batch.0.to_vec(),
            rhs_batch: batch.1.to_vec(),
            preferred_element_type: Some(d),
        };
        bind1(
            p,
            &[
                Operand::T(self.convert_to(d)),
                Operand::T(rhs.convert_to(d)),
            ],
        )
    }

    /// Matrix product: `[..., m, k] @ [k, n]` (or `[k]`), contracting the last dimension of `self`
    /// with the first of `rhs` (`jnp.matmul` for a 1-D or 2-D `rhs`).
    pub fn matmul(&self, rhs: &Tensor) -> Tensor {
        if self.ndim() == 0 || rhs.ndim() == 0 || rhs.ndim() > 2 {
            record(op_err(
                "matmul",
                format!(
                    "needs operands of rank >= 1 and a rhs of rank 1 or 2, got {} and {}",
                    self.aval, rhs.aval
                ),
            ));
            return self.clone();
        }
        self.dot_general(rhs, (&[self.ndim() - 1], &[0]), (&[], &[]))
    }

    /// Static slice with unit strides.
    pub fn slice(&self, start: &[usize], limit: &[usize]) -> Tensor {
        let p = Primitive::Slice {
            start_indices: start.to_vec(),
            limit_indices: limit.to_vec(),
            strides: None,
        };
        bind1(p, &[Operand::T(self.clone())])
    }
}

impl Tensor {
    /// Rows of `self` at integer `indices` (`jnp.take(x, indices, axis=0)`, an embedding lookup):
    /// negative indices count from the end, as in JAX; the result has shape
    /// `indices.shape + self.shape[1:]`.
    pub fn take(&self, indices: &Tensor) -> Tensor {
        let Some(&n) = self.shape().first() else {
            record(op_err(
                "take",
                format!("needs an operand of rank >= 1, got {}", self.aval),
            ));
            return self.clone();
        };
        let wrapped = where_(&indices.lt_scalar(0), &(indices + n as i32), indices);
        let r = indices.ndim();
        let mut ishape = indices.shape().to_vec();
        ishape.push(1);
        let idx = wrapped.broadcast_in_dim(&ishape, &(0..r).collect::<Vec<_>>());
        let mut slice_sizes = self.shape().to_vec();
        slice_sizes[0] = 1;
        let p = Primitive::Gather {
            dimension_numbers: crate::prims::GatherDims {
                offset_dims: (r..r + self.ndim() - 1).collect(),
                collapsed_slice_dims: vec![0],
                start_index_map: vec![0],
                ..Default::default()
            },
            slice_sizes,
            mode: crate::prims::IndexMode::PromiseInBounds,
            fill_value: None,
            indices_are_sorted: false,
            unique_indices: false,
        };
        bind1(p, &[Operand::T(self.clone()), Operand::T(idx)])
    }
}

/// Concatenates tensors along `axis`.
pub fn concatenate(ts: &[&Tensor], axis: usize) -> Option<Tensor> {
    let ins: Vec<Operand> = ts.iter().map(|t| Operand::T((*t).clone())).collect();
    (!ins.is_empty()).then(|| bind1(Primitive::Concatenate { dimension: axis }, &ins))
}

/// `iota`: indices along `dimension` of an array of `shape`.
pub fn iota(dtype: DType, shape: &[usize], dimension: usize) -> Tensor {
    bind1(
        Primitive::Iota {
            dtype,
            shape: shape.iter().copied().collect(),
            dimension,
        },
        &[],
    )
}

/// An array of `shape` filled with `value` (a broadcast literal).
pub fn full(shape: &[usize], value: impl IntoScalar, dtype: DType) -> Tensor {
    let (v, _) = value.scalar();
    let p = Primitive::BroadcastInDim {
        shape: shape.iter().copied().collect(),
        broadcast_dimensions: vec![],
    };
    bind1(p, &[Operand::L(literal(v, dtype))])
}

/// `select_n(which, cases)`: `cases[which]` elementwise.
pub fn select_n(which: &Tensor, cases: &[&Tensor]) -> Tensor {
    let mut ins = vec![Operand::T(which.clone())];
    ins.extend(cases.iter().map(|t| Operand::T((*t).clone())));
    bind1(Primitive::SelectN, &ins)
}

/// `where(cond, x, y)` with broadcasting of all three to a common shape.
pub fn where_(cond: &Tensor, x: &Tensor, y: &Tensor) -> Tensor {
    let d = promote(&x.aval, &y.aval);
    let r = cond.ndim().max(x.ndim()).max(y.ndim());
    let mut shape = vec![1usize; r];
    for t in [cond, x, y] {
        let off = r - t.ndim();
        for (i, &s) in t.shape().iter().enumerate() {
            if s != 1 {
                shape[off + i] = s;
            }
        }
    }
    let fit = |t: &Tensor| {
        if t.shape() == shape.as_slice() {
            t.clone()
        } else {
            t.broadcast_to(&shape)
        }
    };
    let (c, x, y) = (fit(cond), fit(&x.convert_to(d)), fit(&y.convert_to(d)));
    select_n(&c, &[&y, &x])
}

macro_rules! impl_binop {
    ($tr:ident, $m:ident, $op:ident) => {
        impl ops::$tr<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $m(self, rhs: &Tensor) -> Tensor {
                self.binary(BinaryOp::$op, rhs)
            }
        }
        impl ops::$tr<Tensor> for Tensor {
            type Output = Tensor;
            fn $m(self, rhs: Tensor) -> Tensor {
                self.binary(BinaryOp::$op, &rhs)
            }
        }
        impl ops::$tr<&Tensor> for Tensor {
            type Output = Tensor;
            fn $m(self, rhs: &Tensor) -> Tensor {
                self.binary(BinaryOp::$op, rhs)
            }
        }
        impl ops::$tr<Tensor> for &Tensor {
            type Output = Tensor;
            fn $m(self, rhs: Tensor) -> Tensor {
                self.binary(BinaryOp::$op, &rhs)
            }
        }
        impl_binop!(@scalar $tr, $m, $op, f64);
        impl_binop!(@scalar $tr, $m, $op, i32);
    };
    (@scalar $tr:ident, $m:ident, $op:ident, $s:ty) => {
        impl ops::$tr<$s> for &Tensor {
            type Output = Tensor;
            fn $m(self, rhs: $s) -> Tensor {
                self.binary_scalar(BinaryOp::$op, rhs, false)
            }
        }
        impl ops::$tr<$s> for Tensor {
            type Output = Tensor;
            fn $m(self, rhs: $s) -> Tensor {
                self.binary_scalar(BinaryOp::$op, rhs, false)
            }
        }
        impl ops::$tr<Tensor> for $s {
            type Output = Tensor;
            fn $m(self, rhs: Tensor) -> Tensor {
                rhs.binary_scalar(BinaryOp::$op, self, true)
            }
        }
        impl ops::$tr<&Tensor> for $s {
            type Output = Tensor;
            fn $m(self, rhs: &Tensor) -> Tensor {
                rhs.binary_scalar(BinaryOp::$op, self, true)
            }
        }
    };
}

impl_binop!(Add, add, Add);
impl_binop!(Sub, sub, Sub);
impl_binop!(Mul, mul, Mul);
impl_binop!(Div, div, Div);

impl ops::Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}

impl ops::Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}
