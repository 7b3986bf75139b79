//! Compiles hand-written StableHLO + Shardy modules with `use_shardy` on 8 CPU devices: the
//! recipe Tessera's lowering emits (an `sdy.mesh` symbol, `sdy.sharding` argument and result
//! attributes, `sdy.manual_computation` for shard_map, `sdy.sharding_constraint`), in MLIR's
//! generic operation form, as Debian's MLIR (which has no `sdy` dialect) prints it. Checks the
//! values, and that XLA prints no GSPMD deprecation warning for a Shardy compile (it prints one
//! for every GSPMD compile).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{Buffer, Client, CompileOptions, HostArray, LoadedExecutable};

fn client() -> Client {
    Client::cpu(8).expect("the PJRT CPU plugin (run `cargo xtask setup`)")
}

/// The mesh `x=4, y=2` as Tessera emits it: a generic `sdy.mesh` operation.
const MESH: &str =
    r#"  "sdy.mesh"() {mesh = #sdy.mesh<["x"=4, "y"=2]>, sym_name = "mesh"} : () -> ()"#;

/// The sum of an `8x2` array whose rows are split over `x` and columns over `y`; the scalar
/// result is replicated, so the partitioner inserts the all-reduce.
fn sharded_sum() -> String {
    format!(
        r#"module @sharded_sum attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
{MESH}
  func.func public @main(%x: tensor<8x2xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{"y"}}]>}}) -> (tensor<f32> {{sdy.sharding = #sdy.sharding<@mesh, []>}}) {{
    %zero = "stablehlo.constant"() {{value = dense<0.0> : tensor<f32>}} : () -> tensor<f32>
    %0 = "stablehlo.reduce"(%x, %zero) ({{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }}) {{dimensions = array<i64: 0, 1>}} : (tensor<8x2xf32>, tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }}
}}"#
    )
}

/// `shard_map(lambda a: psum(a, 'x'), in_specs=P('x', 'y'), out_specs=P(None, 'y'))` as JAX
/// lowers it under Shardy, in generic form.
fn manual_psum() -> String {
    format!(
        r#"module @manual_psum attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
{MESH}
  func.func public @main(%x: tensor<8x2xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}}) -> (tensor<2x2xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}}) {{
    %0 = "sdy.manual_computation"(%x) ({{
    ^bb0(%block: tensor<2x1xf32>):
      %1 = "stablehlo.all_reduce"(%block) ({{
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%s) : (tensor<f32>) -> ()
      }}) {{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>, use_global_device_ids}} : (tensor<2x1xf32>) -> tensor<2x1xf32>
      "sdy.return"(%1) : (tensor<2x1xf32>) -> ()
    }}) {{in_shardings = #sdy.sharding_per_value<[<@mesh, [{{"x"}}, {{"y"}}]>]>, manual_axes = #sdy<manual_axes{{"x", "y"}}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{{}}, {{"y"}}]>]>}} : (tensor<8x2xf32>) -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }}
}}"#
    )
}

/// A replicated argument constrained to columns over `y`, plus one, returned replicated.
fn constrained() -> String {
    format!(
        r#"module @constrained attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
{MESH}
  func.func public @main(%x: tensor<8x2xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}}) -> (tensor<8x2xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}}) {{
    %0 = "sdy.sharding_constraint"(%x) {{sharding = #sdy.sharding<@mesh, [{{}}, {{"y"}}]>}} : (tensor<8x2xf32>) -> tensor<8x2xf32>
    %one = "stablehlo.constant"() {{value = dense<1.0> : tensor<8x2xf32>}} : () -> tensor<8x2xf32>
    %1 = "stablehlo.add"(%0, %one) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    return %1 : tensor<8x2xf32>
  }}
}}"#
    )
}

fn shardy(devices: &[i64]) -> CompileOptions {
    CompileOptions {
        use_shardy: true,
        ..CompileOptions::spmd(devices)
    }
}

/// `x[i][j] = 2 i + j`, as a row-major vector.
fn iota_8x2() -> Vec<f32> {
    (0..16).map(|v| v as f32).collect()
}

/// Runs `exe` with each device's block of the `8x2` array: partition `p = 2 ix + iy` holds rows
/// `2 ix..2 ix + 2` of column `iy` (`x` splits rows in 4, `y` columns in 2), or the whole array.
fn run(client: &Client, exe: &LoadedExecutable, sharded: bool) -> Vec<Vec<f32>> {
    let x = iota_8x2();
    let buffers: Vec<Buffer> = exe
        .device_ids()
        .iter()
        .enumerate()
        .map(|(p, &d)| {
            let host = if sharded {
                let (ix, iy) = (p / 2, p % 2);
                let block: Vec<f32> = (2 * ix..2 * ix + 2).map(|r| x[2 * r + iy]).collect();
                HostArray::from_slice(&[2, 1], &block).unwrap()
            } else {
                HostArray::from_slice(&[8, 2], &x).unwrap()
            };
            Buffer::from_host_to(client, &host, d).unwrap()
        })
        .collect();
    let args: Vec<Vec<&Buffer>> = buffers.iter().map(|b| vec![b]).collect();
    exe.execute(&args)
        .unwrap()
        .iter()
        .map(|outs| outs[0].to_host().unwrap().to_typed::<f32>().unwrap())
        .collect()
}

#[test]
fn a_shardy_module_sums_a_sharded_array_on_eight_devices() {
    let client = client();
    let devices: Vec<i64> = (0..8).rev().collect();
    let exe = client
        .compile(sharded_sum().as_bytes(), &shardy(&devices))
        .unwrap();
    assert_eq!(exe.device_ids(), [7, 6, 5, 4, 3, 2, 1, 0]);
    let total: f32 = iota_8x2().iter().sum();
    assert_eq!(run(&client, &exe, true), vec![vec![total]; 8]);
}

#[test]
fn a_manual_computation_runs_its_collective_on_manual_blocks() {
    let client = client();
    let devices: Vec<i64> = (0..8).collect();
    let exe = client
        .compile(manual_psum().as_bytes(), &shardy(&devices))
        .unwrap();
    // Every device gets the whole (replicated) result: row r of the 2x2 result sums rows
    // r, r + 2, r + 4, r + 6 of x.
    let x = iota_8x2();
    let want: Vec<f32> = (0..2)
        .flat_map(|r| {
            let x = &x;
            (0..2).map(move |c| (0..4).map(|k| x[2 * (r + 2 * k) + c]).sum::<f32>())
        })
        .collect();
    assert_eq!(run(&client, &exe, false), vec![want; 8]);
}

#[test]
fn a_sharding_constraint_keeps_the_values() {
    let client = client();
    let devices: Vec<i64> = (0..8).collect();
    let exe = client
        .compile(constrained().as_bytes(), &shardy(&devices))
        .unwrap();
    let want: Vec<f32> = iota_8x2().iter().map(|v| v + 1.0).collect();
    assert_eq!(run(&client, &exe, false), vec![want; 8]);
}

/// Compiles in a child process (this test binary, running only `compile_child`) and returns
/// its stderr, where XLA's C++ logging goes.
fn child_stderr(partitioner: &str) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "compile_child",
            "--exact",
            "--nocapture",
            "--ignored",
            "--test-threads=1",
        ])
        .env("TESSERA_SHARDY_TEST_CHILD", partitioner)
        // XLA's warnings must print whatever level the caller set (`cargo xtask` sets 2).
        .env("TF_CPP_MIN_LOG_LEVEL", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child failed:\n{stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// Runs only as the child of [`shardy_compiles_print_no_gspmd_deprecation_warning`] (not a
/// test of its own: ignored, run with `--ignored` by its parent).
#[test]
#[ignore = "a child process of shardy_compiles_print_no_gspmd_deprecation_warning"]
fn compile_child() {
    let partitioner = std::env::var("TESSERA_SHARDY_TEST_CHILD")
        .expect("TESSERA_SHARDY_TEST_CHILD (run by its parent)");
    let client = client();
    let devices: Vec<i64> = (0..8).collect();
    let options = CompileOptions {
        use_shardy: partitioner == "shardy",
        ..CompileOptions::spmd(&devices)
    };
    let modules = if options.use_shardy {
        vec![sharded_sum(), manual_psum(), constrained()]
    } else {
        vec![GSPMD_SUM.to_string()]
    };
    for module in modules {
        client.compile(module.as_bytes(), &options).unwrap();
    }
    eprintln!("child compiled with {partitioner}");
}

/// The control: the same kind of sum with GSPMD's `mhlo.sharding`, compiled without Shardy.
const GSPMD_SUM: &str = r#"
module @sharded_sum attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"}) -> (tensor<f32> {mhlo.sharding = "{replicated}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}
"#;

#[test]
fn a_gspmd_compile_prints_the_deprecation_warning_the_shardy_test_looks_for() {
    let stderr = child_stderr("gspmd");
    assert!(stderr.contains("child compiled with gspmd"), "{stderr}");
    assert!(stderr.contains("GSPMD"), "{stderr}");
}

#[test]
fn shardy_compiles_print_no_gspmd_deprecation_warning() {
    let stderr = child_stderr("shardy");
    assert!(stderr.contains("child compiled with shardy"), "{stderr}");
    assert!(
        !stderr.contains("GSPMD") && !stderr.contains("falling back"),
        "{stderr}"
    );
}
