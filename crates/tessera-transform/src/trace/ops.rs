//! Tensor operations: arithmetic with numpy broadcasting and dtype promotion, math functions,
//! comparisons, reductions, shape changes and `matmul`.

use std::ops;

use super::Tensor;
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, RoundingMethod};

/// The dtype two operands are promoted to (JAX's lattice, simplified): weak operands adopt the
/// other's dtype; bool < integers < floats; wider wins; bf16 with f16 gives f32.
fn promote(a: &Tensor, b: &Tensor) -> DType {
    let (x, y) = (a.aval(), b.aval());
    if x.weak_type && !y.weak_type {
        return if x.dtype.is_float() && !y.dtype.is_float() {
            x.dtype
        } else {
            y.dtype
        };
    }
    if y.weak_type && !x.weak_type {
        return if y.dtype.is_float() && !x.dtype.is_float() {
            y.dtype
        } else {
            x.dtype
        };
    }
    let rank = |d: DType| {
        (
            u8::from(d.is_float()) * 2 + u8::from(d.is_int()),
            d.size_in_bytes(),
        )
    };
    match (x.dtype, y.dtype) {
        (a, b) if a == b => a,
        (DType::BF16, DType::F16) | (DType::F16, DType::BF16) => DType::F32,
        (a, b) => {
            if rank(a) >= rank(b) {
                a
            } else {
                b
            }
        }
    }
}

impl Tensor {
    /// Converts to `dtype` (`convert_element_type`); a no-op when already of that dtype.
    pub fn astype(&self, dtype: DType) -> Tensor {
        if self.dtype() == dtype && !self.aval().weak_type {
            return self.clone();
        }
        if let crate::jaxpr::Atom::Lit(l) = &self.atom {
            return self.literal(l.to_f64(), dtype);
        }
        let params = Params::new()
            .with("new_dtype", ParamValue::Name(dtype.numpy_name().into()))
            .with("weak_type", ParamValue::Bool(false));
        Tensor::bind1(Prim::ConvertElementType, params, &[self])
    }

    /// Broadcasts to `shape` with numpy's rules (dimensions aligned on the right).
    pub fn broadcast_to(&self, shape: &[i64]) -> Tensor {
        if self.shape() == shape {
            return self.clone();
        }
        let offset = shape.len().checked_sub(self.rank());
        let fits = offset.is_some_and(|o| {
            self.shape()
                .iter()
                .enumerate()
                .all(|(i, &d)| d == 1 || d == shape[o + i])
        });
        let Some(offset) = offset.filter(|_| fits) else {
            return self.fail(
                "broadcast_to",
                format!("cannot broadcast {:?} to {shape:?}", self.shape()),
            );
        };
        let dims: Vec<i64> = (0..self.rank()).map(|i| (offset + i) as i64).collect();
        self.broadcast_in_dim(shape, &dims)
    }

    /// `broadcast_in_dim`, printed as JAX prints it: the shape is implied by the result type
    /// and empty `broadcast_dimensions` are left out.
    pub fn broadcast_in_dim(&self, shape: &[i64], dims: &[i64]) -> Tensor {
        let params = if dims.is_empty() {
            Params::new()
        } else {
            Params::new().with("broadcast_dimensions", ParamValue::ints(dims))
        };
        let out = crate::aval::ShapedArray {
            dtype: self.dtype(),
            shape: shape.to_vec(),
            weak_type: self.aval().weak_type,
            vma: Default::default(),
            sharding: None,
            explicit: None,
        };
        Tensor::bind_typed(Prim::BroadcastInDim, params, &[self], Some(out)).remove(0)
    }

    /// Applies a binary primitive with numpy broadcasting and dtype promotion.
    pub fn binary(&self, prim: Prim, other: &Tensor) -> Tensor {
        if Tensor::check_captured(prim.name(), &[self, other]) {
            return self.clone();
        }
        let dtype = promote(self, other);
        let (a, b) = (self.astype(dtype), other.astype(dtype));
        let (ra, rb) = (a.rank(), b.rank());
        let rank = ra.max(rb);
        let mut shape = vec![1i64; rank];
        for (t, r) in [(&a, ra), (&b, rb)] {
            for (i, &d) in t.shape().iter().enumerate() {
                let slot = &mut shape[rank - r + i];
                if *slot == 1 {
                    *slot = d;
                } else if d != 1 && d != *slot {
                    return self.fail(
                        prim.name(),
                        format!(
                            "shapes {:?} and {:?} do not broadcast",
                            self.shape(),
                            other.shape()
                        ),
                    );
                }
            }
        }
        // As jnp does: lift lower ranks with leading 1s; the op broadcasts size-1 dimensions.
        let lift = |t: Tensor| {
            if t.rank() == 0 || t.rank() == rank {
                return t;
            }
            let mut lifted = vec![1i64; rank - t.rank()];
            lifted.extend_from_slice(t.shape());
            t.broadcast_to(&lifted)
        };
        Tensor::bind1(prim, Params::new(), &[&lift(a), &lift(b)])
    }

    pub(crate) fn unary(&self, prim: Prim) -> Tensor {
        Tensor::bind1(prim, Params::new(), &[self])
    }

    fn scalar_like(&self, value: f64) -> Tensor {
        self.literal(value, self.dtype())
    }

    /// A Rust `f64` operand: a weakly typed float, of this tensor's dtype when that is a float
    /// and `f32` otherwise (so `int_array * 2.0` is a float, as in JAX).
    fn weak_float(&self, value: f64) -> Tensor {
        self.literal(
            value,
            if self.dtype().is_float() {
                self.dtype()
            } else {
                DType::F32
            },
        )
    }

    /// A Rust integer operand: weakly typed, of this tensor's dtype unless that is boolean
    /// (then `int32`).
    fn weak_int(&self, value: f64) -> Tensor {
        let dtype = if self.dtype() == DType::Bool {
            DType::I32
        } else {
            self.dtype()
        };
        self.literal(value, dtype)
    }

    /// `e^x`.
    pub fn exp(&self) -> Tensor {
        self.unary(Prim::Exp)
    }
    /// Natural logarithm.
    pub fn log(&self) -> Tensor {
        self.unary(Prim::Log)
    }
    /// `ln(1 + x)`.
    pub fn log1p(&self) -> Tensor {
        self.unary(Prim::Log1p)
    }
    /// `e^x - 1`.
    pub fn expm1(&self) -> Tensor {
        self.unary(Prim::Expm1)
    }
    /// Rounds down.
    pub fn floor_(&self) -> Tensor {
        self.unary(Prim::Floor)
    }
    /// Rounds to the nearest integer, halves to even (`jnp.round`, which binds `round` with
    /// `RoundingMethod.TO_NEAREST_EVEN`); an integer array is returned as it is, as by
    /// `jnp.round`.
    pub fn round(&self) -> Tensor {
        if self.dtype().is_float() {
            self.round_with(RoundingMethod::ToNearestEven)
        } else {
            self.clone()
        }
    }
    /// Rounds to the nearest integer, halves by `method` (`lax.round`, whose default is
    /// [`RoundingMethod::AwayFromZero`]).
    pub fn round_with(&self, method: RoundingMethod) -> Tensor {
        let params = Params::new().with(RoundingMethod::PARAM, method.param());
        Tensor::bind1(Prim::Round, params, &[self])
    }
    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Tensor {
        self.unary(Prim::Tanh)
    }
    /// The logistic sigmoid.
    pub fn logistic(&self) -> Tensor {
        self.unary(Prim::Logistic)
    }
    /// Sine.
    pub fn sin(&self) -> Tensor {
        self.unary(Prim::Sin)
    }
    /// Cosine.
    pub fn cos(&self) -> Tensor {
        self.unary(Prim::Cos)
    }
    /// Square root.
    pub fn sqrt(&self) -> Tensor {
        self.unary(Prim::Sqrt)
    }
    /// `1 / sqrt(x)`.
    pub fn rsqrt(&self) -> Tensor {
        self.unary(Prim::Rsqrt)
    }
    /// Absolute value.
    pub fn abs(&self) -> Tensor {
        self.unary(Prim::Abs)
    }
    /// -1, 0 or 1.
    pub fn sign(&self) -> Tensor {
        self.unary(Prim::Sign)
    }
    /// Stops gradients flowing through this value.
    pub fn stop_gradient(&self) -> Tensor {
        self.unary(Prim::StopGradient)
    }

    /// `x ** n` for a constant integer `n`.
    pub fn integer_pow(&self, n: i64) -> Tensor {
        Tensor::bind1(
            Prim::IntegerPow,
            Params::new().with("y", ParamValue::Int(n)),
            &[self],
        )
    }

    /// Elementwise maximum.
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        self.binary(Prim::Max, other)
    }
    /// Elementwise minimum.
    pub fn minimum(&self, other: &Tensor) -> Tensor {
        self.binary(Prim::Min, other)
    }
    /// `max(x, 0)`.
    pub fn relu(&self) -> Tensor {
        self.maximum(&self.scalar_like(0.0))
    }
    /// Elementwise `==`.
    pub fn eq(&self, other: &Tensor) -> Tensor {
        self.binary(Prim::Eq, other)
    }
    /// Elementwise `<`.
    pub fn lt(&self, other: &Tensor) -> Tensor {
        self.binary(Prim::Lt, other)
    }
    /// Elementwise `>=`.
    pub fn ge(&self, other: &Tensor) -> Tensor {
        self.binary(Prim::Ge, other)
    }
    /// A scalar of this tensor's dtype, in its trace.
    pub fn full_like_scalar(&self, value: f64) -> Tensor {
        self.scalar_like(value)
    }

    fn reduce(&self, prim: Prim, axes: &[i64]) -> Tensor {
        let rank = self.rank() as i64;
        let mut norm = Vec::new();
        for &a in axes {
            if !(-rank..rank).contains(&a) {
                return self.fail(
                    prim.name(),
                    format!("axis {a} is out of range for shape {:?}", self.shape()),
                );
            }
            norm.push(if a < 0 { a + rank } else { a });
        }
        let mut params = Params::new().with("axes", ParamValue::ints(&norm));
        if prim == Prim::ReduceSum {
            params = params.with("out_sharding", ParamValue::Name("None".into()));
        }
        Tensor::bind1(prim, params, &[self])
    }

    /// Sum over `axes`.
    pub fn sum(&self, axes: &[i64]) -> Tensor {
        self.reduce(Prim::ReduceSum, axes)
    }
    /// Maximum over `axes`.
    pub fn max(&self, axes: &[i64]) -> Tensor {
        self.reduce(Prim::ReduceMax, axes)
    }
    /// Minimum over `axes`.
    pub fn min(&self, axes: &[i64]) -> Tensor {
        self.reduce(Prim::ReduceMin, axes)
    }

    /// Re-inserts reduced `axes` as size-1 dimensions (like `keepdims=True`).
    pub fn keep_dims(&self, axes: &[i64], rank: usize) -> Tensor {
        let mut shape = self.shape().to_vec();
        let mut norm: Vec<usize> = axes
            .iter()
            .map(|&a| {
                if a < 0 {
                    (a + rank as i64) as usize
                } else {
                    a as usize
                }
            })
            .collect();
        norm.sort_unstable();
        for a in norm {
            shape.insert(a.min(shape.len()), 1);
        }
        let kept: Vec<i64> = (0..rank as i64)
            .filter(|d| !axes.iter().any(|&a| (a + rank as i64) % rank as i64 == *d))
            .collect();
        self.broadcast_in_dim(&shape, &kept)
    }

    /// Reshapes (row-major).
    pub fn reshape(&self, shape: &[i64]) -> Tensor {
        let params = Params::new()
            .with("dimensions", ParamValue::Name("None".into()))
            .with("new_sizes", ParamValue::ints(shape))
            .with("sharding", ParamValue::Name("None".into()));
        Tensor::bind1(Prim::Reshape, params, &[self])
    }

    /// The slice `start..limit` along `axis` (other dimensions whole).
    pub fn slice_axis(x: &Tensor, axis: usize, start: i64, limit: i64) -> Tensor {
        if axis >= x.rank() {
            return x.fail(
                "slice",
                format!("axis {axis} is out of range for shape {:?}", x.shape()),
            );
        }
        let mut starts = vec![0i64; x.rank()];
        let mut limits = x.shape().to_vec();
        starts[axis] = start;
        limits[axis] = limit;
        let params = Params::new()
            .with("limit_indices", ParamValue::ints(&limits))
            .with("start_indices", ParamValue::ints(&starts))
            .with("strides", ParamValue::Name("None".into()));
        Tensor::bind1(Prim::Slice, params, &[x])
    }

    /// `update` written into `self` at `indices` (`lax.dynamic_update_slice`): one scalar
    /// integer per dimension, each clamped so the update fits.
    pub fn dynamic_update_slice(&self, update: &Tensor, indices: &[&Tensor]) -> Tensor {
        let mut operands = vec![self, update];
        operands.extend_from_slice(indices);
        Tensor::bind1(Prim::DynamicUpdateSlice, Params::new(), &operands)
    }

    /// `self` followed by `others`, joined along `axis` (`lax.concatenate`; the other
    /// dimensions must agree).
    pub fn concatenate(&self, others: &[&Tensor], axis: usize) -> Tensor {
        if axis >= self.rank() {
            return self.fail(
                "concatenate",
                format!("axis {axis} is out of range for shape {:?}", self.shape()),
            );
        }
        let mut parts = vec![self];
        parts.extend_from_slice(others);
        let params = Params::new().with("dimension", ParamValue::Int(axis as i64));
        Tensor::bind1(Prim::Concatenate, params, &parts)
    }

    /// Permutes dimensions.
    pub fn transpose(&self, permutation: &[i64]) -> Tensor {
        Tensor::bind1(
            Prim::Transpose,
            Params::new().with("permutation", ParamValue::ints(permutation)),
            &[self],
        )
    }

    /// `dot_general` with explicit contracting and batch dimensions.
    pub fn dot_general(
        &self,
        other: &Tensor,
        contract: (&[i64], &[i64]),
        batch: (&[i64], &[i64]),
    ) -> Tensor {
        self.dot_general_out(other, contract, batch, None)
    }

    /// [`Tensor::dot_general`] whose result, where `out_dims` is given, is split over those
    /// mesh axes per dimension (JAX's `out_sharding`, as its transpose rules pass it).
    pub(crate) fn dot_general_out(
        &self,
        other: &Tensor,
        contract: (&[i64], &[i64]),
        batch: (&[i64], &[i64]),
        out_dims: Option<Vec<Vec<String>>>,
    ) -> Tensor {
        let dtype = promote(self, other);
        let (a, b) = (self.astype(dtype), other.astype(dtype));
        let list = |v: &[i64]| ParamValue::List(v.iter().map(|&x| ParamValue::Int(x)).collect());
        let dims = ParamValue::Tuple(vec![
            ParamValue::Tuple(vec![list(contract.0), list(contract.1)]),
            ParamValue::Tuple(vec![list(batch.0), list(batch.1)]),
        ]);
        let params = Params::new().with("dimension_numbers", dims);
        let preferred = ParamValue::Name(dtype.numpy_name().into());
        match out_dims {
            None => {
                let params = params.with("preferred_element_type", preferred);
                Tensor::bind1(Prim::DotGeneral, params, &[&a, &b])
            }
            Some(out_dims) => {
                // The result's explicit sharding is given (JAX's `out_sharding`).
                let mut out = ShapedArray::new(dtype, &vec![1; out_dims.len()]);
                out.set_explicit_dims(out_dims);
                let spec = out.explicit_spec().to_string();
                let params = params
                    .with("out_sharding", ParamValue::Name(spec))
                    .with("preferred_element_type", preferred);
                Tensor::bind_typed(Prim::DotGeneral, params, &[&a, &b], Some(out)).remove(0)
            }
        }
    }

    /// Matrix product: `[.., m, k] x [k, n]`, or batched `[b, m, k] x [b, k, n]`.
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        let (ra, rb) = (self.rank() as i64, other.rank() as i64);
        match (ra, rb) {
            (r, 2) if r >= 1 => self.dot_general(other, (&[r - 1], &[0]), (&[], &[])),
            (3, 3) => self.dot_general(other, (&[2], &[1]), (&[0], &[0])),
            _ => self.fail(
                "matmul",
                format!(
                    "cannot multiply shapes {:?} and {:?}",
                    self.shape(),
                    other.shape()
                ),
            ),
        }
    }
}

/// A Rust integer operand: weakly typed, of the tensor's dtype (`int_array + 1` stays an int
/// array, `float_array * 2` a float array, as in JAX); booleans take `int32`.
macro_rules! int_scalar_binop {
    ($trait:ident, $method:ident, $prim:expr, $int:ty) => {
        impl ops::$trait<$int> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $int) -> Tensor {
                self.binary($prim, &self.weak_int(rhs as f64))
            }
        }
        impl ops::$trait<$int> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $int) -> Tensor {
                (&self).binary($prim, &self.weak_int(rhs as f64))
            }
        }
        impl ops::$trait<&Tensor> for $int {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                rhs.weak_int(self as f64).binary($prim, rhs)
            }
        }
        impl ops::$trait<Tensor> for $int {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                rhs.weak_int(self as f64).binary($prim, &rhs)
            }
        }
    };
}

macro_rules! binop {
    ($trait:ident, $method:ident, $prim:expr) => {
        impl ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.binary($prim, rhs)
            }
        }
        impl ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                (&self).binary($prim, &rhs)
            }
        }
        impl ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                (&self).binary($prim, rhs)
            }
        }
        impl ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                self.binary($prim, &rhs)
            }
        }
        int_scalar_binop!($trait, $method, $prim, i32);
        int_scalar_binop!($trait, $method, $prim, i64);
        impl ops::$trait<f64> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                self.binary($prim, &self.weak_float(rhs))
            }
        }
        impl ops::$trait<f64> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                (&self).binary($prim, &self.weak_float(rhs))
            }
        }
        impl ops::$trait<&Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                rhs.weak_float(self).binary($prim, rhs)
            }
        }
        impl ops::$trait<Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                rhs.weak_float(self).binary($prim, &rhs)
            }
        }
    };
}

binop!(Add, add, Prim::Add);
binop!(Sub, sub, Prim::Sub);
binop!(Mul, mul, Prim::Mul);
binop!(Div, div, Prim::Div);

impl ops::Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(Prim::Neg)
    }
}

impl ops::Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(Prim::Neg)
    }
}
