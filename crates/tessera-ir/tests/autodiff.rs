//! `value_and_grad` of a 3-layer MLP: the backward program is printed as a snapshot, is free of
//! dead code, verifies, and matches central finite differences.

#![allow(clippy::unwrap_used, missing_docs)]

use expect_test::expect;
use tessera_ir::autodiff::{value_and_grad, value_and_grad_with_aux};
use tessera_ir::interp::eval_closed;
use tessera_ir::passes::eliminate_dead_code;
use tessera_ir::text::print_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, DType, ShapedArray};

fn mlp_loss() -> tessera_ir::ClosedJaxpr {
    let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
    trace(&[f(&[2, 3]), f(&[3, 4]), f(&[4, 4]), f(&[4, 2])], |a| {
        let h1 = a[0].matmul(&a[1]).tanh();
        let h2 = h1.matmul(&a[2]).relu();
        let out = h2.matmul(&a[3]);
        vec![out.integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

#[test]
fn mlp_backward_is_printed_free_of_dead_code_and_correct() {
    let program = value_and_grad(&mlp_loss(), &[1, 2, 3]).unwrap();
    tessera_ir::verify(&program).unwrap();
    assert_eq!(
        eliminate_dead_code(&program),
        program,
        "value_and_grad leaves no dead code"
    );
    expect![[r#"
        { lambda ; a:f32[2,3] b:f32[3,4] c:f32[4,4] d:f32[4,2]. let
            e:f32[2,4] = dot_general[
              dimension_numbers=(([1], [0]), ([], []))
              preferred_element_type=float32
            ] a b
            f:f32[2,4] = tanh e
            g:f32[2,4] = dot_general[
              dimension_numbers=(([1], [0]), ([], []))
              preferred_element_type=float32
            ] f c
            h:f32[2,4] = max g 0.0:f32[]
            i:f32[2,2] = dot_general[
              dimension_numbers=(([1], [0]), ([], []))
              preferred_element_type=float32
            ] h d
            j:f32[2,2] = integer_pow[y=2] i
            k:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] j
            l:f32[] = div k 4.0:f32[]
            m:f32[] = div 1.0:f32[] 4.0:f32[]
            n:f32[1,1] = broadcast_in_dim m
            o:f32[2,2] = broadcast_in_dim[broadcast_dimensions=(0, 1)] n
            p:f32[2,2] = integer_pow[y=1] i
            q:f32[2,2] = mul p 2.0:f32[]
            r:f32[2,2] = mul o q
            s:f32[2,4] = dot_general[
              dimension_numbers=(([1], [1]), ([], []))
              preferred_element_type=float32
            ] r d
            t:f32[2,4] = dot_general[
              dimension_numbers=(([0], [0]), ([], []))
              preferred_element_type=float32
            ] r h
            u:f32[4,2] = transpose[permutation=(1, 0)] t
            v:bool[2,4] = eq g h
            w:f32[2,4] = convert_element_type[new_dtype=float32 weak_type=False] v
            x:bool[2,4] = eq 0.0:f32[] h
            y:f32[2,4] = convert_element_type[new_dtype=float32 weak_type=False] x
            z:f32[2,4] = mul y 0.5:f32[]
            ba:f32[2,4] = sub 1.0:f32[] z
            bb:f32[2,4] = mul w ba
            bc:f32[2,4] = mul s bb
            bd:f32[2,4] = dot_general[
              dimension_numbers=(([1], [1]), ([], []))
              preferred_element_type=float32
            ] bc c
            be:f32[4,4] = dot_general[
              dimension_numbers=(([0], [0]), ([], []))
              preferred_element_type=float32
            ] bc f
            bf:f32[4,4] = transpose[permutation=(1, 0)] be
            bg:f32[2,4] = sub 1.0:f32[] f
            bh:f32[2,4] = mul bd bg
            bi:f32[2,4] = mul bh f
            bj:f32[2,4] = add bh bi
            bk:f32[4,3] = dot_general[
              dimension_numbers=(([0], [0]), ([], []))
              preferred_element_type=float32
            ] bj a
            bl:f32[3,4] = transpose[permutation=(1, 0)] bk
          in (l, bl, bf, u) }"#]]
    .assert_eq(&print_closed(&program, 0));
    let args: Vec<Array> = [vec![2, 3], vec![3, 4], vec![4, 4], vec![4, 2]]
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: i64 = s.iter().product();
            Array::new(
                DType::F32,
                s,
                (0..n)
                    .map(|i| ((i as f64 + 1.0) * (k as f64 + 0.7)).sin() * 0.8)
                    .collect(),
            )
            .unwrap()
        })
        .collect();
    let out = eval_closed(&program, &args).unwrap();
    let loss = mlp_loss();
    let f = |args: &[Array]| eval_closed(&loss, args).unwrap()[0].to_vec()[0];
    assert!((out[0].to_vec()[0] - f(&args)).abs() < 1e-6);
    // Finite differences in f64 on a few coordinates of each weight.
    let promote = |a: &Array| Array::new(DType::F64, &a.shape(), a.to_vec()).unwrap();
    let loss64 = tessera_ir::text::parse_closed(
        &print_closed(&loss, 0)
            .replace("f32", "f64")
            .replace("float32", "float64"),
    )
    .unwrap();
    let f64_args: Vec<Array> = args.iter().map(promote).collect();
    for (grad_index, arg_index) in [(1, 1), (2, 2), (3, 3)] {
        for coord in [0usize, 3, 5] {
            let eps = 1e-6;
            let bump = |delta: f64| {
                let mut a = f64_args.clone();
                let mut v = a[arg_index].to_vec();
                v[coord] += delta;
                a[arg_index] = Array::new(DType::F64, &a[arg_index].shape(), v).unwrap();
                eval_closed(&loss64, &a).unwrap()[0].to_vec()[0]
            };
            let numeric = (bump(eps) - bump(-eps)) / (2.0 * eps);
            let analytic = out[grad_index].to_vec()[coord];
            assert!(
                (numeric - analytic).abs() <= 1e-4 * numeric.abs().max(1e-2),
                "arg {arg_index}[{coord}]: {analytic} vs finite difference {numeric}"
            );
        }
    }
}

#[test]
fn value_and_grad_needs_a_scalar_loss() {
    let program = trace(&[ShapedArray::new(DType::F32, &[3])], |a| vec![a[0].tanh()]).unwrap();
    let err = value_and_grad(&program, &[0]).unwrap_err();
    assert!(err.to_string().contains("one scalar float result"), "{err}");
}

#[test]
fn value_and_grad_with_aux_returns_the_aux_results_undifferentiated() {
    let f = |s: &[i64]| ShapedArray::new(DType::F64, s);
    let program = trace(&[f(&[3]), f(&[3])], |a| {
        let prod = &a[0] * &a[1];
        let loss = prod.sum(&[0]);
        vec![loss, prod.tanh(), a[0].ge(&a[1])]
    });
    let program = program.unwrap();
    let both = value_and_grad_with_aux(&program, &[0, 1]).unwrap();
    tessera_ir::verify(&both).unwrap();
    let x = Array::new(DType::F64, &[3], vec![0.5, -1.0, 2.0]).unwrap();
    let y = Array::new(DType::F64, &[3], vec![1.5, 0.25, -3.0]).unwrap();
    let out = eval_closed(&both, &[x.clone(), y.clone()]).unwrap();
    assert_eq!(out.len(), 5);
    assert_eq!(out[0].to_vec(), vec![0.75 - 0.25 - 6.0]);
    assert_eq!(
        out[1].to_vec(),
        vec![0.75f64.tanh(), (-0.25f64).tanh(), (-6.0f64).tanh()]
    );
    assert_eq!(out[2].to_vec(), vec![0.0, 0.0, 1.0]);
    assert_eq!(
        out[3].to_vec(),
        y.to_vec(),
        "d loss / dx = y: the aux results add nothing"
    );
    assert_eq!(out[4].to_vec(), x.to_vec());
    let err = value_and_grad(&program, &[0]).unwrap_err();
    assert!(err.to_string().contains("one scalar float result"), "{err}");
}

/// `tanh(x @ w1) @ w2` summed, with the hidden layer optionally in a `checkpoint` region.
fn two_layer(remat: bool) -> tessera_ir::ClosedJaxpr {
    let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
    trace(&[f(&[2, 3]), f(&[3, 4]), f(&[4, 2])], |a| {
        let hidden = |b: &[tessera_ir::trace::Tensor]| vec![b[0].matmul(&b[1]).tanh()];
        let h = if remat {
            tessera_ir::trace::checkpoint(&[&a[0], &a[1]], hidden).remove(0)
        } else {
            hidden(&a[..2]).remove(0)
        };
        vec![h.matmul(&a[2]).sum(&[0, 1])]
    })
    .unwrap()
}

#[test]
fn checkpoint_recomputes_its_forward_in_the_backward_pass_with_the_same_gradients() {
    let plain = value_and_grad(&two_layer(false), &[1, 2]).unwrap();
    let remat = value_and_grad(&two_layer(true), &[1, 2]).unwrap();
    tessera_ir::verify(&remat).unwrap();
    let args: Vec<Array> = [vec![2, 3], vec![3, 4], vec![4, 2]]
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: i64 = s.iter().product();
            Array::new(
                DType::F32,
                s,
                (0..n)
                    .map(|i| ((i + k as i64) as f64 * 0.3).sin())
                    .collect(),
            )
            .unwrap()
        })
        .collect();
    let want = eval_closed(&plain, &args).unwrap();
    let got = eval_closed(&remat, &args).unwrap();
    for (g, w) in got.iter().zip(&want) {
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }
    // The forward keeps the region whole; the backward computes `tanh` again from its operands.
    let text = print_closed(&remat, 0);
    assert!(text.contains("checkpoint["), "{text}");
    assert_eq!(text.matches("tanh").count(), 2, "{text}");
    assert_eq!(print_closed(&plain, 0).matches("tanh").count(), 1);
}
