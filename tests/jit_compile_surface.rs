//! `jit`'s compile surface. `keep_unused`: an argument the program never reads is left out of the
//! compiled module (as JAX does) while a call still takes and checks it; `keep_unused(true)` keeps
//! it; both give the interpreter's values. The trivial-program fast path: a program whose results
//! are its arguments, laid out alike, runs without an XLA compile (counted by
//! `tessera_pjrt::compile_counts`) and returns those arrays; another layout compiles. Compiler
//! options reach XLA: `xla_dump_to` makes it write the compiled module there, and a name XLA
//! does not know is refused, naming it. One lowering, made with no client, compiles on both CPU
//! plugins (JAX's `lowering_platform`). `Jit::debug_nans` refuses a NaN result, naming the
//! equation that made it (JAX's `jax_debug_nans`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::Jit;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

/// `(a, b, c) -> a * 2 + c`: `b` is never read.
fn program() -> ClosedJaxpr {
    let f32 = ShapedArray::new(DType::F32, &[8]);
    trace(&[f32.clone(), f32.clone(), f32], |x| {
        vec![&(&x[0] * 2.0) + &x[2]]
    })
    .unwrap()
}

fn values(seed: f64) -> Array {
    Array::new(
        DType::F32,
        &[8],
        (0..8).map(|i| (i as f64 * 0.7 + seed).cos()).collect(),
    )
    .unwrap()
}

/// The number of arguments of the module's entry function.
fn entry_arguments(text: &str) -> usize {
    let entry = text
        .lines()
        .find(|l| l.contains("func.func public @main"))
        .unwrap_or_else(|| panic!("no entry in {text}"));
    let params = entry.split("->").next().unwrap();
    params.matches("%arg").count()
}

/// Held by every test of this file: the trivial case counts the process's compiles, so no
/// other test may compile meanwhile.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One test, so that no other test of this process compiles while the trivial case counts.
#[test]
fn keep_unused_and_the_trivial_fast_path() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    unused_arguments_are_pruned_unless_kept();
    a_program_returning_its_arguments_runs_without_compiling();
    compiler_options_reach_xla();
}

fn unused_arguments_are_pruned_unless_kept() {
    let client = Client::cpu(2).unwrap();
    let mesh = Mesh::auto(&[("data", 2)]).unwrap();
    let rows = NamedSharding::new(&mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    let jit = Jit::new(program(), vec![rows.clone(); 3], vec![rows.clone()]).unwrap();
    let host = [values(0.1), values(1.3), values(2.9)];
    let want = eval_closed(&program(), &host).unwrap();
    let args: Vec<DeviceArray> = host
        .iter()
        .map(|a| DeviceArray::device_put(&client, a, &rows).unwrap())
        .collect();
    let refs: Vec<&DeviceArray> = args.iter().collect();

    for (keep, kept, arity) in [(false, vec![0, 2], 2), (true, vec![0, 1, 2], 3)] {
        let lowered = jit.clone().keep_unused(keep).lower().unwrap();
        assert_eq!(lowered.kept_arguments(), kept, "keep_unused {keep}");
        assert_eq!(
            entry_arguments(lowered.as_text()),
            arity,
            "keep_unused {keep}: {}",
            lowered.as_text()
        );
        let compiled = lowered.compile(&client).unwrap();
        let got = compiled.call(&refs).unwrap()[0].to_host().unwrap();
        assert_eq!(got.to_vec(), want[0].to_vec(), "keep_unused {keep}");
        // The pruned argument is still an argument: the call takes three and checks each.
        let err = compiled.call(&refs[..2]).unwrap_err().to_string();
        assert!(err.contains("takes 3 arguments"), "{err}");
        let other = DeviceArray::device_put(
            &client,
            &Array::new(DType::F32, &[4], vec![0.0; 4]).unwrap(),
            &rows,
        )
        .unwrap();
        let err = compiled
            .call(&[refs[0], &other, refs[2]])
            .unwrap_err()
            .to_string();
        assert!(err.contains("argument 1"), "{err}");
    }
}

fn a_program_returning_its_arguments_runs_without_compiling() {
    let client = Client::cpu(2).unwrap();
    let mesh = Mesh::auto(&[("data", 2)]).unwrap();
    let rows = NamedSharding::new(&mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    let replicated = NamedSharding::new(&mesh, PartitionSpec::replicated()).unwrap();
    let f32 = ShapedArray::new(DType::F32, &[8]);
    let swap = trace(&[f32.clone(), f32], |x| vec![x[1].clone(), x[0].clone()]).unwrap();
    assert!(swap.jaxpr.eqns.is_empty(), "{swap:?}");
    let (a, b) = (values(0.4), values(5.0));
    let args = [
        DeviceArray::device_put(&client, &a, &rows).unwrap(),
        DeviceArray::device_put(&client, &b, &rows).unwrap(),
    ];
    let refs: Vec<&DeviceArray> = args.iter().collect();

    let before = tessera_pjrt::compile_counts();
    let jit = Jit::new(swap.clone(), vec![rows.clone(); 2], vec![rows.clone(); 2]).unwrap();
    let compiled = jit.lower().unwrap().compile(&client).unwrap();
    assert!(compiled.is_trivial());
    let out = compiled.call(&refs).unwrap();
    assert_eq!(
        tessera_pjrt::compile_counts(),
        before,
        "nothing compiled or loaded"
    );
    assert_eq!(out[0].to_host().unwrap().to_vec(), b.to_vec());
    assert_eq!(out[1].to_host().unwrap().to_vec(), a.to_vec());
    assert_eq!(
        compiled.compiled_output_shardings().unwrap(),
        vec![rows.clone(); 2]
    );
    assert!(
        compiled.cost_analysis().is_err(),
        "no executable to analyse"
    );
    // Arguments are still checked.
    assert!(compiled.call(&refs[..1]).is_err());

    // A result laid out otherwise than its argument needs a program that moves it.
    let reshard = Jit::new(swap, vec![rows.clone(); 2], vec![replicated.clone(), rows])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    assert!(!reshard.is_trivial());
    let out = reshard.call(&refs).unwrap();
    assert_eq!(out[0].sharding(), &replicated);
    assert_eq!(out[0].to_host().unwrap().to_vec(), b.to_vec());
}

fn compiler_options_reach_xla() {
    use tessera_pjrt::OptionOverride;
    let client = Client::cpu(2).unwrap();
    let mesh = Mesh::auto(&[("data", 2)]).unwrap();
    let rows = NamedSharding::new(&mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    let jit = Jit::new(program(), vec![rows.clone(); 3], vec![rows]).unwrap();
    let dump = std::env::temp_dir().join(format!("tessera-xla-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dump);
    // The folder is part of the compile options, so of the cache key: this compiles.
    jit.clone()
        .with_compiler_option(
            "xla_dump_to",
            OptionOverride::String(dump.to_string_lossy().into_owned()),
        )
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let files = std::fs::read_dir(&dump)
        .map(|d| d.count())
        .unwrap_or_else(|e| panic!("XLA wrote nothing to {}: {e}", dump.display()));
    assert!(files > 0, "XLA wrote nothing to {}", dump.display());
    std::fs::remove_dir_all(&dump).unwrap();
    let err = jit
        .with_compiler_option("xla_no_such_option", OptionOverride::Bool(true))
        .lower()
        .unwrap()
        .compile(&client)
        .err()
        .expect("an unknown compiler option is refused")
        .to_string();
    assert!(err.contains("xla_no_such_option"), "{err}");
}

#[test]
fn unspecified_inputs_take_the_layout_of_the_arrays_passed() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use tessera::jit::JitCache;
    let client = Client::cpu(2).unwrap();
    let mesh = Mesh::auto(&[("data", 2)]).unwrap();
    let sharding = |spec: &str| NamedSharding::new(&mesh, PartitionSpec::parse(spec).unwrap());
    let (rows, whole) = (sharding("P('data')").unwrap(), sharding("P()").unwrap());
    let jit = Jit::new(program(), vec![rows.clone(); 3], vec![rows.clone()])
        .unwrap()
        .with_unspecified_inputs(&[0, 2])
        .unwrap();
    // Lowered as it is, an unspecified input is replicated (JAX's default).
    assert!(jit.in_shardings()[0].is_fully_replicated());
    assert!(jit.in_shardings()[2].is_fully_replicated());
    let host = [values(0.3), values(1.1), values(2.5)];
    let want = eval_closed(&program(), &host).unwrap()[0].to_vec();
    let put = |a: &Array, s: &NamedSharding| DeviceArray::device_put(&client, a, s).unwrap();
    let cache = JitCache::default();
    let run = |layouts: [&NamedSharding; 3]| -> Vec<f64> {
        let args: Vec<DeviceArray> = host.iter().zip(layouts).map(|(a, s)| put(a, s)).collect();
        let refs: Vec<&DeviceArray> = args.iter().collect();
        let out = cache.call(&client, &jit, &refs).unwrap();
        assert_eq!(out[0].sharding().spec(), rows.spec());
        out[0].to_host().unwrap().to_vec()
    };
    assert_eq!(run([&rows, &rows, &rows]), want);
    assert_eq!(cache.len(), 1);
    assert_eq!(run([&rows, &rows, &rows]), want);
    assert_eq!(cache.len(), 1, "the same layouts compile once");
    assert_eq!(run([&whole, &rows, &rows]), want);
    assert_eq!(
        cache.len(),
        2,
        "another layout of an unspecified input compiles again"
    );
    // A specified input is still checked: passed in another layout it is refused.
    let args: Vec<DeviceArray> = host.iter().map(|a| put(a, &whole)).collect();
    let refs: Vec<&DeviceArray> = args.iter().collect();
    let err = cache
        .call(&client, &jit, &refs)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("argument 1"), "{err}");
    // Misuse is named.
    let err = jit
        .clone()
        .with_unspecified_inputs(&[7])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("argument 7"), "{err}");
}

/// JAX's `lowering_platform`: Tessera's lowering has no platform-specific rules and needs no
/// client, so one `Lowered`, made before any client exists, compiles on any plugin: here on
/// both CPU plugins of `cargo xtask setup` (XLA of June and of November 2025), each giving the
/// interpreter's values from the same module text.
#[test]
fn one_lowering_compiles_on_every_plugin() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mesh = Mesh::auto(&[("data", 2)]).unwrap();
    let rows = NamedSharding::new(&mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    let lowered = Jit::new(program(), vec![rows.clone(); 3], vec![rows.clone()])
        .unwrap()
        .lower()
        .unwrap();
    let host = [values(0.2), values(0.9), values(1.7)];
    let want = eval_closed(&program(), &host).unwrap()[0].to_vec();
    let mut platforms = Vec::new();
    for plugin in ["zml-cpu", "xla-cpu-pjrt"] {
        let client = Client::open(Some(plugin), 2)
            .unwrap_or_else(|e| panic!("{plugin} (installed by `cargo xtask setup`): {e}"));
        platforms.push(client.plugin().path().display().to_string());
        let compiled = lowered.compile(&client).unwrap();
        assert_eq!(compiled.as_text(), lowered.as_text(), "{plugin}");
        let args: Vec<DeviceArray> = host
            .iter()
            .map(|a| DeviceArray::device_put(&client, a, &rows).unwrap())
            .collect();
        let refs: Vec<&DeviceArray> = args.iter().collect();
        let got = compiled.call(&refs).unwrap()[0].to_host().unwrap().to_vec();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{plugin}: {g} vs {w}");
        }
    }
    assert_ne!(platforms[0], platforms[1], "two different plugin libraries");
}

/// JAX's `jax_debug_nans`: a `Jit::debug_nans(true)` call whose float result holds a NaN fails
/// naming the result and the equation that first made one (found on the interpreter, as JAX
/// re-runs de-optimized); without it the NaN comes back; NaN-free calls pass; the `JitCache`
/// keeps the checking and the plain program apart.
#[test]
fn debug_nans_names_the_result_and_the_equation_that_made_the_nan() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use tessera::jit::{JitCache, JitError};
    let f32 = ShapedArray::new(DType::F32, &[8]);
    // (a) -> (a * 2, log(a - 1)): NaN where a < 1.
    let program = trace(&[f32], |a| vec![&a[0] * 2.0, (&a[0] - 1.0).log()]).unwrap();
    let log_at = program
        .jaxpr
        .eqns
        .iter()
        .position(|e| e.prim.name() == "log")
        .unwrap();
    let client = Client::cpu(2).unwrap();
    let mesh = Mesh::auto(&[("data", 2)]).unwrap();
    let rows = NamedSharding::new(&mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    let plain = Jit::new(program.clone(), vec![rows.clone()], vec![rows.clone(); 2]).unwrap();
    let checked = plain.clone().debug_nans(true);
    let put = |values: Vec<f64>| {
        let host = Array::new(DType::F32, &[8], values).unwrap();
        DeviceArray::device_put(&client, &host, &rows).unwrap()
    };
    let some_below_one = put((0..8).map(|i| f64::from(i) * 0.5).collect());
    let all_above_one = put((0..8).map(|i| 2.0 + f64::from(i)).collect());
    let cache = JitCache::default();

    let out = cache.call(&client, &plain, &[&some_below_one]).unwrap();
    let logs = out[1].to_host().unwrap().to_vec();
    assert!(logs.iter().any(|v| v.is_nan()), "{logs:?}");

    let err = cache
        .call(&client, &checked, &[&some_below_one])
        .expect_err("a NaN result is refused under debug_nans");
    match &err {
        JitError::Nan { result, equation } => {
            assert_eq!(*result, 1, "{err}");
            assert_eq!(
                equation.as_deref(),
                Some(format!("equation {log_at} (log)").as_str()),
                "{err}"
            );
        }
        other => panic!("not a NaN error: {other}"),
    }
    assert!(err.to_string().contains("debug_nans"), "{err}");
    assert_eq!(cache.len(), 2, "the checking program is cached apart");

    let out = cache.call(&client, &checked, &[&all_above_one]).unwrap();
    let want = eval_closed(&program, &[from_values(&all_above_one)]).unwrap();
    for (got, want) in out.iter().zip(&want) {
        for (g, w) in got.to_host().unwrap().to_vec().iter().zip(want.to_vec()) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
    }
}

#[test]
fn debug_infs_names_the_result_and_the_equation_that_made_the_infinity() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use tessera::jit::{JitCache, JitError};
    let f32 = ShapedArray::new(DType::F32, &[8]);
    // (a) -> (a + 1, exp(a * 100)): infinite where a * 100 overflows f32 (a > ~0.887).
    let program = trace(&[f32], |a| vec![&a[0] + 1.0, (&a[0] * 100.0).exp()]).unwrap();
    let exp_at = program
        .jaxpr
        .eqns
        .iter()
        .position(|e| e.prim.name() == "exp")
        .unwrap();
    let client = Client::cpu(2).unwrap();
    let mesh = Mesh::auto(&[("data", 2)]).unwrap();
    let rows = NamedSharding::new(&mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    let plain = Jit::new(program.clone(), vec![rows.clone()], vec![rows.clone(); 2]).unwrap();
    let put = |values: Vec<f64>| {
        let host = Array::new(DType::F32, &[8], values).unwrap();
        DeviceArray::device_put(&client, &host, &rows).unwrap()
    };
    let some_large = put((0..8).map(|i| f64::from(i) * 0.25).collect());
    let all_small = put((0..8).map(|i| f64::from(i) * 0.1).collect());
    let cache = JitCache::default();

    // NaN checks alone let infinities through, as JAX's debug_nans does.
    let nans_only = plain.clone().debug_nans(true);
    let out = cache.call(&client, &nans_only, &[&some_large]).unwrap();
    let exps = out[1].to_host().unwrap().to_vec();
    assert!(exps.iter().any(|v| v.is_infinite()), "{exps:?}");

    let checked = plain.clone().debug_infs(true);
    let err = cache
        .call(&client, &checked, &[&some_large])
        .expect_err("an infinite result is refused under debug_infs");
    match &err {
        JitError::Inf { result, equation } => {
            assert_eq!(*result, 1, "{err}");
            assert_eq!(
                equation.as_deref(),
                Some(format!("equation {exp_at} (exp)").as_str()),
                "{err}"
            );
        }
        other => panic!("not an infinity error: {other}"),
    }
    assert!(err.to_string().contains("debug_infs"), "{err}");
    assert_eq!(cache.len(), 2, "the checking program is cached apart");

    let out = cache.call(&client, &checked, &[&all_small]).unwrap();
    let want = eval_closed(&program, &[from_values(&all_small)]).unwrap();
    for (got, want) in out.iter().zip(&want) {
        for (g, w) in got.to_host().unwrap().to_vec().iter().zip(want.to_vec()) {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}

/// The host values of a device array of f32.
fn from_values(array: &DeviceArray) -> Array {
    tessera::jit::from_host(&array.to_host().unwrap(), DType::F32).unwrap()
}
