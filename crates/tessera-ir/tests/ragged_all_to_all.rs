//! `ragged_all_to_all` (JAX's `lax.ragged_all_to_all`) inside `shard_map` on the SPMD
//! interpreter: the exchange against expectations worked out by hand from its semantics, the
//! refusals of its shape rule and of the interpreter, its JVP against finite differences, its
//! VJP against its JVP, `vmap` against a loop, the named-axis `vmap` refusal and the text form.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::autodiff::{jvp, vjp};
use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{Tensor, shard_map_program, trace, vmap_named_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray, vmap};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn spec(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

fn array(dtype: DType, shape: &[i64], values: &[f64]) -> Array {
    Array::new(dtype, shape, values.to_vec()).unwrap()
}

fn flat(rows: &[[i64; 4]]) -> Vec<f64> {
    rows.iter().flatten().map(|&v| v as f64).collect()
}

/// What each of the 4 devices along `x` sends to each other: `SEND[d][r]` rows go from device
/// `d` to device `r`, uneven and sometimes none.
const SEND: [[i64; 4]; 4] = [[1, 0, 2, 1], [2, 1, 0, 3], [0, 2, 1, 1], [1, 1, 1, 0]];
/// Where in its operand block (6 rows) device `d` reads the slice for device `r`; device 0
/// leaves row 0 out and device 3 ends with an empty slice at row 6.
const INPUT_OFFSETS: [[i64; 4]; 4] = [[1, 2, 2, 4], [0, 2, 3, 3], [0, 0, 2, 3], [3, 4, 5, 6]];
/// Where on device `r` (6 output rows) the slice from device `d` is written: device 0 receives
/// in device order and leaves rows 3..5 alone, device 1 in reverse order, device 2 with a gap at
/// row 0, device 3 fills rows 0..5.
const OUTPUT_OFFSETS: [[i64; 4]; 4] = [[0, 0, 1, 0], [1, 4, 0, 1], [3, 0, 3, 4], [5, 2, 5, 6]];

/// `RECV[r][d] = SEND[d][r]`: the receiver's view of the same sizes.
fn recv() -> [[i64; 4]; 4] {
    let mut r = [[0; 4]; 4];
    for (d, row) in SEND.iter().enumerate() {
        for (to, &n) in row.iter().enumerate() {
            r[to][d] = n;
        }
    }
    r
}

/// The operands of the 4-device case, global (each device's block after the other), with the
/// offsets and sizes of `dtype`: operand rows `2k, 2k+1` in row `k`, output rows negative.
fn operands(dtype: DType) -> Vec<Array> {
    let operand: Vec<f64> = (0..48).map(f64::from).collect();
    let output: Vec<f64> = (0..48).map(|v| -f64::from(v) - 1.0).collect();
    vec![
        array(DType::F32, &[24, 2], &operand),
        array(DType::F32, &[24, 2], &output),
        array(dtype, &[16], &flat(&INPUT_OFFSETS)),
        array(dtype, &[16], &flat(&SEND)),
        array(dtype, &[16], &flat(&OUTPUT_OFFSETS)),
        array(dtype, &[16], &flat(&recv())),
    ]
}

/// `shard_map` over 4 devices along `x` of `ragged_all_to_all` on blocks of `avals`.
fn program(avals: &[ShapedArray]) -> tessera_ir::Result<ClosedJaxpr> {
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let specs = vec![spec("P('x')"); avals.len()];
    shard_map_program(&mesh, &specs, &[spec("P('x')")], avals, |a| {
        vec![a[0].ragged_all_to_all(&a[1], &a[2], &a[3], &a[4], &a[5], "x")]
    })
}

fn avals(xs: &[Array]) -> Vec<ShapedArray> {
    xs.iter().map(Array::aval).collect()
}

/// Device 0's rows, worked out from the semantics: from device 0 its row 1 (`[2, 3]`) at row
/// 0; from device 1 its rows 0..2 (global rows 6, 7) at row 1; nothing from device 2; from
/// device 3 its row 3 (global row 21) at row 5; rows 3 and 4 keep the output's values.
/// Likewise for the others.
const EXPECTED: [[f64; 12]; 4] = [
    [2., 3., 12., 13., 14., 15., -7., -8., -9., -10., 42., 43.],
    [
        24., 25., 26., 27., 44., 45., -19., -20., 16., 17., -23., -24.,
    ],
    [-25., -26., 4., 5., 6., 7., 28., 29., -33., -34., 46., 47.],
    [8., 9., 18., 19., 20., 21., 22., 23., 30., 31., -47., -48.],
];

#[test]
fn four_devices_exchange_uneven_slices_as_worked_out_by_hand() {
    for dtype in [DType::I32, DType::I64] {
        let xs = operands(dtype);
        let p = program(&avals(&xs)).unwrap();
        tessera_ir::verify(&p).unwrap();
        let got = eval_closed(&p, &xs).unwrap();
        let want: Vec<f64> = EXPECTED.iter().flatten().copied().collect();
        assert_eq!(got[0].shape(), [24, 2]);
        assert_eq!(got[0].to_vec(), want, "{dtype:?}");
    }
}

#[test]
fn the_two_device_example_of_jaxs_documentation() {
    // Device 0: operand [1, 2, 2], sends [1] to 0 and [2, 2] to 1; device 1: operand [3, 4, 0],
    // sends [3] to 0 and [4] to 1. Results: [1, 3, 0, 0] and [2, 2, 4, 0].
    let xs = vec![
        array(DType::F32, &[6], &[1., 2., 2., 3., 4., 0.]),
        array(DType::F32, &[8], &[0.; 8]),
        array(DType::I32, &[4], &[0., 1., 0., 1.]),
        array(DType::I32, &[4], &[1., 2., 1., 1.]),
        array(DType::I32, &[4], &[0., 0., 1., 2.]),
        array(DType::I32, &[4], &[1., 1., 2., 1.]),
    ];
    let mesh = AbstractMesh::auto(&[("x", 2)]).unwrap();
    let specs = vec![spec("P('x')"); 6];
    let p = shard_map_program(&mesh, &specs, &[spec("P('x')")], &avals(&xs), |a| {
        vec![a[0].ragged_all_to_all(&a[1], &a[2], &a[3], &a[4], &a[5], "x")]
    })
    .unwrap();
    let got = eval_closed(&p, &xs).unwrap();
    assert_eq!(got[0].to_vec(), [1., 3., 0., 0., 2., 2., 4., 0.]);
}

/// The error of tracing the 4-device program with the operands' types changed by `edit`.
fn refusal(edit: impl FnOnce(&mut Vec<ShapedArray>)) -> String {
    let mut types = avals(&operands(DType::I32));
    edit(&mut types);
    program(&types)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// A change to the operands' types.
type Edit = Box<dyn FnOnce(&mut Vec<ShapedArray>)>;

#[test]
fn the_shape_rule_refuses_what_jax_refuses_with_a_fix() {
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|t| t[2] = ShapedArray::new(DType::F32, &[16])),
            "input_offsets must be int32 or int64",
        ),
        (
            Box::new(|t| t[5] = ShapedArray::new(DType::I64, &[16])),
            "recv_sizes is i64 but input_offsets is i32",
        ),
        (
            Box::new(|t| t[3] = ShapedArray::new(DType::I32, &[8, 2])),
            "send_sizes must be a vector (rank 1)",
        ),
        (
            Box::new(|t| t[4] = ShapedArray::new(DType::I32, &[12])),
            "output_offsets has length 3 but input_offsets has 4",
        ),
        (
            Box::new(|t| {
                for v in &mut t[2..] {
                    *v = ShapedArray::new(DType::I32, &[12]);
                }
            }),
            "length 3, which the 4 devices of 'x' do not divide",
        ),
        (
            Box::new(|t| t[1] = ShapedArray::new(DType::F32, &[24, 3])),
            "trailing dimensions [2]",
        ),
        (
            Box::new(|t| t[1] = ShapedArray::new(DType::F64, &[24, 2])),
            "output has dtype f64 but operand f32",
        ),
    ];
    for (edit, want) in cases {
        let err = refusal(edit);
        assert!(err.contains(want), "want {want:?} in: {err}");
    }
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let scalar = shard_map_program(
        &mesh,
        &[spec("P()"), spec("P('x')"), spec("P('x')")],
        &[spec("P('x')")],
        &[
            ShapedArray::new(DType::F32, &[]),
            ShapedArray::new(DType::F32, &[8]),
            ShapedArray::new(DType::I32, &[16]),
        ],
        |a| vec![a[0].ragged_all_to_all(&a[1], &a[2], &a[2], &a[2], &a[2], "x")],
    );
    let err = scalar.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("has rank 0"), "{err}");
}

/// The interpreter's error for the 4-device case with the global vector `which` changed at
/// `index` to `value`.
fn run_error(which: usize, index: usize, value: f64) -> String {
    let mut xs = operands(DType::I32);
    let mut values = xs[which].to_vec();
    values[index] = value;
    xs[which] = array(DType::I32, &[16], &values);
    let p = program(&avals(&xs)).unwrap();
    eval_closed(&p, &xs)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn out_of_range_slices_and_mismatched_sizes_are_errors_not_panics() {
    // Device 1's slice for device 3 (global entry 7) read past its 6 rows.
    let err = run_error(2, 7, 4.0);
    assert!(
        err.contains("reads rows 4..7 of an operand with 6"),
        "{err}"
    );
    let err = run_error(2, 7, -1.0);
    assert!(err.contains("input_offsets[3] = -1"), "{err}");
    // Device 3's slice for device 2 written past device 2's 6 rows.
    let err = run_error(4, 14, 6.0);
    assert!(
        err.contains("writes rows 6..7 of an output with 6"),
        "{err}"
    );
    // Device 2 expects 2 rows from device 0, which sends 3.
    let err = run_error(5, 8, 3.0);
    assert!(
        err.contains("send_sizes[2] = 2 but the receiver's recv_sizes[0] = 3"),
        "{err}"
    );
    let err = run_error(3, 0, -1.0);
    assert!(err.contains("send_sizes[0] = -1 is negative"), "{err}");
}

/// The 4-device case on f64 data (the offsets and sizes are operands without tangents).
fn differentiable() -> (ClosedJaxpr, Vec<Array>) {
    let mut xs = operands(DType::I32);
    xs[0] = seeded(&[24, 2], 1);
    xs[1] = seeded(&[24, 2], 2);
    (program(&avals(&xs)).unwrap(), xs)
}

fn seeded(shape: &[i64], seed: u64) -> Array {
    let n: i64 = shape.iter().product();
    let values: Vec<f64> = (0..n as u64)
        .map(|i| ((i * 37 + seed * 11) % 29) as f64 / 29.0 - 0.4)
        .collect();
    array(DType::F64, shape, &values)
}

fn dot(a: &Array, b: &Array) -> f64 {
    a.to_vec().iter().zip(b.to_vec()).map(|(x, y)| x * y).sum()
}

#[test]
fn jvp_matches_finite_differences_and_vjp_matches_jvp() {
    let (f, x) = differentiable();
    tessera_ir::verify(&f).unwrap();
    let zeros = |a: &Array| array(a.dtype(), a.dims(), &vec![0.0; a.to_vec().len()]);
    let mut t: Vec<Array> = x.iter().map(zeros).collect();
    t[0] = seeded(&[24, 2], 3);
    t[1] = seeded(&[24, 2], 4);
    let j = jvp(&f).unwrap();
    tessera_ir::verify(&j).unwrap();
    let args: Vec<Array> = x.iter().chain(&t).cloned().collect();
    let out = eval_closed(&j, &args).unwrap();
    let eps = 1e-6;
    let shifted = |s: f64| -> Vec<Array> {
        x.iter()
            .zip(&t)
            .map(|(x, t)| {
                let v: Vec<f64> = x
                    .to_vec()
                    .iter()
                    .zip(t.to_vec())
                    .map(|(a, b)| a + s * b)
                    .collect();
                array(x.dtype(), x.dims(), &v)
            })
            .collect()
    };
    let plus = eval_closed(&f, &shifted(eps)).unwrap();
    let minus = eval_closed(&f, &shifted(-eps)).unwrap();
    for (k, ((p, m), d)) in plus[0]
        .to_vec()
        .iter()
        .zip(minus[0].to_vec())
        .zip(out[1].to_vec())
        .enumerate()
    {
        let fd = (p - m) / (2.0 * eps);
        assert!(
            (fd - d).abs() < 1e-6,
            "element {k}: jvp {d}, finite difference {fd}"
        );
    }
    // <ct, J t> == <J^T ct, t>
    let v = vjp(&f).unwrap();
    tessera_ir::verify(&v).unwrap();
    let ct = seeded(&[24, 2], 5);
    let mut args = x.clone();
    args.push(ct.clone());
    let grads = eval_closed(&v, &args).unwrap();
    let lhs = dot(&grads[0], &t[0]) + dot(&grads[1], &t[1]);
    let rhs = dot(&ct, &out[1]);
    assert!(
        (lhs - rhs).abs() < 1e-9 * (1.0 + rhs.abs()),
        "{lhs} vs {rhs}"
    );
}

#[test]
fn vmap_with_batched_offsets_matches_a_loop() {
    // Three elements: the 4-device case, its offsets reversed within each device's operand
    // rows, and the output's rows scaled; every operand batched along dimension 0.
    let base = operands(DType::I32);
    let element = |e: usize| -> Vec<Array> {
        let mut xs = base.clone();
        let scale = 1.0 + e as f64;
        xs[0] = array(
            DType::F32,
            &[24, 2],
            &xs[0].to_vec().iter().map(|v| v * scale).collect::<Vec<_>>(),
        );
        if e == 1 {
            // Each device reads its slices from the end of its rows instead (same sizes).
            let mut io = [[0i64; 4]; 4];
            for d in 0..4 {
                let mut end = 6;
                for r in 0..4 {
                    end -= SEND[d][r];
                    io[d][r] = end;
                }
            }
            xs[2] = array(DType::I32, &[16], &flat(&io));
        }
        xs
    };
    let elements: Vec<Vec<Array>> = (0..3).map(element).collect();
    let stacked: Vec<Array> = (0..6)
        .map(|k| {
            let a = &elements[0][k];
            let mut shape = vec![3];
            shape.extend_from_slice(a.dims());
            let values: Vec<f64> = elements.iter().flat_map(|xs| xs[k].to_vec()).collect();
            array(a.dtype(), &shape, &values)
        })
        .collect();
    let f = program(&avals(&base)).unwrap();
    let batched = vmap(&f, &[Some(0); 6], &[0], 3).unwrap();
    tessera_ir::verify(&batched).unwrap();
    let got = eval_closed(&batched, &stacked).unwrap()[0].to_vec();
    let want: Vec<f64> = elements
        .iter()
        .flat_map(|xs| eval_closed(&f, xs).unwrap()[0].to_vec())
        .collect();
    assert_eq!(got, want);
    // Only the data batched, the offsets shared.
    let mut in_axes = vec![None; 6];
    in_axes[0] = Some(0);
    let batched = vmap(&f, &in_axes, &[0], 3).unwrap();
    let mut args = base[1..].to_vec();
    args.insert(0, stacked[0].clone());
    let got = eval_closed(&batched, &args).unwrap()[0].to_vec();
    let want: Vec<f64> = (0..3)
        .flat_map(|e| {
            let mut xs = base.clone();
            xs[0] = elements[e][0].clone();
            eval_closed(&f, &xs).unwrap()[0].to_vec()
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn over_the_vmapped_axis_it_is_refused_naming_the_axis() {
    let xs = operands(DType::I32);
    let types: Vec<ShapedArray> = avals(&xs)
        .iter()
        .map(|a| {
            let mut shape = vec![4];
            shape.extend(a.shape.iter().map(|d| d / 4));
            ShapedArray::new(a.dtype, &shape)
        })
        .collect();
    let err = trace(&types, |a| {
        let refs: Vec<&Tensor> = a.iter().collect();
        vmap_named_call("b", &[Some(0); 6], &[0], &refs, |s| {
            vec![s[0].ragged_all_to_all(&s[1], &s[2], &s[3], &s[4], &s[5], "b")]
        })
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("ragged_all_to_all over the vmapped axis 'b' is not supported"),
        "{err}"
    );
}

#[test]
fn prints_as_jax_does_and_parses_back() {
    let xs = operands(DType::I32);
    let p = program(&avals(&xs)).unwrap();
    let text = print_closed(&p, 0);
    // JAX's parameters, in its order (the printer breaks the line inside shard_map's body).
    let squeezed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        squeezed.contains("ragged_all_to_all[ axis_index_groups=None axis_name=(x,) ] h i j k l m"),
        "{text}"
    );
    let parsed = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    tessera_ir::verify(&parsed).unwrap();
    assert_eq!(print_closed(&parsed, 0), text);
    assert_eq!(
        eval_closed(&parsed, &xs).unwrap(),
        eval_closed(&p, &xs).unwrap()
    );
    // A group-wise exchange, parsed from JAX's spelling, runs within each group.
    let grouped = text.replace(
        "axis_index_groups=None",
        "axis_index_groups=((0, 1), (2, 3))",
    );
    let parsed = parse_closed(&grouped).unwrap_or_else(|e| panic!("{e}\n{grouped}"));
    let printed = print_closed(&parsed, 0);
    assert!(
        printed.contains("axis_index_groups=((0, 1), (2, 3))"),
        "{printed}"
    );
    assert_eq!(parse_closed(&printed).unwrap(), parsed);
}

#[test]
fn within_index_groups_each_group_exchanges_on_its_own() {
    // Groups (0, 1) and (2, 3), two one-row slices for each member: slice i goes to member
    // i / 2, which writes the rows from member j at rows 2j and 2j + 1.
    let i32s = |v: &[f64]| array(DType::I32, &[16], v);
    let per_device = |d: &[f64; 4]| -> Vec<f64> { d.iter().cycle().take(16).copied().collect() };
    let xs = vec![
        array(
            DType::F32,
            &[16],
            &(0..16).map(f64::from).collect::<Vec<_>>(),
        ),
        array(DType::F32, &[16], &[-1.; 16]),
        i32s(&per_device(&[0., 1., 2., 3.])),
        i32s(&[1.; 16]),
        i32s(&[
            0., 1., 0., 1., 2., 3., 2., 3., 0., 1., 0., 1., 2., 3., 2., 3.,
        ]),
        i32s(&[1.; 16]),
    ];
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let specs = vec![spec("P('x')"); 6];
    let groups = [vec![0, 1], vec![2, 3]];
    let p = shard_map_program(&mesh, &specs, &[spec("P('x')")], &avals(&xs), |a| {
        let index = [&a[2], &a[3], &a[4], &a[5]];
        vec![a[0].ragged_all_to_all_over(&a[1], index, &["x"], Some(&groups))]
    })
    .unwrap();
    let got = eval_closed(&p, &xs).unwrap();
    let want = [
        0., 1., 4., 5., 2., 3., 6., 7., 8., 9., 12., 13., 10., 11., 14., 15.,
    ];
    assert_eq!(got[0].to_vec(), want);
}
