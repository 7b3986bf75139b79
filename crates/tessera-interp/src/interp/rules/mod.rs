//! The primitives' evaluation rules: [`PrimEval::eval`] matches exhaustively over the primitive
//! families of the core ([`Family`]) and delegates to the module of the same name, so a family
//! without an evaluation rule does not compile (and the core's `Prim::family` match makes a
//! primitive without a family not compile either). The control-flow rules (`cond`, `while`,
//! `scan`, `jit`, custom derivatives, `treduce`, generic `reduce_window`) evaluate their bodies
//! with the interpreter, and `shard_map` with the SPMD interpreter.

mod attention;
mod branch;
mod callback;
mod collective;
mod control;
mod conv;
mod cumulative;
mod elementwise;
mod flow;
mod indexing;
mod linalg;
mod numeric;
mod random;
mod reduce;
mod scan;
mod shard_map;
mod sort;
mod special_fns;
mod structural;
mod treduce;
mod window;

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::error::Result;
use crate::params::Params;
use crate::prim::{Family, Prim};

/// Evaluation of a primitive on host arrays (formerly the inherent `Prim::eval`).
pub trait PrimEval {
    /// Evaluates the primitive on host arrays; `outputs` are the result types.
    fn eval(self, params: &Params, inputs: &[Array], outputs: &[ShapedArray])
    -> Result<Vec<Array>>;
}

impl PrimEval for Prim {
    fn eval(
        self,
        params: &Params,
        inputs: &[Array],
        outputs: &[ShapedArray],
    ) -> Result<Vec<Array>> {
        match self.family() {
            Family::Elementwise(op) => elementwise::eval(op, params, inputs, outputs),
            Family::Structural(op) => structural::eval(self, op, params, inputs, outputs),
            Family::Reduce(op) => reduce::eval(self, op, params, inputs, outputs),
            Family::Linalg => linalg::eval(self, params, inputs, outputs),
            Family::Indexing(op) => indexing::eval(op, params, inputs, outputs),
            Family::Control(op) => control::eval(self, op, params, inputs, outputs),
            Family::Collective(_) => collective::eval(self),
            Family::ShardMap => shard_map::eval(params, inputs),
            Family::Treduce => treduce::eval(params, inputs),
            Family::Numeric(op) => numeric::eval(op, inputs, outputs),
            Family::Random(op) => random::eval(op, inputs, outputs),
            Family::Sort(op) => sort::eval(op, params, inputs, outputs),
            Family::Window(op) => window::eval(self, op, params, inputs, outputs),
            Family::Flow(op) => flow::eval(self, op, params, inputs, outputs),
            Family::Callback(op) => callback::eval(self, op, params, inputs),
            Family::Attention(op) => attention::eval(self, op, params, inputs, outputs),
        }
    }
}
