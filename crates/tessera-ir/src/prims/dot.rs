//! `dot_general`: contracting and batch dimensions, `preferred_element_type`.

use super::{Primitive, TypeError, type_err};
use crate::interp::{Array, EvalError, Wide, prim_err};
use crate::types::ShapedArray;
use ndarray::{ArrayD, IxDyn};

struct Dims<'a> {
    lc: &'a [usize],
    rc: &'a [usize],
    lb: &'a [usize],
    rb: &'a [usize],
}

fn dims(prim: &Primitive) -> Option<Dims<'_>> {
    match prim {
        Primitive::DotGeneral {
            lhs_contracting,
            rhs_contracting,
            lhs_batch,
            rhs_batch,
            ..
        } => Some(Dims {
            lc: lhs_contracting,
            rc: rhs_contracting,
            lb: lhs_batch,
            rb: rhs_batch,
        }),
        _ => None,
    }
}

fn free(n: usize, c: &[usize], b: &[usize]) -> Vec<usize> {
    (0..n)
        .filter(|d| !c.contains(d) && !b.contains(d))
        .collect()
}

/// The shape rule of `dot_general`.
pub fn shape_rule(prim: &Primitive, ins: &[ShapedArray]) -> Result<ShapedArray, TypeError> {
    let err = |m: String| Err(type_err(prim, ins, m));
    let (Some(d), [l, r]) = (dims(prim), ins) else {
        return err("takes 2 operands".into());
    };
    if l.dtype != r.dtype {
        return err("operand dtypes differ; convert them first".into());
    }
    let in_range = |ds: &[usize], n: usize| ds.iter().all(|&x| x < n);
    if d.lc.len() != d.rc.len()
        || d.lb.len() != d.rb.len()
        || !in_range(d.lc, l.ndim())
        || !in_range(d.lb, l.ndim())
        || !in_range(d.rc, r.ndim())
        || !in_range(d.rb, r.ndim())
    {
        return err(format!(
            "dimension numbers (({:?}, {:?}), ({:?}, {:?})) do not fit the ranks",
            d.lc, d.rc, d.lb, d.rb
        ));
    }
    let sizes_match =
        |a: &[usize], b: &[usize]| a.iter().zip(b).all(|(&i, &j)| l.shape[i] == r.shape[j]);
    if !sizes_match(d.lc, d.rc) || !sizes_match(d.lb, d.rb) {
        return err("contracting or batch dimension sizes differ".into());
    }
    let mut s: Vec<usize> = d.lb.iter().map(|&i| l.shape[i]).collect();
    s.extend(free(l.ndim(), d.lc, d.lb).iter().map(|&i| l.shape[i]));
    s.extend(free(r.ndim(), d.rc, d.rb).iter().map(|&i| r.shape[i]));
    let dtype = match prim {
        Primitive::DotGeneral {
            preferred_element_type: Some(p),
            ..
        } => *p,
        _ => l.dtype,
    };
    Ok(ShapedArray::new(dtype, &s))
}

/// Permutes `a` to `order` and reshapes it to 3-D `[b, m, k]`.
fn to_3d<T: Clone>(a: &ArrayD<T>, order: &[usize], bmk: [usize; 3]) -> Option<ArrayD<T>> {
    let p = a.clone().permuted_axes(IxDyn(order));
    super::structural::reshape_any(&p.as_standard_layout().to_owned(), &bmk)
}

fn matmul<T: Copy + Default + std::ops::Add<Output = T> + std::ops::Mul<Output = T>>(
    l: &ArrayD<T>,
    r: &ArrayD<T>,
    [b, m, k, n]: [usize; 4],
) -> Vec<T> {
    let mut out = vec![T::default(); b * m * n];
    for bi in 0..b {
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::default();
                for c in 0..k {
                    acc = acc + l[[bi, i, c]] * r[[bi, c, j]];
                }
                out[(bi * m + i) * n + j] = acc;
            }
        }
    }
    out
}

/// Evaluates `dot_general` (accumulating in f64 for floats, wrapping i64/u64 for integers).
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Array, EvalError> {
    let [l, r] = args else {
        return Err(prim_err(prim, "takes 2 operands"));
    };
    let out = shape_rule(prim, &[l.aval(), r.aval()]).map_err(|e| prim_err(prim, e.message))?;
    let d = dims(prim).ok_or_else(|| prim_err(prim, "not a dot"))?;
    let (ls, rs) = (l.shape(), r.shape());
    let (lf, rf) = (free(ls.len(), d.lc, d.lb), free(rs.len(), d.rc, d.rb));
    let prod = |ix: &[usize], s: &[usize]| ix.iter().map(|&i| s[i]).product::<usize>();
    let (b, m, k, n) = (prod(d.lb, ls), prod(&lf, ls), prod(d.lc, ls), prod(&rf, rs));
    let lo: Vec<usize> = d.lb.iter().chain(&lf).chain(d.lc).copied().collect();
    let ro: Vec<usize> = d.rb.iter().chain(d.rc).chain(&rf).copied().collect();
    let bad = || prim_err(prim, "operands do not fit the dimension numbers");
    let (lw, rw) = (l.widen(), r.widen());
    let w = match (&lw, &rw) {
        (Wide::I(x), Wide::I(y)) => {
            let (x, y) = (
                to_3d(x, &lo, [b, m, k]).ok_or_else(bad)?,
                to_3d(y, &ro, [b, k, n]).ok_or_else(bad)?,
            );
            let v: Vec<i64> = matmul(
                &x.mapv(std::num::Wrapping),
                &y.mapv(std::num::Wrapping),
                [b, m, k, n],
            )
            .into_iter()
            .map(|w| w.0)
            .collect();
            Wide::I(ArrayD::from_shape_vec(IxDyn(&out.shape), v).map_err(|_| bad())?)
        }
        _ => {
            let (x, y) = (
                to_3d(&lw.to_f64(), &lo, [b, m, k]).ok_or_else(bad)?,
                to_3d(&rw.to_f64(), &ro, [b, k, n]).ok_or_else(bad)?,
            );
            let v = matmul(&x, &y, [b, m, k, n]);
            Wide::F(ArrayD::from_shape_vec(IxDyn(&out.shape), v).map_err(|_| bad())?)
        }
    };
    Ok(Array::from_wide(&w, out.dtype))
}
