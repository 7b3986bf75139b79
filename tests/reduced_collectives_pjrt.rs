//! JAX's reduced/unreduced collectives (`reduced_vary_cast_p`, `all_gather_reduced`,
//! `unreduced_reduce_scatter`) and the asynchronous starts of `psum_invariant`,
//! `unreduced_psum`, `all_gather_reduced` and `unreduced_reduce_scatter` lowered and run on eight
//! PJRT CPU devices: the results, and the gradients (whose transposes use `all_gather_reduced`,
//! a device's own block and `psum`), equal the SPMD interpreter's; the starts lower to
//! `async_start`/`async_done` pairs, and an untiled `unreduced_reduce_scatter_start` is refused
//! by the lowering, as JAX refuses it.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::trace::{Tensor, shard_map_program};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn options() -> tessera_stablehlo::LowerOptions {
    tessera_stablehlo::LowerOptions {
        num_partitions: 8,
        ..tessera_stablehlo::LowerOptions::default()
    }
}

/// `shard_map(f)` over a 2×4 mesh (`x`, `y`) on an f32 `[4, 16]` array laid out by
/// `P('x', 'y')` (blocks of `[2, 4]`), `outs` results laid out the same way.
fn program(outs: usize, f: impl FnOnce(&Tensor) -> Vec<Tensor>) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 4)]).unwrap();
    let spec = PartitionSpec::parse("P('x', 'y')").unwrap();
    let p = shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        &vec![spec.clone(); outs],
        &[ShapedArray::new(DType::F32, &[4, 16])],
        |a| f(&a[0]),
    )
    .unwrap();
    tessera_ir::verify(&p).unwrap();
    p
}

fn input(seed: f64) -> Array {
    Array::new(
        DType::F32,
        &[4, 16],
        (0..64)
            .map(|v| (f64::from(v) * 0.37 + seed).sin())
            .collect(),
    )
    .unwrap()
}

/// Runs `program` on eight PJRT devices and on the interpreter and compares.
fn pjrt_matches_interpreter(what: &str, program: &ClosedJaxpr, args: &[Array]) {
    let client = tessera_pjrt::Client::cpu(8).unwrap();
    let got = tessera::jit::run_spmd(&client, program, args).unwrap();
    let want = tessera_ir::interp::eval_closed(program, args).unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what}: result {k}");
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{what}: result {k}: {a} vs {b}"
            );
        }
    }
}

/// The body: each new collective (and each start) once, combined with the block.
fn body(a: &Tensor) -> Vec<Tensor> {
    // Varying -> Reduced, then a local op with a varying value (reduced_vary_cast_p).
    let gathered = a.all_gather_reduced("y", 1, true).sin();
    let first = &Tensor::slice_axis(&gathered, 1, 4, 8) * a;
    // Varying -> Unreduced -> Varying (scattered).
    let scattered = a
        .cos()
        .vary_unreduced_cast(&["y"])
        .unreduced_psum_scatter("y", 1, true);
    let second = &scattered.all_gather("y", 1, true) * a;
    // Invariant -> Reduced -> Varying, explicitly.
    let third = &a
        .psum(&["x"])
        .preduced(&["x"])
        .reduced_vary_cast(&["x"])
        .exp()
        * a;
    // The starts, with local work traced while they are pending.
    let summed = a.psum_invariant_start(&["y"]);
    let owed = a
        .sin()
        .vary_unreduced_cast(&["x"])
        .unreduced_psum_start(&["x"]);
    let gathered = a.all_gather_reduced_start("x", 0, true);
    let scattered = a
        .vary_unreduced_cast(&["y"])
        .unreduced_psum_scatter_start("y", 1, true);
    let local = a.tanh();
    let fourth = &(&summed.done() * &local) + &owed.done();
    let fifth = &Tensor::slice_axis(&gathered.done(), 0, 2, 4) * &local;
    let sixth = &scattered.done().all_gather("y", 1, true) + &local;
    vec![first, second, third, fourth, fifth, sixth]
}

#[test]
fn reduced_and_unreduced_collectives_and_their_starts_run_on_eight_pjrt_devices() {
    let p = program(6, body);
    let text = tessera_stablehlo::lower_closed(&p, &options())
        .unwrap()
        .text;
    assert_eq!(text.matches("stablehlo.async_start").count(), 4, "{text}");
    assert_eq!(text.matches("stablehlo.async_done").count(), 4, "{text}");
    assert_eq!(
        text.matches("stablehlo.reduce_scatter").count(),
        2,
        "{text}"
    );
    pjrt_matches_interpreter("values", &p, &[input(0.3)]);
}

#[test]
fn their_gradients_run_on_eight_pjrt_devices() {
    let p = program(6, body);
    let g = tessera_ir::vjp(&p).unwrap();
    tessera_ir::verify(&g).unwrap();
    let cts: Vec<Array> = (0..6).map(|k| input(1.0 + f64::from(k))).collect();
    let mut args = vec![input(0.3)];
    args.extend(cts);
    pjrt_matches_interpreter("gradients", &g, &args);
}

#[test]
fn an_untiled_unreduced_reduce_scatter_start_is_refused_by_the_lowering() {
    let p = program(1, |a| {
        let x = a.vary_unreduced_cast(&["x"]);
        let scattered = x.unreduced_psum_scatter_start("x", 0, false).done();
        vec![&scattered.broadcast_in_dim(&[2, 4], &[1]) * a]
    });
    // The interpreter runs it (the sum owed, scattered along dimension 0)...
    let x = input(0.5);
    let got = tessera_ir::interp::eval_closed(&p, std::slice::from_ref(&x)).unwrap();
    assert_eq!(got[0].shape(), [4, 16]);
    // ... but it has no asynchronous lowering, in JAX neither.
    match tessera_stablehlo::lower_closed(&p, &options()) {
        Err(tessera_stablehlo::LowerError::Unsupported { prim, reason }) => {
            assert_eq!(prim, "unreduced_reduce_scatter_start");
            assert!(reason.contains("tiled=true"), "{reason}");
        }
        other => panic!("expected LowerError::Unsupported, got {other:?}"),
    }
}
