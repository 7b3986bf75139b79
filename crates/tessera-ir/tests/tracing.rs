//! The tracing API: weak-type promotion of Rust literals, numpy broadcasting and the `jnp`
//! helpers, checked against the interpreter.

use expect_test::{Expect, expect};
use tessera_ir::interp::{Array, eval_closed};
use tessera_ir::trace::{Tensor, jnp, trace};
use tessera_ir::verify::verify_closed;
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};

fn check(cj: &ClosedJaxpr, args: &[Array], expect: Expect) {
    verify_closed(cj).expect("verifies");
    let outs = eval_closed(cj, args).expect("evaluates");
    let vals: Vec<String> = outs
        .iter()
        .map(|a| format!("{} {:?}", a.aval(), a.to_f64_vec()))
        .collect();
    expect.assert_eq(&format!("{cj}\n{}", vals.join("\n")));
}

#[test]
fn literals_are_weak_and_ranks_broadcast() {
    let avals = [
        ShapedArray::new(DType::BF16, &[2, 2]),
        ShapedArray::new(DType::I32, &[2]),
    ];
    let cj = trace(&avals, |x: Tensor, i: Tensor| {
        ((&x * 2.0 + 1) / &i.astype(DType::BF16), i * 3)
    })
    .expect("traces");
    let x = Array::from_f64(DType::BF16, &[2, 2], &[1.0, 2.0, 3.0, 4.0]).expect("fits");
    let i = Array::from_f64(DType::I32, &[2], &[1.0, 2.0]).expect("fits");
    check(
        &cj,
        &[x, i],
        expect![[r#"
        { lambda ; a:bf16[2,2] b:i32[2]. let
            c:bf16[2,2] = mul a 2.0:bf16[]
            d:bf16[2,2] = add c 1.0:bf16[]
            e:bf16[2] = convert_element_type[new_dtype=bfloat16 weak_type=False] b
            f:bf16[1,2] = broadcast_in_dim[broadcast_dimensions=(1,)] e
            g:bf16[2,2] = div d f
            h:i32[2] = mul b 3:i32[]
          in (g, h) }
        bf16[2,2] [3.0, 2.5, 7.0, 4.5]
        i32[2] [3.0, 6.0]"#]],
    );
}

#[test]
fn jnp_helpers() {
    let avals = [
        ShapedArray::new(DType::F32, &[2, 3]),
        ShapedArray::new(DType::I32, &[2]),
    ];
    let cj = trace(&avals, |x: Tensor, labels: Tensor| {
        let oh = jnp::one_hot(&labels, 3, DType::F32);
        vec![
            jnp::logsumexp(&x, -1, false),
            jnp::mean(&(&oh * &x), &[0, 1], false),
            jnp::softmax(&x, 1),
        ]
    })
    .expect("traces");
    let x = Array::from_f64(DType::F32, &[2, 3], &[0.0, 1.0, 2.0, 1.0, 1.0, 1.0]).expect("fits");
    let l = Array::from_f64(DType::I32, &[2], &[2.0, 0.0]).expect("fits");
    check(
        &cj,
        &[x, l],
        expect![[r#"
            { lambda ; a:f32[2,3] b:i32[2]. let
                c:i32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] b
                d:i32[3] = iota[dimension=0 dtype=int32 shape=(3,) sharding=None] 
                e:i32[1,3] = broadcast_in_dim[broadcast_dimensions=(1,)] d
                f:bool[2,3] = eq c e
                g:f32[2,3] = convert_element_type[new_dtype=float32 weak_type=False] f
                h:f32[2] = reduce_max[axes=(1,)] a
                i:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] h
                j:f32[2,1] = stop_gradient i
                k:f32[2,3] = sub a j
                l:f32[2,3] = exp k
                m:f32[2] = reduce_sum[axes=(1,) out_sharding=None] l
                n:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] m
                o:f32[2,1] = log n
                p:f32[2,1] = add o j
                q:f32[2] = reshape[dimensions=None new_sizes=(2,) sharding=None] p
                r:f32[2,3] = mul g a
                s:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] r
                t:f32[] = div s 6.0:f32[]
                u:f32[2] = reduce_max[axes=(1,)] a
                v:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] u
                w:f32[2,3] = sub a v
                x:f32[2,3] = exp w
                y:f32[2] = reduce_sum[axes=(1,) out_sharding=None] x
                z:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] y
                ba:f32[2,3] = div x z
              in (q, t, ba) }
            f32[2] [2.4076058864593506, 2.0986123085021973]
            f32[] [0.5]
            f32[2,3] [0.09003057330846786, 0.2447284758090973, 0.6652409434318542, 0.3333333432674408, 0.3333333432674408, 0.3333333432674408]"#]],
    );
}
