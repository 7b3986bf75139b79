//! Issue 20 B's numeric family, lowered as JAX lowers it: special functions that StableHLO lacks
//! become CHLO operations (`chlo.erf`, `chlo.erf_inv`, `chlo.lgamma`, ...), which XLA's PJRT
//! plugins expand into polynomials when they legalize the module; the rest are StableHLO
//! operations. Binary operands are broadcast to the result shape first.

use melior::ir::Value;
use tessera_ir::prim::NumericOp;
use tessera_ir::{Prim, ShapedArray};

use super::Ctx;
use super::elementwise::broadcast;
use crate::context::LowerError;

/// Every primitive of the family.
pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    use NumericOp::*;
    let op = prim
        .numeric()
        .ok_or_else(|| LowerError::Build(format!("{} is not numeric", prim.name())))?;
    let out: &ShapedArray = &ctx.out_avals[0];
    let args: Vec<Value<'c, 'b>> = inputs
        .iter()
        .zip(ctx.in_avals)
        .map(|(&v, a)| broadcast(ctx, v, a, &out.shape))
        .collect::<Result<_, _>>()?;
    let name = match op {
        Erf => "chlo.erf",
        Erfc => "chlo.erfc",
        ErfInv => "chlo.erf_inv",
        Lgamma => "chlo.lgamma",
        Digamma => "chlo.digamma",
        Polygamma => "chlo.polygamma",
        Tan => "stablehlo.tan",
        Asin => "chlo.asin",
        Acos => "chlo.acos",
        Atan => "chlo.atan",
        Sinh => "chlo.sinh",
        Cosh => "chlo.cosh",
        Asinh => "chlo.asinh",
        Acosh => "chlo.acosh",
        Atanh => "chlo.atanh",
        Cbrt => "stablehlo.cbrt",
        IsFinite => "stablehlo.is_finite",
        Atan2 => "stablehlo.atan2",
        ShiftLeft => "stablehlo.shift_left",
        ShiftRightLogical => "stablehlo.shift_right_logical",
        ShiftRightArithmetic => "stablehlo.shift_right_arithmetic",
        BitcastConvertType => "stablehlo.bitcast_convert",
        PopulationCount => "stablehlo.popcnt",
        Square => {
            return Ok(vec![ctx.op1(
                "stablehlo.multiply",
                &[args[0], args[0]],
                out,
                &[],
            )?]);
        }
    };
    Ok(vec![ctx.op1(name, &args, out, &[])?])
}
