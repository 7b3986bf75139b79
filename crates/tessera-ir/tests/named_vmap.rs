//! `vmap` with an axis name (JAX's `vmap(f, axis_name='b')`): collectives over the vmapped axis
//! treat the batch elements as that axis's devices, so every function gives what `pmap` over a
//! device axis of the same size gives (`pmap` is the oracle here), inside a `shard_map` too,
//! with gradients; misuse is refused naming the axis.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::autodiff::vjp;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{Tensor, pmap, shard_map_program, trace, vmap_named_call};
use tessera_ir::{Array, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn ramp(shape: &[i64]) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(
        DType::F32,
        shape,
        (0..n).map(|v| (v * 7 % 11) as f64 - 3.0).collect(),
    )
    .unwrap()
}

type Body = fn(&Tensor) -> Tensor;

/// The function on one element, written once and run both ways.
fn cases() -> Vec<(&'static str, Body)> {
    vec![
        ("psum", |x| x.psum(&["b"])),
        ("pmean", |x| x.pmean(&["b"])),
        ("pmax", |x| x.pmax(&["b"])),
        ("pmin", |x| x.pmin(&["b"])),
        ("normalise", |x| x / &x.psum(&["b"])),
        ("axis_index", |x| {
            let i = Tensor::axis_index(x, "b").astype(DType::F32);
            x * &i
        }),
        ("all_gather", |x| x.all_gather("b", 1, false).sum(&[1])),
        ("all_gather_tiled", |x| x.all_gather("b", 0, true).sum(&[0])),
        ("ppermute", |x| x.ppermute("b", &[(0, 1), (1, 2), (2, 3)])),
        ("pshuffle", |x| x.pshuffle("b", &[3, 0, 2, 1])),
        ("psum_scatter", |x| {
            let y = x.psum_scatter("b", 0, true);
            y.all_gather("b", 0, true)
        }),
        ("psum_scatter_untiled", |x| {
            let y = x.psum_scatter("b", 0, false);
            y.all_gather("b", 0, false)
        }),
        ("all_to_all", |x| {
            x.all_to_all("b", 0, 1, true)
                .reshape(&[4, 6])
                .transpose(&[1, 0])
                .reshape(&[4, 6])
        }),
        ("pswapaxes", |x| x.pswapaxes("b", 0)),
        ("pbroadcast", |x| x.pbroadcast("b", 2)),
    ]
}

#[test]
fn every_collective_over_the_vmapped_axis_gives_what_pmap_gives() {
    let input = ramp(&[4, 4, 6]);
    for (name, f) in cases() {
        let mapped = trace(&[input.aval()], |a| {
            vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| vec![f(&s[0])])
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        tessera_ir::verify(&mapped).unwrap();
        let text = tessera_ir::text::print_closed(&mapped, 0);
        assert!(
            !text.contains("'b'") && !text.contains("axis_name=b") && !text.contains("axes=(b"),
            "{name} still names b:\n{text}"
        );
        let devices = trace(&[input.aval()], |a| pmap("b", &[&a[0]], |s| vec![f(&s[0])])).unwrap();
        let got = eval_closed(&mapped, std::slice::from_ref(&input)).unwrap();
        let want = eval_closed(&devices, std::slice::from_ref(&input)).unwrap();
        assert_eq!(got[0].shape(), want[0].shape(), "{name}");
        for (g, w) in got[0].to_vec().iter().zip(want[0].to_vec()) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{name}: {g} against {w}"
            );
        }
    }
}

#[test]
fn a_shared_argument_and_a_batch_dimension_elsewhere() {
    // x batched along dimension 1, w shared: each element normalises by the batch's total.
    let x = ramp(&[3, 4]);
    let w = Array::new(DType::F32, &[3], vec![1.0, 2.0, -1.0]).unwrap();
    let program = trace(&[x.aval(), w.aval()], |a| {
        vmap_named_call("b", &[Some(1), None], &[1], &[&a[0], &a[1]], |s| {
            vec![&(&s[0] * &s[1]) - &(&s[0] * &s[1]).pmean(&["b"])]
        })
    })
    .unwrap();
    let got = eval_closed(&program, &[x.clone(), w.clone()]).unwrap()[0].to_vec();
    let (xv, wv) = (x.to_vec(), w.to_vec());
    for r in 0..3 {
        let mean = (0..4).map(|c| xv[r * 4 + c] * wv[r]).sum::<f64>() / 4.0;
        for c in 0..4 {
            let want = xv[r * 4 + c] * wv[r] - mean;
            assert!((got[r * 4 + c] - want).abs() < 1e-5, "{got:?}");
        }
    }
}

#[test]
fn inside_a_shard_map_the_vmapped_axis_and_the_mesh_axes_reduce_together() {
    // 2 devices along x, each a [2, 3] block, vmapped over its rows: psum over (x, b) is the
    // sum of every row of the whole array, the same everywhere.
    let mesh = AbstractMesh::auto(&[("x", 2)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let program = shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[f32(&[4, 3])],
        |a| {
            vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| {
                vec![s[0].psum(&["x", "b"])]
            })
        },
    )
    .unwrap();
    let x = ramp(&[4, 3]);
    let got = eval_closed(&program, std::slice::from_ref(&x)).unwrap()[0].to_vec();
    let xv = x.to_vec();
    let col: Vec<f64> = (0..3)
        .map(|c| (0..4).map(|r| xv[r * 3 + c]).sum())
        .collect();
    let want: Vec<f64> = (0..12).map(|v| col[v % 3]).collect();
    assert_eq!(got, want);
}

#[test]
fn the_gradient_of_a_batch_normalisation_flows_through_the_named_axis() {
    let x = ramp(&[4, 3]);
    let program = trace(&[x.aval()], |a| {
        let y = vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| {
            let centred = &s[0] - &s[0].pmean(&["b"]);
            vec![(&centred * &centred).sum(&[0])]
        });
        vec![y[0].sum(&[0])]
    })
    .unwrap();
    let grads = eval_closed(
        &vjp(&program).unwrap(),
        &[x.clone(), Array::scalar(DType::F32, 1.0)],
    )
    .unwrap();
    // d/dx sum_e sum_j (x[e,j] - mean_j)^2 = 2 (x[e,j] - mean_j).
    let xv = x.to_vec();
    let mean: Vec<f64> = (0..3)
        .map(|c| (0..4).map(|r| xv[r * 3 + c]).sum::<f64>() / 4.0)
        .collect();
    for (v, g) in grads[0].to_vec().iter().enumerate() {
        let want = 2.0 * (xv[v] - mean[v % 3]);
        assert!((g - want).abs() < 1e-5, "{g} against {want}");
    }
}

#[test]
fn misuse_is_refused_naming_the_axis() {
    let err = |f: &dyn Fn(&[Tensor]) -> Vec<Tensor>| {
        trace(&[f32(&[4, 3])], f)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let unbound =
        err(&|a| vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| vec![s[0].psum(&["c"])]));
    assert!(unbound.contains("unbound axis name: 'c'"), "{unbound}");
    let groups = err(&|a| {
        vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| {
            vec![s[0].psum_in_groups(&["b"], &[vec![0, 1], vec![2, 3]])]
        })
    });
    assert!(
        groups.contains("axis_index_groups over the vmapped axis 'b'"),
        "{groups}"
    );
    let unmapped = err(&|a| vmap_named_call("b", &[None], &[0], &[&a[0]], |s| vec![s[0].clone()]));
    assert!(unmapped.contains("no argument is batched"), "{unmapped}");
    let mesh = AbstractMesh::auto(&[("b", 2)]).unwrap();
    let spec = PartitionSpec::parse("P('b')").unwrap();
    let clash = shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[f32(&[4, 3])],
        |a| vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| vec![s[0].psum(&["b"])]),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(clash.contains("already bound"), "{clash}");
}
