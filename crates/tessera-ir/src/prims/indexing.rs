//! Indexing primitives: `slice`, `dynamic_slice`, `dynamic_update_slice`, `concatenate`, `pad`.

use super::{PadDim, Primitive, TypeError, type_err};
use crate::interp::{Array, EvalError, Wide, prim_err};
use crate::types::ShapedArray;
use ndarray::{ArrayD, Axis, IxDyn, Slice};

fn pad_size(n: usize, p: &PadDim) -> i64 {
    let interior = if n > 0 {
        (n as i64 - 1) * p.interior
    } else {
        0
    };
    p.low + p.high + n as i64 + interior
}

/// The shape rule of the indexing family.
pub fn shape_rule(prim: &Primitive, ins: &[ShapedArray]) -> Result<ShapedArray, TypeError> {
    let err = |m: String| Err(type_err(prim, ins, m));
    let Some(a) = ins.first() else {
        return err("needs an operand".into());
    };
    match prim {
        Primitive::Slice {
            start_indices: st,
            limit_indices: li,
            strides,
        } => {
            let ones = vec![1; a.ndim()];
            let sd = strides.as_deref().unwrap_or(&ones);
            let ok = ins.len() == 1
                && st.len() == a.ndim()
                && li.len() == a.ndim()
                && sd.len() == a.ndim()
                && (0..a.ndim()).all(|d| st[d] <= li[d] && li[d] <= a.shape[d] && sd[d] > 0);
            if !ok {
                return err(format!(
                    "start {st:?}, limit {li:?}, strides {sd:?} do not fit"
                ));
            }
            let s: Vec<usize> = (0..a.ndim())
                .map(|d| (li[d] - st[d]).div_ceil(sd[d]))
                .collect();
            Ok(a.with_shape(&s))
        }
        Primitive::DynamicSlice { slice_sizes } => {
            let ok = ins.len() == 1 + a.ndim()
                && slice_sizes.len() == a.ndim()
                && slice_sizes.iter().zip(&a.shape).all(|(s, d)| s <= d)
                && ins[1..].iter().all(|i| i.ndim() == 0 && i.dtype.is_int());
            if !ok {
                return err(format!(
                    "needs one scalar integer start per dimension and slice_sizes={slice_sizes:?} within the operand"
                ));
            }
            Ok(a.with_shape(slice_sizes))
        }
        Primitive::DynamicUpdateSlice => {
            let ok = ins.len() == 2 + a.ndim()
                && ins[1].dtype == a.dtype
                && ins[1].ndim() == a.ndim()
                && ins[1].shape.iter().zip(&a.shape).all(|(s, d)| s <= d)
                && ins[2..].iter().all(|i| i.ndim() == 0 && i.dtype.is_int());
            if !ok {
                return err("needs an update no larger than the operand and one scalar integer start per dimension".into());
            }
            Ok(a.clone())
        }
        Primitive::Concatenate { dimension } => {
            let d = *dimension;
            let ok = d < a.ndim()
                && ins.iter().all(|b| {
                    b.dtype == a.dtype
                        && b.ndim() == a.ndim()
                        && (0..a.ndim()).all(|k| k == d || b.shape[k] == a.shape[k])
                });
            if !ok {
                return err(format!(
                    "operands must agree in dtype and in every dimension but {d}"
                ));
            }
            let mut s = a.shape.to_vec();
            s[d] = ins.iter().map(|b| b.shape[d]).sum();
            Ok(a.with_shape(&s))
        }
        Primitive::Pad { padding_config } => {
            let ok = ins.len() == 2
                && ins[1].ndim() == 0
                && ins[1].dtype == a.dtype
                && padding_config.len() == a.ndim()
                && padding_config
                    .iter()
                    .zip(&a.shape)
                    .all(|(p, &n)| p.interior >= 0 && pad_size(n, p) >= 0);
            if !ok {
                return err(format!(
                    "needs a scalar padding value of the operand's dtype and one valid (low, high, interior) per dimension, got {padding_config:?}"
                ));
            }
            let s: Vec<usize> = padding_config
                .iter()
                .zip(&a.shape)
                .map(|(p, &n)| pad_size(n, p) as usize)
                .collect();
            Ok(a.with_shape(&s))
        }
        _ => err("not an indexing primitive".into()),
    }
}

fn clamp_starts(args: &[Array], shape: &[usize], sizes: &[usize]) -> Vec<usize> {
    args.iter()
        .zip(shape.iter().zip(sizes))
        .map(|(a, (&n, &s))| {
            let i = a.widen().to_i64().iter().next().copied().unwrap_or(0);
            i.clamp(0, (n - s) as i64) as usize
        })
        .collect()
}

fn pad_any<T: Clone>(a: &ArrayD<T>, v: T, cfg: &[PadDim]) -> ArrayD<T> {
    let shape: Vec<usize> = cfg
        .iter()
        .zip(a.shape())
        .map(|(p, &n)| pad_size(n, p).max(0) as usize)
        .collect();
    let mut out = ArrayD::from_elem(IxDyn(&shape), v);
    for (ix, x) in a.indexed_iter() {
        let pos: Option<Vec<usize>> = (0..cfg.len())
            .map(|d| {
                let o = cfg[d].low + ix[d] as i64 * (cfg[d].interior + 1);
                (o >= 0 && (o as usize) < shape[d]).then_some(o as usize)
            })
            .collect();
        if let Some(p) = pos {
            out[IxDyn(&p)] = x.clone();
        }
    }
    out
}

/// Evaluates an indexing primitive.
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Array, EvalError> {
    let avals: Vec<ShapedArray> = args.iter().map(Array::aval).collect();
    let out = shape_rule(prim, &avals).map_err(|e| prim_err(prim, e.message))?;
    let x = &args[0];
    let w = x.widen();
    let r = match prim {
        Primitive::Slice {
            start_indices: st,
            limit_indices: li,
            strides,
        } => crate::wide_map!(&w, a => {
            a.slice_each_axis(|ax| {
                let d = ax.axis.index();
                let step = strides.as_ref().map_or(1, |s| s[d]) as isize;
                Slice::new(st[d] as isize, Some(li[d] as isize), step)
            }).to_owned()
        }),
        Primitive::DynamicSlice { slice_sizes } => {
            let st = clamp_starts(&args[1..], x.shape(), slice_sizes);
            crate::wide_map!(&w, a => a.slice_each_axis(|ax| {
                let d = ax.axis.index();
                Slice::from(st[d]..st[d] + slice_sizes[d])
            }).to_owned())
        }
        Primitive::DynamicUpdateSlice => {
            let upd = args[1].widen();
            let us = args[1].shape().to_vec();
            let st = clamp_starts(&args[2..], x.shape(), &us);
            let slicer = |ax: ndarray::AxisDescription| {
                let d = ax.axis.index();
                Slice::from(st[d]..st[d] + us[d])
            };
            match (w, upd) {
                (Wide::F(mut a), Wide::F(u)) => {
                    a.slice_each_axis_mut(slicer).assign(&u);
                    Wide::F(a)
                }
                (Wide::I(mut a), Wide::I(u)) => {
                    a.slice_each_axis_mut(slicer).assign(&u);
                    Wide::I(a)
                }
                (Wide::U(mut a), Wide::U(u)) => {
                    a.slice_each_axis_mut(slicer).assign(&u);
                    Wide::U(a)
                }
                (Wide::B(mut a), Wide::B(u)) => {
                    a.slice_each_axis_mut(slicer).assign(&u);
                    Wide::B(a)
                }
                _ => return Err(prim_err(prim, "update dtype differs")),
            }
        }
        Primitive::Concatenate { dimension } => {
            let ws: Vec<Wide> = args.iter().map(Array::widen).collect();
            let bad = || prim_err(prim, "operands do not fit");
            macro_rules! cat {
                ($v:ident) => {{
                    let views: Vec<_> = ws
                        .iter()
                        .filter_map(|w| {
                            if let Wide::$v(a) = w {
                                Some(a.view())
                            } else {
                                None
                            }
                        })
                        .collect();
                    Wide::$v(ndarray::concatenate(Axis(*dimension), &views).map_err(|_| bad())?)
                }};
            }
            match w {
                Wide::F(_) => cat!(F),
                Wide::I(_) => cat!(I),
                Wide::U(_) => cat!(U),
                Wide::B(_) => cat!(B),
            }
        }
        Primitive::Pad { padding_config } => {
            let v = args[1].widen();
            let bad = || prim_err(prim, "padding value missing");
            match (&w, &v) {
                (Wide::F(a), Wide::F(p)) => Wide::F(pad_any(
                    a,
                    p.iter().next().cloned().ok_or_else(bad)?,
                    padding_config,
                )),
                (Wide::I(a), Wide::I(p)) => Wide::I(pad_any(
                    a,
                    p.iter().next().cloned().ok_or_else(bad)?,
                    padding_config,
                )),
                (Wide::U(a), Wide::U(p)) => Wide::U(pad_any(
                    a,
                    p.iter().next().cloned().ok_or_else(bad)?,
                    padding_config,
                )),
                (Wide::B(a), Wide::B(p)) => Wide::B(pad_any(
                    a,
                    p.iter().next().cloned().ok_or_else(bad)?,
                    padding_config,
                )),
                _ => return Err(prim_err(prim, "padding value dtype differs")),
            }
        }
        _ => return Err(prim_err(prim, "not an indexing primitive")),
    };
    Ok(Array::from_wide(&r, out.dtype))
}
