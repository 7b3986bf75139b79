//! The reference interpreter on primitives and dtypes the oracle file does not cover.

use expect_test::{Expect, expect};
use tessera_ir::DType;
use tessera_ir::interp::{Array, eval_closed};
use tessera_ir::text::parse_closed_jaxpr;
use tessera_ir::verify::verify_closed;

/// Parses `body` (one jaxpr), verifies it, evaluates it on `args` and snapshots every output as
/// `dtype[shape] values`.
fn check(text: &str, args: &[Array], expect: Expect) {
    let cj = parse_closed_jaxpr(text).expect("parses");
    verify_closed(&cj).expect("verifies");
    let outs = eval_closed(&cj, args).expect("evaluates");
    let lines: Vec<String> = outs
        .iter()
        .map(|a| format!("{} {:?}", a.aval(), a.to_f64_vec()))
        .collect();
    expect.assert_eq(&lines.join("\n"));
}

fn arr(dtype: DType, shape: &[usize], data: &[f64]) -> Array {
    Array::from_f64(dtype, shape, data).expect("fits")
}

#[test]
fn integer_arithmetic_wraps_and_divides_like_xla() {
    let text = "{ lambda ; a:i32[4] b:i32[4] c:u8[2]. let
    d:i32[4] = div a b
    e:i32[4] = rem a b
    f:u8[2] = add c c
    g:i32[4] = sign a
    h:i32[4] = integer_pow[y=3] a
    i:i32[4] = max a b
  in (d, e, f, g, h, i) }";
    let a = arr(DType::I32, &[4], &[7.0, -7.0, 5.0, 3.0]);
    let b = arr(DType::I32, &[4], &[2.0, 2.0, 0.0, -3.0]);
    let c = arr(DType::U8, &[2], &[200.0, 3.0]);
    check(
        text,
        &[a, b, c],
        expect![[r#"
        i32[4] [3.0, -3.0, -1.0, -1.0]
        i32[4] [1.0, -1.0, 5.0, 0.0]
        u8[2] [144.0, 6.0]
        i32[4] [1.0, -1.0, 1.0, 1.0]
        i32[4] [343.0, -343.0, 125.0, 27.0]
        i32[4] [7.0, 2.0, 5.0, 3.0]"#]],
    );
}

#[test]
fn low_precision_floats_round_on_every_operation() {
    let text = "{ lambda ; a:bf16[3] b:f16[3] c:f64[3]. let
    d:bf16[3] = add a 0.001:bf16[]
    e:f16[3] = mul b 3.0:f16[]
    f:f64[3] = exp2 c
    g:f64[3] = round[rounding_method=0] c
    i:f64[3] = round[rounding_method=1] c
    h:bool[3] = convert_element_type[new_dtype=bool weak_type=False] c
  in (d, e, f, g, h, i) }";
    let v = [1.0, 0.1, -2.5];
    check(
        text,
        &[
            arr(DType::BF16, &[3], &v),
            arr(DType::F16, &[3], &v),
            arr(DType::F64, &[3], &v),
        ],
        expect![[r#"
            bf16[3] [1.0, 0.10107421875, -2.5]
            f16[3] [3.0, 0.2998046875, -7.5]
            f64[3] [2.0, 1.0717734625362931, 0.1767766952966369]
            f64[3] [1.0, 0.0, -3.0]
            bool[3] [1.0, 1.0, 1.0]
            f64[3] [1.0, 0.0, -2.0]"#]],
    );
}

#[test]
fn structural_primitives() {
    let text = "{ lambda ; a:f32[2,3]. let
    b:f32[2,3] = cumsum[axis=1 reverse=False] a
    c:f32[2,3] = cumsum[axis=1 reverse=True] a
    d:i32[2] = argmin[axes=(1,) index_dtype=int32] a
    e:f32[4,3] = concatenate[dimension=0] a a
    f:f32[1,2,3] = expand_dims[dimensions=(0,)] a
    g:f32[2,3] = squeeze[dimensions=(0,)] f
    h:f32[3,2] = transpose[permutation=(1, 0)] g
    i:f32[2,3] = clamp 1.0:f32[] a 4.0:f32[]
    j:f32[2,3] = pipeline_enter_stage[stage=1] i
    k:f32[2,3] = add_any j a
    l:f32[2,3] = copy k
  in (b, c, d, e, h, l) }";
    check(
        text,
        &[arr(DType::F32, &[2, 3], &[0.0, 1.0, 2.0, 5.0, 4.0, 3.0])],
        expect![[r#"
        f32[2,3] [0.0, 1.0, 3.0, 5.0, 9.0, 12.0]
        f32[2,3] [3.0, 3.0, 2.0, 12.0, 7.0, 3.0]
        i32[2] [0.0, 2.0]
        f32[4,3] [0.0, 1.0, 2.0, 5.0, 4.0, 3.0, 0.0, 1.0, 2.0, 5.0, 4.0, 3.0]
        f32[3,2] [0.0, 5.0, 1.0, 4.0, 2.0, 3.0]
        f32[2,3] [1.0, 2.0, 4.0, 9.0, 8.0, 6.0]"#]],
    );
}

#[test]
fn padding_slicing_and_boolean_reductions() {
    let text = "{ lambda ; a:f32[3] b:bool[2,2] c:i32[]. let
    d:f32[5] = pad[padding_config=((np.int64(-1), np.int64(1), 1),)] a 9.0:f32[]
    e:f32[2] = dynamic_slice[slice_sizes=(2,)] a c
    f:f32[3] = dynamic_update_slice a e c
    g:bool[2] = reduce_and[axes=(1,)] b
    h:bool[2] = reduce_or[axes=(1,)] b
    i:f32[2] = slice[limit_indices=(3,) start_indices=(0,) strides=(2,)] a
  in (d, e, f, g, h, i) }";
    let a = arr(DType::F32, &[3], &[1.0, 2.0, 3.0]);
    let b = arr(DType::Bool, &[2, 2], &[1.0, 1.0, 0.0, 1.0]);
    check(
        text,
        &[a, b, arr(DType::I32, &[], &[5.0])],
        expect![[r#"
        f32[5] [9.0, 2.0, 9.0, 3.0, 9.0]
        f32[2] [2.0, 3.0]
        f32[3] [1.0, 2.0, 3.0]
        bool[2] [1.0, 0.0]
        bool[2] [1.0, 1.0]
        f32[2] [1.0, 3.0]"#]],
    );
}
