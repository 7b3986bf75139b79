//! A toy regression model for trying pipelines quickly: a stack of `tanh` layers of one width,
//! one layer per stage, trained to match a fixed random `tanh` layer (the teacher) on fixed
//! inputs. Its data are pure functions of their index, so runs repeat exactly.

use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

use crate::error::Result;
use crate::tree::Tree;

/// A stack of `layers` square `tanh` layers of `width` units, without biases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TanhMlp {
    /// Layers (and weight matrices).
    pub layers: usize,
    /// Units per layer.
    pub width: i64,
}

impl TanhMlp {
    /// The weights' types, named `w0`, `w1`, ...
    pub fn avals(&self) -> Tree<ShapedArray> {
        let square = ShapedArray::new(DType::F32, &[self.width, self.width]);
        Tree::node((0..self.layers).map(|l| (format!("w{l}"), Tree::Leaf(square.clone()))))
    }

    /// The initial weights: a fixed sine pattern scaled by 0.5.
    pub fn init(&self) -> Result<Tree<Array>> {
        let n = self.width * self.width;
        let leaves = (0..self.layers)
            .map(|l| {
                Array::new(
                    DType::F32,
                    &[self.width, self.width],
                    pseudo(l as f64 + 0.5, n, 0.5),
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        self.avals().unflatten(leaves)
    }

    /// `x [rows, width], w_0..w_{L-1}, y [rows, width] -> mean((tanh(.. tanh(x w_0) ..) - y)^2)`,
    /// with a stage marker before every layer but the first when `staged`.
    pub fn loss(&self, rows: i64, staged: bool) -> Result<ClosedJaxpr> {
        let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
        let mut avals = vec![f(&[rows, self.width])];
        avals.extend(self.avals().flatten());
        avals.push(f(&[rows, self.width]));
        let layers = self.layers;
        Ok(trace(&avals, |a| {
            let mut h = a[0].clone();
            for l in 0..layers {
                if l > 0 && staged {
                    h = h.enter_stage(l as i64);
                }
                h = h.matmul(&a[1 + l]).tanh();
            }
            vec![(&h - &a[layers + 1]).integer_pow(2).mean(&[0, 1])]
        })?)
    }

    /// Batch `index`: `rows` inputs and the teacher's outputs for them.
    pub fn batch(&self, index: u64, rows: i64) -> Result<(Array, Array)> {
        let w = self.width;
        let teacher = Array::new(DType::F32, &[w, w], pseudo(99.0, w * w, 0.4))?;
        let program = trace(&[f32_aval(&[rows, w]), teacher.aval()], |a| {
            vec![a[0].matmul(&a[1]).tanh()]
        })?;
        let x = Array::new(
            DType::F32,
            &[rows, w],
            pseudo(index as f64 * 7.0, rows * w, 1.0),
        )?;
        let y = eval_closed(&program, &[x.clone(), teacher])?.remove(0);
        Ok((x, y))
    }
}

fn f32_aval(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn pseudo(seed: f64, n: i64, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.618_034 + seed).sin() * scale)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loss_of_the_teacher_is_zero_and_of_the_init_is_not() {
        let mlp = TanhMlp {
            layers: 1,
            width: 4,
        };
        let (x, y) = mlp.batch(3, 2).unwrap();
        let loss = mlp.loss(2, false).unwrap();
        let teacher = Array::new(DType::F32, &[4, 4], pseudo(99.0, 16, 0.4)).unwrap();
        let at_teacher = eval_closed(&loss, &[x.clone(), teacher, y.clone()]).unwrap();
        assert_eq!(at_teacher[0].to_vec(), vec![0.0]);
        let init = mlp.init().unwrap().flatten();
        let at_init = eval_closed(&loss, &[x, init[0].clone(), y]).unwrap();
        assert!(at_init[0].to_vec()[0] > 1e-3);
    }
}
