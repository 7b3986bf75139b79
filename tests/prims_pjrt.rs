//! Differential test of the primitives the JAX oracle does not exercise: each small program runs
//! on the reference interpreter and, lowered to StableHLO, on PJRT; the results must agree.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, DType};

fn arg(dtype: DType, shape: &[i64], values: &[f64]) -> Array {
    Array::new(dtype, shape, values.to_vec()).unwrap()
}

const CASES: &[(&str, &str)] = &[
    (
        "pow rem exp2",
        "{ lambda ; a:f32[4] b:f32[4]. let c:f32[4] = pow a b\n d:f32[4] = rem a b\n e:f32[4] = exp2 d\n f:f32[4] = add c e\n in (f,) }",
    ),
    (
        "floor ceil round",
        "{ lambda ; a:f32[4]. let b:f32[4] = floor a\n c:f32[4] = ceil a\n d:f32[4] = round[rounding_method=0] a\n e:f32[4] = add b c\n f:f32[4] = add e d\n in (f,) }",
    ),
    (
        "logic on bools",
        "{ lambda ; p:bool[4] q:bool[4]. let a:bool[4] = and p q\n b:bool[4] = or p q\n c:bool[4] = xor a b\n d:bool[4] = not c\n in (d,) }",
    ),
    (
        "integer ops",
        "{ lambda ; a:i32[4] b:i32[4]. let c:i32[4] = div a b\n d:i32[4] = rem a b\n e:i32[4] = and a b\n f:i32[4] = add c d\n g:i32[4] = add f e\n in (g,) }",
    ),
    (
        "comparisons",
        "{ lambda ; a:f32[4] b:f32[4]. let c:bool[4] = ne a b\n d:bool[4] = le a b\n e:bool[4] = gt a b\n f:bool[4] = and c d\n g:bool[4] = or f e\n in (g,) }",
    ),
    (
        "clamp",
        "{ lambda ; a:f32[4]. let b:f32[4] = clamp -0.5:f32[] a 0.5:f32[]\n in (b,) }",
    ),
    (
        "squeeze expand_dims",
        "{ lambda ; a:f32[1,4]. let b:f32[4] = squeeze[dimensions=(0,)] a\n c:f32[4,1] = expand_dims[dimensions=(1,)] b\n in (c,) }",
    ),
    (
        "reduce and or prod",
        "{ lambda ; p:bool[2,2] a:f32[2,2]. let b:bool[2] = reduce_and[axes=(1,)] p\n c:bool[2] = reduce_or[axes=(0,)] p\n d:f32[2] = reduce_prod[axes=(1,)] a\n e:f32[] = reduce_min[axes=(0, 1)] a\n in (b, c, d, e) }",
    ),
    (
        "argmin cumsum",
        "{ lambda ; a:f32[2,3]. let b:i32[2] = argmin[axes=(1,) index_dtype=int32] a\n c:f32[2,3] = cumsum[axis=1 reverse=False] a\n d:f32[2,3] = cumsum[axis=0 reverse=True] a\n in (b, c, d) }",
    ),
    (
        "select_n with an int32 index",
        "{ lambda ; i:i32[4] a:f32[4] b:f32[4] c:f32[4]. let d:f32[4] = select_n i a b c\n in (d,) }",
    ),
    (
        "integer_pow negative",
        "{ lambda ; a:f32[4]. let b:f32[4] = integer_pow[y=-3] a\n c:f32[4] = integer_pow[y=5] a\n d:f32[4] = add b c\n in (d,) }",
    ),
    (
        "convert to bool and back",
        "{ lambda ; a:f32[4]. let b:bool[4] = convert_element_type[new_dtype=bool weak_type=False] a\n c:i32[4] = convert_element_type[new_dtype=int32 weak_type=False] b\n d:i32[4] = convert_element_type[new_dtype=int32 weak_type=False] a\n e:i32[4] = add c d\n in (e,) }",
    ),
    (
        "f64 and u8",
        "{ lambda ; a:f64[3] b:u8[3]. let c:f64[3] = convert_element_type[new_dtype=float64 weak_type=False] b\n d:f64[3] = mul a c\n e:u8[3] = add b 200:u8[]\n in (d, e) }",
    ),
];

fn inputs(name: &str) -> Vec<Array> {
    let f = |v: &[f64]| arg(DType::F32, &[4], v);
    match name {
        "pow rem exp2" => vec![f(&[2.0, 3.0, 5.5, 0.5]), f(&[2.0, 0.5, 2.0, 3.0])],
        "floor ceil round" | "clamp" | "integer_pow negative" | "convert to bool and back" => {
            vec![f(&[-1.5, -0.25, 0.0, 2.5])]
        }
        "logic on bools" => vec![
            arg(DType::Bool, &[4], &[1.0, 1.0, 0.0, 0.0]),
            arg(DType::Bool, &[4], &[1.0, 0.0, 1.0, 0.0]),
        ],
        "integer ops" => vec![
            arg(DType::I32, &[4], &[7.0, -7.0, 9.0, 12.0]),
            arg(DType::I32, &[4], &[2.0, 2.0, -4.0, 5.0]),
        ],
        "comparisons" => vec![f(&[1.0, 2.0, 3.0, 4.0]), f(&[2.0, 2.0, 2.0, 5.0])],
        "squeeze expand_dims" => vec![arg(DType::F32, &[1, 4], &[1.0, 2.0, 3.0, 4.0])],
        "reduce and or prod" => vec![
            arg(DType::Bool, &[2, 2], &[1.0, 0.0, 1.0, 1.0]),
            arg(DType::F32, &[2, 2], &[1.5, -2.0, 3.0, 0.5]),
        ],
        "argmin cumsum" => vec![arg(DType::F32, &[2, 3], &[3.0, 1.0, 1.0, -2.0, 5.0, -2.0])],
        "select_n with an int32 index" => vec![
            arg(DType::I32, &[4], &[0.0, 1.0, 2.0, 1.0]),
            f(&[1.0; 4]),
            f(&[2.0; 4]),
            f(&[3.0; 4]),
        ],
        "f64 and u8" => vec![
            arg(DType::F64, &[3], &[0.1, 0.2, 0.3]),
            arg(DType::U8, &[3], &[1.0, 100.0, 250.0]),
        ],
        other => panic!("no inputs for {other}"),
    }
}

#[test]
fn interpreter_and_pjrt_agree_on_every_primitive() {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    for &(name, text) in CASES {
        let program = parse_closed(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        tessera_ir::verify(&program).unwrap_or_else(|e| panic!("{name}: {e}"));
        let args = inputs(name);
        let want = eval_closed(&program, &args).unwrap();
        let got = tessera::jit::run_on_device(&client, &program, &args, 0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.shape(), w.shape(), "{name}");
            for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
                assert!(
                    *a == b || (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{name}: PJRT {:?} vs interpreter {:?}",
                    g.to_vec(),
                    w.to_vec()
                );
            }
        }
    }
}
