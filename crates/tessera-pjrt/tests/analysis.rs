//! XLA's cost and memory analyses of a compiled program, read through PJRT: a 64×32 by 32×16
//! matmul does 2·64·32·16 FLOPs and takes its arguments' and result's bytes. The default CPU
//! plugin (`zml-cpu`) does not implement the cost analysis and says so; `xla-cpu-pjrt` (and
//! XLA's GPU plugins) do.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{Client, CompileOptions, ErrorCode, LoadedExecutable, PjrtError};

const MATMUL: &str = r#"
module @matmul attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>) -> tensor<64x16xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
    return %0 : tensor<64x16xf32>
  }
}
"#;

fn matmul(plugin: &str) -> LoadedExecutable {
    let client = Client::open(Some(plugin), 1).expect("the PJRT CPU plugins (`cargo xtask setup`)");
    client
        .compile(MATMUL.as_bytes(), &CompileOptions::spmd(&[0]))
        .unwrap()
}

#[test]
fn a_matmul_reports_its_flops_and_bytes() {
    let cost = matmul("xla-cpu-pjrt").cost_analysis().unwrap();
    assert_eq!(cost.flops(), Some(2.0 * 64.0 * 32.0 * 16.0), "{cost:?}");
    let bytes = 4.0 * (64.0 * 32.0 + 32.0 * 16.0 + 64.0 * 16.0);
    assert_eq!(cost.bytes_accessed(), Some(bytes), "{cost:?}");
    let exe = matmul("zml-cpu");
    let memory = exe.memory_analysis().unwrap();
    assert_eq!(memory.argument_bytes, 4 * (64 * 32 + 32 * 16), "{memory:?}");
    assert_eq!(memory.output_bytes, 4 * 64 * 16, "{memory:?}");
    assert_eq!(memory.alias_bytes, 0, "{memory:?}");
    match exe.cost_analysis() {
        Err(PjrtError::Call { code, .. }) => assert_eq!(code, ErrorCode::Unimplemented),
        other => panic!("zml-cpu's cost analysis: {other:?}"),
    }
}

/// A program whose result is 4 TiB: on a CPU plugin its results are host memory, and running it
/// is refused before the plugin allocates them (the kernel would kill the process when the
/// pages are written), naming what needed the memory.
const HUGE: &str = r#"
module @huge attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<f32>) -> tensor<1048576x1048576xf32> {
    %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<1048576x1048576xf32>
    return %0 : tensor<1048576x1048576xf32>
  }
}
"#;

#[test]
fn a_cpu_program_whose_results_exceed_the_host_memory_is_refused_before_it_runs() {
    if tessera_ir::interp::memory::available_now().is_none() {
        return; // no /proc/meminfo: nothing to compare with (not Linux)
    }
    let client = Client::open(Some("zml-cpu"), 1).unwrap();
    let exe = client
        .compile(HUGE.as_bytes(), &CompileOptions::spmd(&[0]))
        .unwrap();
    let one = tessera_pjrt::HostArray::from_slice(&[], &[1f32]).unwrap();
    let scalar = tessera_pjrt::Buffer::from_host_to(&client, &one, 0).unwrap();
    match exe.execute(&[vec![&scalar]]) {
        Err(PjrtError::HostMemory { what, bytes, .. }) => {
            assert_eq!(bytes, 4 << 40);
            assert!(what.contains("running the program"), "{what}");
        }
        Err(other) => panic!("expected a host memory refusal, got {other}"),
        Ok(_) => panic!("a 4 TiB result ran"),
    }
}
