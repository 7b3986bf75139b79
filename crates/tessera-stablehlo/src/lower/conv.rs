//! `conv_general_dilated` as `stablehlo.convolution`: JAX's dimension numbers become the
//! `#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>` layout, the rest attributes.

use melior::ir::Value;
use tessera_ir::Params;
use tessera_ir::prim::ConvParams;

use super::{Ctx, i64_array, ir};
use crate::context::LowerError;

/// One operand's layout: the letters of its two named dimensions, then spatial numbers.
fn layout(spec: &[usize], first: &str, second: &str) -> String {
    let mut names = vec![String::new(); spec.len()];
    names[spec[0]] = first.into();
    names[spec[1]] = second.into();
    for (s, &d) in spec[2..].iter().enumerate() {
        names[d] = s.to_string();
    }
    format!("[{}]", names.join(", "))
}

pub(super) fn conv<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let c = ConvParams::read(params, ctx.in_avals[0].rank()).map_err(ir)?;
    let numbers = format!(
        "#stablehlo.conv<{}x{}->{}>",
        layout(&c.lhs_spec, "b", "f"),
        layout(&c.rhs_spec, "o", "i"),
        layout(&c.out_spec, "b", "f")
    );
    let pads: Vec<String> = c
        .padding
        .iter()
        .map(|(lo, hi)| format!("[{lo}, {hi}]"))
        .collect();
    let padding = if pads.is_empty() {
        "dense<> : tensor<0x2xi64>".to_owned()
    } else {
        format!(
            "dense<[{}]> : tensor<{}x2xi64>",
            pads.join(", "),
            pads.len()
        )
    };
    let attrs = [
        ("window_strides", i64_array(&c.window_strides)),
        ("padding", padding),
        ("lhs_dilation", i64_array(&c.lhs_dilation)),
        ("rhs_dilation", i64_array(&c.rhs_dilation)),
        ("dimension_numbers", numbers),
        (
            "feature_group_count",
            format!("{} : i64", c.feature_group_count),
        ),
        (
            "batch_group_count",
            format!("{} : i64", c.batch_group_count),
        ),
    ];
    Ok(vec![ctx.op1(
        "stablehlo.convolution",
        inputs,
        &ctx.out_avals[0],
        &attrs,
    )?])
}
