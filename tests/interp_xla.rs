//! The interpreter computes what XLA computes: 32-bit integer arithmetic wraps (products
//! exactly, even past 2^53), integer division by zero gives -1 (all bits set for unsigned
//! types) and the remainder the dividend, and a bf16 sum accumulates in f32 (1000 ones sum to
//! 1000, not 256). Each program runs on the interpreter and on PJRT; both must give the values
//! worked out by hand.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, ClosedJaxpr, DType};
use tessera_tests::named_real_cases;

/// Runs on both backends and checks both against `want`, output by output.
fn check(program: &ClosedJaxpr, inputs: &[Array], want: &[&[f64]]) {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let here = eval_closed(program, inputs).unwrap();
    let there = tessera::jit::run_on_device(&client, program, inputs, 0).unwrap();
    for (k, w) in want.iter().enumerate() {
        assert_eq!(here[k].to_vec(), *w, "interpreter, output {k}");
        assert_eq!(there[k].to_vec(), *w, "PJRT, output {k}");
    }
}

const I32_OPS: &str = "{ lambda ; a:i32[7] b:i32[7]. let
    c:i32[7] = mul a b
    d:i32[7] = div a b
    e:i32[7] = rem a b
    f:i32[7] = add a b
    g:i32[7] = sub a b
  in (c, d, e, f, g) }";

#[test]
fn int32_arithmetic_wraps_and_divides_by_zero_as_xla() {
    let a = [
        2e9,
        -7.0,
        7.0,
        123456789.0,
        -2147483648.0,
        46341.0,
        123456789.0,
    ];
    let b = [3.0, 0.0, -2.0, 0.0, -1.0, 46341.0, 987654321.0];
    let inputs = [
        Array::new(DType::I32, &[7], a.to_vec()).unwrap(),
        Array::new(DType::I32, &[7], b.to_vec()).unwrap(),
    ];
    let program = parse_closed(I32_OPS).unwrap();
    check(
        &program,
        &inputs,
        &[
            // 123456789 * 987654321 = 121932631112635269 (past 2^53) wraps to -67153019.
            &[
                1705032704.0,
                0.0,
                -14.0,
                0.0,
                -2147483648.0,
                -2147479015.0,
                -67153019.0,
            ],
            &[666666666.0, -1.0, -3.0, -1.0, -2147483648.0, 1.0, 0.0],
            &[2.0, -7.0, 1.0, 123456789.0, 0.0, 0.0, 123456789.0],
            &[
                2000000003.0,
                -7.0,
                5.0,
                123456789.0,
                2147483647.0,
                92682.0,
                1111111110.0,
            ],
            &[
                1999999997.0,
                -7.0,
                9.0,
                123456789.0,
                -2147483647.0,
                0.0,
                -864197532.0,
            ],
        ],
    );
}

#[test]
fn uint32_division_by_zero_sets_every_bit_and_subtraction_wraps() {
    let program = parse_closed(
        "{ lambda ; a:u32[3] b:u32[3]. let c:u32[3] = div a b\n d:u32[3] = rem a b\n e:u32[3] = sub b a\n f:u32[3] = mul a a in (c, d, e, f) }",
    )
    .unwrap();
    let inputs = [
        Array::new(DType::U32, &[3], vec![7.0, 4294967295.0, 100000.0]).unwrap(),
        Array::new(DType::U32, &[3], vec![0.0, 2.0, 3.0]).unwrap(),
    ];
    check(
        &program,
        &inputs,
        &[
            &[4294967295.0, 2147483647.0, 33333.0],
            &[7.0, 1.0, 1.0],
            &[4294967289.0, 3.0, 4294867299.0],
            // 100000^2 = 10^10 wraps to 1410065408; (2^32 - 1)^2 wraps to 1.
            &[49.0, 1.0, 1410065408.0],
        ],
    );
}

#[test]
fn a_bf16_sum_of_1000_ones_is_1000() {
    let program = parse_closed(
        "{ lambda ; a:bf16[1000]. let b:bf16[] = reduce_sum[axes=(0,) out_sharding=None] a in (b,) }",
    )
    .unwrap();
    let ones = Array::new(DType::BF16, &[1000], vec![1.0; 1000]).unwrap();
    check(&program, &[ones], &[&[1000.0]]);
    // JAX's own bf16 case (a sum of 1000 ones through bf16), values and gradients.
    assert_eq!(named_real_cases(&["bf16_sum_0", "bf16_sum_1"]), 4);
}
