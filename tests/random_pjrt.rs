//! `tessera::ir::trace::random` gives JAX's random numbers bit for bit, on the interpreter and
//! on PJRT. The pinned values were computed with JAX 0.10.1 (jaxlib 0.10.1, CPU); JAX 0.10.2
//! gives the same `normal(PRNGKey(0), (3,))` and `split(PRNGKey(0))` (checked with jax 0.10.2 on
//! this machine), and the oracle's `random_*` cases, made with 0.10.2, pass too. Keys are given as the data of
//! `jax.random.PRNGKey(seed)`, i.e. `[0, seed]`, and wrapped in the program.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::ir::trace::{self, Tensor, random};
use tessera_ir::interp::eval_closed;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray, vmap};

/// A program from key data `u32[2]` to `f`'s results, run on both backends.
fn run(seed: u32, f: impl FnOnce(&Tensor) -> Vec<Tensor>) -> [Vec<Array>; 2] {
    let program = key_program(f);
    let key = Array::new(DType::U32, &[2], vec![0.0, f64::from(seed)]).unwrap();
    both(&program, &[key])
}

fn key_program(f: impl FnOnce(&Tensor) -> Vec<Tensor>) -> ClosedJaxpr {
    trace::trace(&[ShapedArray::new(DType::U32, &[2])], |a| {
        f(&random::wrap_key_data(&a[0]))
    })
    .unwrap()
}

fn both(program: &ClosedJaxpr, args: &[Array]) -> [Vec<Array>; 2] {
    tessera_ir::verify(program).unwrap();
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let here = eval_closed(program, args).unwrap();
    let there = tessera::jit::run_on_device(&client, program, args, 0).unwrap();
    [here, there]
}

fn assert_exact(what: &str, got: &[Vec<Array>; 2], want: &[f64]) {
    for (backend, outs) in ["interpreter", "PJRT"].iter().zip(got) {
        assert_eq!(outs[0].to_vec(), want, "{what} on {backend}");
    }
}

#[test]
fn normal_of_prng_key_0_is_jaxs() {
    // jax.random.normal(jax.random.PRNGKey(0), (3,))
    let want = [1.622642159461975, 2.0252647399902344, -0.4335944354534149];
    // The interpreter computes a float32 erf_inv in f32 operations as XLA does, so both
    // backends give JAX's numbers exactly.
    assert_exact("normal", &run(0, |k| vec![random::normal(k, &[3])]), &want);
}

#[test]
fn split_fold_in_and_bits_are_jaxs() {
    // jax.random.split(jax.random.PRNGKey(0))
    let split = run(0, |k| vec![random::key_data(&random::split(k, 2))]);
    assert_exact(
        "split",
        &split,
        &[1797259609.0, 2579123966.0, 928981903.0, 3453687069.0],
    );
    // jax.random.split(jax.random.PRNGKey(5), 3)
    let split3 = run(5, |k| vec![random::key_data(&random::split(k, 3))]);
    let want = [
        2724472204.0,
        3573582090.0,
        202567368.0,
        3886822060.0,
        3594430910.0,
        1784718894.0,
    ];
    assert_exact("split into 3", &split3, &want);
    // jax.random.fold_in(jax.random.PRNGKey(0), 3)
    let fold = run(0, |k| {
        let three = k.literal_one(DType::U32) * 3.0;
        vec![random::key_data(&random::fold_in(k, &three))]
    });
    assert_exact("fold_in", &fold, &[2467461003.0, 3840466878.0]);
    // jax.random.bits(jax.random.PRNGKey(1), (4,))
    let bits = run(1, |k| vec![random::bits(k, &[4])]);
    assert_exact(
        "bits",
        &bits,
        &[1883912375.0, 2292451390.0, 1915204986.0, 1882898417.0],
    );
}

#[test]
fn samplers_are_jaxs() {
    // jax.random.uniform(jax.random.PRNGKey(42), (5,))
    let uniform = run(42, |k| vec![random::uniform(k, &[5], 0.0, 1.0)]);
    let want = [
        0.48870956897735596,
        0.6797971725463867,
        0.6162714958190918,
        0.5610160827636719,
        0.4506446123123169,
    ];
    assert_exact("uniform", &uniform, &want);
    // jax.random.bernoulli(jax.random.PRNGKey(7), 0.6, (8,))
    let bern = run(7, |k| vec![random::bernoulli(k, 0.6, &[8])]);
    assert_exact(
        "bernoulli",
        &bern,
        &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0],
    );
    // jax.random.categorical(jax.random.PRNGKey(3), logits) along axis -1 and 0.
    let logits = [0.1, 2.0, -1.0, 0.5, 0.0, 3.0, -2.0, 0.0, 1.0, 2.9];
    let program = trace::trace(
        &[
            ShapedArray::new(DType::U32, &[2]),
            ShapedArray::new(DType::F32, &[2, 5]),
        ],
        |a| {
            let k = random::wrap_key_data(&a[0]);
            vec![
                random::categorical(&k, &a[1], -1),
                random::categorical(&k, &a[1], 0),
            ]
        },
    )
    .unwrap();
    let args = [
        Array::new(DType::U32, &[2], vec![0.0, 3.0]).unwrap(),
        Array::new(DType::F32, &[2, 5], logits.to_vec()).unwrap(),
    ];
    for (backend, outs) in ["interpreter", "PJRT"].iter().zip(both(&program, &args)) {
        assert_eq!(outs[0].to_vec(), [1.0, 0.0], "categorical on {backend}");
        assert_eq!(
            outs[1].to_vec(),
            [1.0, 0.0, 1.0, 0.0, 1.0],
            "axis 0 on {backend}"
        );
    }
}

#[test]
fn a_key_from_a_seed_is_prng_key_data() {
    // jax.random.key_data(jax.random.key(-5)) == jax.random.PRNGKey(-5) == [0, 4294967291]
    let program = trace::trace(&[ShapedArray::new(DType::I32, &[])], |a| {
        vec![random::key_data(&random::key(&a[0]))]
    })
    .unwrap();
    let seed = Array::new(DType::I32, &[], vec![-5.0]).unwrap();
    assert_exact("key(-5)", &both(&program, &[seed]), &[0.0, 4294967291.0]);
}

#[test]
fn narrow_bits_keep_the_low_bits_of_each_draw_and_64_bits_both_words() {
    // jax.random.bits(jax.random.PRNGKey(1), (4,), dtype=jnp.uint8) and (2, 2) of uint16.
    let text = "{ lambda ; a:u32[2]. let
    b:key<fry>[] = random_wrap[impl=fry] a
    c:u8[4] = random_bits[bit_width=8 shape=(4,)] b
    d:u16[2,2] = random_bits[bit_width=16 shape=(2, 2)] b
    e:u64[2] = random_bits[bit_width=64 shape=(2,)] b
  in (c, d, e) }";
    let program = tessera_ir::text::parse_closed(text).unwrap();
    let key = Array::new(DType::U32, &[2], vec![0.0, 1.0]).unwrap();
    let [here, there] = both(&program, &[key]);
    for (backend, outs) in ["interpreter", "PJRT"].iter().zip([&here, &there]) {
        assert_eq!(outs[0].to_vec(), [183.0, 62.0, 122.0, 241.0], "{backend}");
        assert_eq!(
            outs[1].to_vec(),
            [14519.0, 2110.0, 46458.0, 49137.0],
            "{backend}"
        );
    }
    // 64 bits are both words, high first (the interpreter rounds them to f64, as does the
    // conversion of PJRT's exact u64 result).
    assert_eq!(here[2].to_vec(), there[2].to_vec());
    assert!(here[2].to_vec().iter().all(|&v| v > f64::from(u32::MAX)));
}

#[test]
fn vmap_over_keys_equals_drawing_from_each_key() {
    // One program per key, and the same program vmapped over a batch of keys (its split,
    // fold_in and draws batched); both backends run the batched one.
    let program = key_program(|k| {
        let keys = random::split(k, 2);
        let second = Tensor::slice_axis(&random::key_data(&keys), 0, 1, 2).reshape(&[2]);
        let k2 = random::fold_in(&random::wrap_key_data(&second), &k.literal_one(DType::U32));
        vec![random::normal(&k2, &[3]), random::key_data(&keys)]
    });
    let batched = vmap(&program, &[Some(0)], &[0, 0], 4).unwrap();
    let seeds = [0.0, 1.0, 7.0, 12345.0];
    let data: Vec<f64> = seeds.iter().flat_map(|&s| [0.0, s]).collect();
    let keys = Array::new(DType::U32, &[4, 2], data).unwrap();
    let [here, there] = both(&batched, &[keys]);
    for (i, &s) in seeds.iter().enumerate() {
        let one = Array::new(DType::U32, &[2], vec![0.0, s]).unwrap();
        // Each backend's batched draws equal its own draws from each key alone.
        for (backend, (batched_outs, single)) in ["interpreter", "PJRT"]
            .iter()
            .zip([&here, &there].into_iter().zip(both(&program, &[one])))
        {
            for (k, w) in single.iter().enumerate() {
                let n = w.to_vec().len();
                let row = batched_outs[k].to_vec()[i * n..(i + 1) * n].to_vec();
                assert_eq!(row, w.to_vec(), "{backend}, key {i}, output {k}");
            }
        }
    }
}

#[test]
fn key_arrays_are_sliced_broadcast_and_transposed_on_both_backends() {
    // `k1, k2 = jax.random.split(key)` as JAX prints it (slice + squeeze of a key array), then
    // a broadcast and a transpose of key arrays.
    let text = "{ lambda ; a:u32[2]. let
    k:key<fry>[] = random_wrap[impl=fry] a
    b:key<fry>[2] = random_split[shape=(2,)] k
    c:key<fry>[1] = slice[limit_indices=(2,) start_indices=(1,) strides=None] b
    d:key<fry>[] = squeeze[dimensions=(0,)] c
    e:u32[2] = random_unwrap d
    f:key<fry>[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,) sharding=None] d
    g:key<fry>[3,2] = random_split[shape=(2,)] f
    h:key<fry>[2,3] = transpose[permutation=(1, 0)] g
    i:u32[2,3,2] = random_unwrap h
    j:u32[3,2] = random_bits[bit_width=32 shape=(2,)] f
  in (e, i, j) }";
    let program = tessera_ir::text::parse_closed(text).unwrap();
    let key = Array::new(DType::U32, &[2], vec![0.0, 0.0]).unwrap();
    let [here, there] = both(&program, &[key]);
    // jax.random.split(jax.random.PRNGKey(0))[1]
    assert_eq!(here[0].to_vec(), [928981903.0, 3453687069.0]);
    for (k, (h, t)) in here.iter().zip(&there).enumerate() {
        assert_eq!(h.to_vec(), t.to_vec(), "output {k}: interpreter vs PJRT");
    }
    // Every broadcast copy of the key draws the same bits; the transpose moved whole keys.
    let bits = here[2].to_vec();
    assert_eq!(bits[0..2], bits[2..4]);
    let keys = here[1].to_vec();
    assert_eq!(keys[0..2], keys[2..4], "split key 0 of copies 0 and 1");
    assert_ne!(keys[0..2], keys[6..8], "split keys 0 and 1 of copy 0");
}

#[test]
fn keys_cross_the_device_boundary_as_their_two_words() {
    // A key argument and a key result: PJRT sees `u32[..., 2]`, the caller key arrays.
    let text = "{ lambda ; k:key<fry>[2]. let
    a:key<fry>[2,2] = random_split[shape=(2,)] k
    b:u32[2,3] = random_bits[bit_width=32 shape=(3,)] k
  in (a, b) }";
    let program = tessera_ir::text::parse_closed(text).unwrap();
    let keys = Array::from_elem_vec(
        DType::KeyFry,
        &[2],
        vec![
            tessera_ir::prim::pack_key([0, 0]),
            tessera_ir::prim::pack_key([0, 5]),
        ],
    )
    .unwrap();
    let [here, there] = both(&program, &[keys]);
    assert_eq!(there[0].dtype(), DType::KeyFry);
    assert_eq!(there[0].shape(), [2, 2]);
    for k in 0..2 {
        let bits = |a: &Array| a.elem_vec().iter().map(|e| e.bits()).collect::<Vec<_>>();
        assert_eq!(bits(&here[k]), bits(&there[k]), "output {k}");
    }
    // jax.random.split(jax.random.PRNGKey(0))[1] and split(PRNGKey(5), 2)[0] (see above).
    let words: Vec<[u32; 2]> = here[0]
        .elem_vec()
        .into_iter()
        .map(tessera_ir::prim::unpack_key)
        .collect();
    assert_eq!(words[1], [928981903, 3453687069]);
    assert_eq!(words[0], [1797259609, 2579123966]);
    assert_ne!(words[2], words[0]);
}
