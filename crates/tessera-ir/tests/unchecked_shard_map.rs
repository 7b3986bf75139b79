//! `shard_map` with `check_vma=False` (and `pmap`, which JAX prints as one): values carry no
//! varying axes, and the VJP follows JAX's unchecked transpose (`psum` to `psum`, a replicated
//! result's cotangent shared by the devices, a replicated operand's summed over them); a `scan`
//! whose body permutes around a ring runs in lock step on every device.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, DType, vjp};

/// `out = psum(sin(x_block) * w)` over 4 devices, replicated out; `w` replicated in.
const UNCHECKED: &str = "{ lambda ; a:f32[4,2] b:f32[1,2]. let
    c:f32[1,2] = shard_map[
      check_vma=False
      in_specs=(P('x',), P())
      jaxpr={ lambda ; d:f32[1,2] e:f32[1,2]. let
          f:f32[1,2] = sin d
          g:f32[1,2] = mul f e
          h:f32[1,2] = psum[axes=('x',) axis_index_groups=None] g
        in (h,) }
      mesh=Mesh('x': 4, axis_types=(Auto,))
      newly_manual_axes=frozenset({'x'})
      out_specs=(P(None,),)
    ] a b
  in (c,) }";

fn values(shape: &[i64], f: impl Fn(f64) -> f64) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(DType::F32, shape, (0..n).map(|i| f(i as f64)).collect()).unwrap()
}

#[test]
fn an_unchecked_psum_differentiates_as_jax_does() {
    let program = parse_closed(UNCHECKED).unwrap();
    let x = values(&[4, 2], |i| 0.3 * i - 1.0);
    let w = values(&[1, 2], |i| 1.5 - i);
    let ct = values(&[1, 2], |i| 2.0 + i);
    let out = eval_closed(&program, &[x.clone(), w.clone()]).unwrap();
    let (xs, ws, cts) = (x.to_vec(), w.to_vec(), ct.to_vec());
    for j in 0..2 {
        let want: f64 = (0..4).map(|r| xs[r * 2 + j].sin() * ws[j]).sum();
        assert!((out[0].to_vec()[j] - want).abs() < 1e-5);
    }
    let grads = eval_closed(&vjp(&program).unwrap(), &[x, w, ct]).unwrap();
    // d/dx[r, j] = cos(x[r, j]) * w[j] * ct[j]; d/dw[j] = sum_r sin(x[r, j]) * ct[j].
    for r in 0..4 {
        for j in 0..2 {
            let want = xs[r * 2 + j].cos() * ws[j] * cts[j];
            let got = grads[0].to_vec()[r * 2 + j];
            assert!((got - want).abs() < 1e-5, "x[{r},{j}]: {got} vs {want}");
        }
    }
    for j in 0..2 {
        let want: f64 = (0..4).map(|r| xs[r * 2 + j].sin() * cts[j]).sum();
        let got = grads[1].to_vec()[j];
        assert!((got - want).abs() < 1e-5, "w[{j}]: {got} vs {want}");
    }
}

/// Each device adds what a ring of `ppermute`s brings it, 4 steps of a `scan`.
const RING: &str = "{ lambda ; a:f32[4,2]. let
    b:f32[4,2] = shard_map[
      check_vma=True
      in_specs=(P('x',),)
      jaxpr={ lambda ; c:f32[1,2]{V:x}. let
          d:i32[] e:f32[1,2]{V:x} f:f32[1,2]{V:x} = scan[
            jaxpr={ lambda ; g:i32[] h:f32[1,2]{V:x} i:f32[1,2]{V:x}. let
                j:i32[] = add g 1:i32[]
                k:f32[1,2]{V:x} = ppermute[axis_name=('x',) perm=((0, 1), (1, 2), (2, 3), (3, 0))] i
                l:f32[1,2]{V:x} = add h k
              in (j, l, k) }
            length=3
            num_carry=3
            num_consts=0
            reverse=False
            unroll=1
          ] 0:i32[] c c
        in (e,) }
      mesh=Mesh('x': 4, axis_types=(Auto,))
      newly_manual_axes=frozenset({'x'})
      out_specs=(P('x',),)
    ] a
  in (b,) }";

#[test]
fn a_scan_of_ppermutes_runs_in_lock_step_on_every_device() {
    let program = parse_closed(RING).unwrap();
    let x = values(&[4, 2], |i| i);
    // Each row plus the three rows before it around the ring: every row's sum is the total.
    let out = eval_closed(&program, &[x]).unwrap();
    assert_eq!(out[0].to_vec(), [12.0, 16.0].repeat(4));
}

#[test]
fn vmap_of_an_unchecked_shard_map_stays_unchecked_and_equals_stacking() {
    let program = parse_closed(UNCHECKED).unwrap();
    let xs = [
        values(&[4, 2], |i| 0.3 * i - 1.0),
        values(&[4, 2], |i| 0.1 * i),
    ];
    let w = values(&[1, 2], |i| 1.5 - i);
    let batched = tessera_ir::vmap(&program, &[Some(0), None], &[0], 2).unwrap();
    let text = tessera_ir::text::print_closed(&batched, 0);
    assert!(text.contains("check_vma=False"), "{text}");
    let stacked: Vec<f64> = xs.iter().flat_map(Array::to_vec).collect();
    let stacked = Array::new(DType::F32, &[2, 4, 2], stacked).unwrap();
    let got = eval_closed(&batched, &[stacked, w.clone()]).unwrap();
    let want: Vec<f64> = xs
        .iter()
        .flat_map(|x| eval_closed(&program, &[x.clone(), w.clone()]).unwrap()[0].to_vec())
        .collect();
    assert_eq!(got[0].to_vec(), want);
}

/// The traced form (`trace::shard_map_unchecked`) is the parsed one: `check_vma=False`, the
/// replicated out_spec taken as stated, the same values and the same gradients.
#[test]
fn a_traced_unchecked_shard_map_equals_the_parsed_one() {
    use tessera_ir::ShapedArray;
    use tessera_ir::trace::{shard_map_unchecked, trace};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let (split, whole) = (
        PartitionSpec::parse("P('x')").unwrap(),
        PartitionSpec::parse("P()").unwrap(),
    );
    let traced = trace(
        &[
            ShapedArray::new(DType::F32, &[4, 2]),
            ShapedArray::new(DType::F32, &[1, 2]),
        ],
        |a| {
            shard_map_unchecked(
                &mesh,
                &[split.clone(), whole.clone()],
                std::slice::from_ref(&whole),
                &[&a[0], &a[1]],
                |b| vec![(&b[0].sin() * &b[1]).psum(&["x"])],
            )
        },
    )
    .unwrap();
    let text = tessera_ir::text::print_closed(&traced, 0);
    assert!(text.contains("check_vma=False"), "{text}");
    assert!(!text.contains("{V:x}"), "{text}");
    let parsed = parse_closed(UNCHECKED).unwrap();
    let x = values(&[4, 2], |i| 0.3 * i - 1.0);
    let w = values(&[1, 2], |i| 1.5 - i);
    let ct = values(&[1, 2], |i| 2.0 + i);
    let run = |p: &tessera_ir::ClosedJaxpr, args: &[Array]| -> Vec<Vec<f64>> {
        eval_closed(p, args)
            .unwrap()
            .iter()
            .map(Array::to_vec)
            .collect()
    };
    let args = [x.clone(), w.clone()];
    assert_eq!(run(&traced, &args), run(&parsed, &args));
    let grads = [x, w, ct];
    assert_eq!(
        run(&vjp(&traced).unwrap(), &grads),
        run(&vjp(&parsed).unwrap(), &grads)
    );
}
