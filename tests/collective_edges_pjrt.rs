//! Collectives at the edges of their types, against JAX's behaviour (JAX 0.10.2 on CPU devices):
//! `pmax`/`pmin` of booleans stay boolean (OR and AND) where `psum` counts them as int32, and
//! `pbroadcast` hands every device the source's value bit for bit, a negative zero included.
//! Each on the SPMD interpreter and on eight PJRT CPU devices.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::trace::{Tensor, shard_map_program};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};

/// `shard_map(f)` over 8 devices along `x`, on a `[8]` array of `dtype` (one element each),
/// every result laid out by `P('x')`.
fn program(dtype: DType, outs: usize, f: impl FnOnce(&Tensor) -> Vec<Tensor>) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 8)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let p = shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        &vec![spec.clone(); outs],
        &[ShapedArray::new(dtype, &[8])],
        |a| f(&a[0]),
    )
    .unwrap();
    tessera_ir::verify(&p).unwrap();
    p
}

/// The results on the interpreter and on PJRT, which must agree bit for bit.
fn both(program: &ClosedJaxpr, input: &Array) -> Vec<Array> {
    let want = tessera_ir::interp::eval_closed(program, std::slice::from_ref(input)).unwrap();
    let client = tessera_pjrt::Client::cpu(8).unwrap();
    let got = tessera::jit::run_spmd(&client, program, std::slice::from_ref(input)).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.dtype(), w.dtype());
        let bits = |a: &Array| a.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(g), bits(w), "PJRT {g:?} vs the interpreter {w:?}");
    }
    want
}

#[test]
fn pmax_and_pmin_of_booleans_stay_boolean_and_psum_counts_them() {
    let flags = [false, true, false, false, true, false, false, false];
    let input = Array::new(
        DType::Bool,
        &[8],
        flags.iter().map(|&b| f64::from(u8::from(b))).collect(),
    )
    .unwrap();
    let p = program(DType::Bool, 3, |a| {
        vec![a.pmax(&["x"]), a.pmin(&["x"]), a.psum(&["x"])]
    });
    let outs = p.jaxpr.out_avals();
    assert_eq!(
        [outs[0].dtype, outs[1].dtype, outs[2].dtype],
        [DType::Bool, DType::Bool, DType::I32]
    );
    let got = both(&p, &input);
    assert_eq!(got[0].to_vec(), vec![1.0; 8], "pmax is OR");
    assert_eq!(got[1].to_vec(), vec![0.0; 8], "pmin is AND");
    assert_eq!(got[2].to_vec(), vec![2.0; 8], "psum counts");
}

#[test]
fn pbroadcast_gives_every_device_the_sources_bits() {
    let values = [1.5, -0.0, 3.0, f64::NEG_INFINITY, 0.0, -2.0, 7.0, 8.0];
    let input = Array::new(DType::F32, &[8], values.to_vec()).unwrap();
    for source in [1, 3, 4] {
        let p = program(DType::F32, 1, |a| vec![a.pbroadcast("x", source)]);
        let got = both(&p, &input);
        let want = values[source as usize];
        for v in got[0].to_vec() {
            assert_eq!(
                v.to_bits(),
                want.to_bits(),
                "source {source}: {v} vs {want}"
            );
        }
    }
}
