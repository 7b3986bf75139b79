//! The interpreter computes what XLA computes: 32-bit integer arithmetic wraps (products
//! exactly, even past 2^53), integer division by zero gives -1 (all bits set for unsigned
//! types) and the remainder the dividend, a bf16 sum accumulates in f32 (1000 ones sum to
//! 1000, not 256), and `i64`/`u64` values are exact over their whole range. Each program runs
//! on the interpreter and on PJRT; both must give the values worked out by hand.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, ClosedJaxpr, DType};
use tessera_tests::named_real_cases;

/// Runs on both backends and checks both against `want`, output by output, read with `read`.
fn check_read<T: PartialEq + std::fmt::Debug>(
    program: &ClosedJaxpr,
    inputs: &[Array],
    want: &[Vec<T>],
    read: fn(&Array) -> Vec<T>,
) {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let here = eval_closed(program, inputs).unwrap();
    let there = tessera::jit::run_on_device(&client, program, inputs, 0).unwrap();
    for (k, w) in want.iter().enumerate() {
        assert_eq!(read(&here[k]), *w, "interpreter, output {k}");
        assert_eq!(read(&there[k]), *w, "PJRT, output {k}");
    }
}

/// [`check_read`] of the values as `f64`.
fn check(program: &ClosedJaxpr, inputs: &[Array], want: &[&[f64]]) {
    let want: Vec<Vec<f64>> = want.iter().map(|w| w.to_vec()).collect();
    check_read(program, inputs, &want, Array::to_vec);
}

/// [`check_read`] of the values as exact integers.
fn check_ints(program: &ClosedJaxpr, inputs: &[Array], want: &[Vec<i128>]) {
    check_read(program, inputs, want, Array::to_int_vec);
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

/// `f` of each pair of `a` and `b`, as exact integers (Rust's own wrapping arithmetic).
fn pairwise<T: Copy + Into<i128>>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> Vec<i128> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y).into()).collect()
}

#[test]
fn int64_values_past_2_53_are_exact_and_wrap_as_xla() {
    let program = parse_closed(
        "{ lambda ; a:i64[3] b:i64[3]. let c:i64[3] = add a b\n d:i64[3] = mul a b\n e:i64[3] = div a b\n f:i64[] = reduce_sum[axes=(0,) out_sharding=None] a\n g:i64[3] = max a b\n h:u64[3] = convert_element_type[new_dtype=uint64 weak_type=False sharding=None] a in (c, d, e, f, g, h) }",
    )
    .unwrap();
    let big = (1_i64 << 53) + 1; // the first integer an f64 cannot hold
    let a = [big, i64::MAX, -big - 2];
    let b = [1, 3, 7];
    let ints = |v: &[i64]| v.iter().map(|&x| i128::from(x)).collect::<Vec<_>>();
    let inputs = [
        Array::from_int_vec(DType::I64, &[3], ints(&a)).unwrap(),
        Array::from_int_vec(DType::I64, &[3], ints(&b)).unwrap(),
    ];
    let sum = a.iter().fold(0_i64, |s, &x| s.wrapping_add(x));
    check_ints(
        &program,
        &inputs,
        &[
            pairwise(&a, &b, i64::wrapping_add),
            pairwise(&a, &b, i64::wrapping_mul),
            pairwise(&a, &b, |x, y| x / y),
            vec![i128::from(sum)],
            pairwise(&a, &b, i64::max),
            a.iter().map(|&x| i128::from(x as u64)).collect(),
        ],
    );
}

#[test]
fn uint64_values_near_the_top_are_exact() {
    let program = parse_closed(
        "{ lambda ; a:u64[2] b:u64[2]. let c:u64[2] = add a b\n d:u64[2] = sub a b in (c, d) }",
    )
    .unwrap();
    let a = [u64::MAX - 2, (1 << 60) + 3];
    let b = [5, 1 << 62];
    let ints = |v: &[u64]| v.iter().map(|&x| i128::from(x)).collect::<Vec<_>>();
    let inputs = [
        Array::from_int_vec(DType::U64, &[2], ints(&a)).unwrap(),
        Array::from_int_vec(DType::U64, &[2], ints(&b)).unwrap(),
    ];
    check_ints(
        &program,
        &inputs,
        &[
            pairwise(&a, &b, u64::wrapping_add),
            pairwise(&a, &b, u64::wrapping_sub),
        ],
    );
}

#[test]
fn int64_literals_and_constants_past_2_53_keep_every_digit() {
    let text = "{ lambda ; a:i64[]. let b:i64[] = add a 9007199254740993:i64[] in (b,) }";
    let program = parse_closed(text).unwrap();
    assert!(
        tessera_ir::text::print_closed(&program, 0).contains("9007199254740993:i64[]"),
        "the literal prints back with every digit"
    );
    let one = Array::from_int_vec(DType::I64, &[], vec![1]).unwrap();
    check_ints(&program, &[one], &[vec![9007199254740994]]);
    // A closed-over constant array is lowered exactly too.
    let c =
        Array::from_int_vec(DType::U64, &[2], vec![(1 << 60) + 1, i128::from(u64::MAX)]).unwrap();
    let program = tessera_ir::text::parse_closed_with_consts(
        "{ lambda c:u64[2]; a:u64[2]. let b:u64[2] = add a c in (b,) }",
        std::slice::from_ref(&c),
    )
    .unwrap();
    let a = Array::from_int_vec(DType::U64, &[2], vec![2, 2]).unwrap();
    check_ints(&program, &[a], &[vec![(1 << 60) + 3, 1]]);
}

#[test]
fn integer_window_reductions_use_each_dtype_s_identity_and_stay_exact() {
    // Padding reads the identity: the dtype's largest value for min, its smallest for max.
    let window = "base_dilation=(1,) padding=((1, 1),) window_dilation=(1,) window_dimensions=(2,) window_strides=(1,)";
    let program = parse_closed(&format!(
        "{{ lambda ; a:i32[3] b:u32[3] c:i64[3]. let d:i32[4] = reduce_window_min[{window}] a\n e:u32[4] = reduce_window_min[{window}] b\n f:i32[4] = reduce_window_max[{window}] a\n g:i64[4] = reduce_window_sum[{window}] c in (d, e, f, g) }}"
    ))
    .unwrap();
    let big = (1_i128 << 53) + 1;
    let inputs = [
        Array::from_int_vec(DType::I32, &[3], vec![5, -7, 3]).unwrap(),
        Array::from_int_vec(DType::U32, &[3], vec![9, 4, 4000000000]).unwrap(),
        Array::from_int_vec(DType::I64, &[3], vec![big, 1, -big]).unwrap(),
    ];
    check_ints(
        &program,
        &inputs,
        &[
            vec![5, -7, -7, 3],
            vec![9, 4, 4, 4000000000],
            vec![5, 5, 3, 3],
            vec![big, big + 1, 1 - big, -big],
        ],
    );
}

#[test]
fn integer_identities_powers_argmax_and_huge_indices_match_xla() {
    let program = parse_closed(
        "{ lambda ; a:i64[0] b:u8[0] c:i32[2] d:i64[3] e:f32[4] i:u64[]. let f:i64[] = reduce_max[axes=(0,) out_sharding=None] a\n g:u8[] = reduce_min[axes=(0,) out_sharding=None] b\n h:i32[2] = integer_pow[y=201] c\n j:i32[] = argmax[axes=(0,) index_dtype=int32] d\n k:f32[2] = dynamic_slice[slice_sizes=(2,)] e i\n l:i32[2] = convert_element_type[new_dtype=int32 weak_type=False sharding=None] k in (f, g, h, j, l) }",
    )
    .unwrap();
    let big = 1_i128 << 60;
    let inputs = [
        Array::from_int_vec(DType::I64, &[0], vec![]).unwrap(),
        Array::from_int_vec(DType::U8, &[0], vec![]).unwrap(),
        Array::from_int_vec(DType::I32, &[2], vec![3, -1]).unwrap(),
        // Two values one apart past 2^53: only an exact comparison finds the larger.
        Array::from_int_vec(DType::I64, &[3], vec![big, big + 1, big - 1]).unwrap(),
        Array::new(DType::F32, &[4], vec![10.0, 11.0, 12.0, 13.0]).unwrap(),
        // A start past i64::MAX clamps to the last window, not the first.
        Array::from_int_vec(DType::U64, &[], vec![i128::from(u64::MAX)]).unwrap(),
    ];
    let pow = |x: i32| (0..201).fold(1_i32, |acc, _| acc.wrapping_mul(x));
    check_ints(
        &program,
        &inputs,
        &[
            vec![i128::from(i64::MIN)],
            vec![255],
            vec![i128::from(pow(3)), -1],
            vec![1],
            vec![12, 13],
        ],
    );
}

#[test]
fn integer_convolutions_and_select_and_scatter_add_are_exact() {
    let program = parse_closed(
        "{ lambda ; a:i64[1,1,3] b:i64[1,1,2] s:i32[2] x:i32[4]. let c:i64[1,1,2] = conv_general_dilated[batch_group_count=1 dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 1, 2), rhs_spec=(0, 1, 2), out_spec=(0, 1, 2)) feature_group_count=1 lhs_dilation=(1,) padding=((0, 0),) precision=None preferred_element_type=None rhs_dilation=(1,) window_strides=(1,)] a b\n d:i32[4] = select_and_scatter_add[padding=((0, 0),) select_prim=ge window_dimensions=(2,) window_strides=(2,)] s x in (c, d) }",
    )
    .unwrap();
    let (l, r) = (
        [(1_i128 << 40) + 1, (1 << 40) + 3, 5],
        [(1_i128 << 13) + 1, 7],
    );
    let inputs = [
        Array::from_int_vec(DType::I64, &[1, 1, 3], l.to_vec()).unwrap(),
        Array::from_int_vec(DType::I64, &[1, 1, 2], r.to_vec()).unwrap(),
        Array::from_int_vec(DType::I32, &[2], vec![2147483647, 5]).unwrap(),
        Array::from_int_vec(DType::I32, &[4], vec![3, 9, 8, 8]).unwrap(),
    ];
    // Each output is a sum of products past 2^53; the ties of select (8, 8) keep the first.
    let conv = |j: usize| l[j] * r[0] + l[j + 1] * r[1];
    check_ints(
        &program,
        &inputs,
        &[vec![conv(0), conv(1)], vec![0, 2147483647, 5, 0]],
    );
}
