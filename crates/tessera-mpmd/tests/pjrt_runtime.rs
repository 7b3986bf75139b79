//! The runtime on PJRT: four stages, each an SPMD program over its group's two devices, values
//! copied device to device between groups, two microbatches in flight.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use tessera_mpmd::MpmdMesh;

use tessera_mpmd::runtime::{
    DeviceCopyTransport, OutputLayout, PjrtExecutor, Plan, Program, RunOptions, TaskSpec, run,
};
use tessera_pjrt::{Array, Client, ElementType, HostArray};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

/// `x * 2 + 1` on a `[4]` vector split over the group's `data` axis.
fn stage_module(mesh: &Mesh, spec: &PartitionSpec) -> String {
    let hlo = NamedSharding::new(mesh, spec.clone())
        .unwrap()
        .to_hlo_sharding(1)
        .unwrap()
        .to_string();
    format!(
        r#"module @stage attributes {{mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func public @main(%x: tensor<4xf32> {{mhlo.sharding = "{hlo}"}}) -> (tensor<4xf32> {{mhlo.sharding = "{hlo}"}}) {{
    %two = stablehlo.constant dense<2.0> : tensor<4xf32>
    %one = stablehlo.constant dense<1.0> : tensor<4xf32>
    %0 = stablehlo.multiply %x, %two : tensor<4xf32>
    %1 = stablehlo.add %0, %one : tensor<4xf32>
    return %1 : tensor<4xf32>
  }}
}}"#
    )
}

#[test]
fn four_stage_pipeline_runs_on_eight_cpu_devices() {
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    let spec = PartitionSpec::parse("P('data')").unwrap();
    let text = stage_module(mesh.lowering_mesh(), &spec);
    let mut executor = PjrtExecutor::new(&client, &mesh);
    let layout = OutputLayout {
        shape: vec![4],
        ty: ElementType::F32,
        spec: spec.clone(),
    };
    let programs: Vec<usize> = (0..4)
        .map(|g| {
            executor
                .compile(Program::gspmd(text.as_bytes()), g, vec![layout.clone()])
                .unwrap()
        })
        .collect();
    // Value ids: microbatch m enters stage s as 10*s + m; stage s produces 10*(s+1) + m.
    let mut tasks = Vec::new();
    let mut order = vec![Vec::new(); 4];
    for s in 0..4 {
        for m in 0..2 {
            order[s].push(tasks.len());
            tasks.push(TaskSpec {
                name: format!("fwd s{s} mb{m}"),
                group: s,
                inputs: vec![10 * s + m],
                outputs: vec![10 * (s + 1) + m],
                payload: programs[s],
            });
        }
    }
    let plan = Plan {
        tasks,
        order,
        results: vec![(40, 3), (41, 3)],
    };
    let group0 = NamedSharding::new(mesh.group(0).unwrap(), spec).unwrap();
    let inputs: Vec<HostArray> = (0..2)
        .map(|m| HostArray::from_slice(&[4], &[m as f32, 1., 2., 3.]).unwrap())
        .collect();
    let initial = inputs
        .iter()
        .enumerate()
        .map(|(m, host)| (m, 0, Array::device_put(&client, host, &group0).unwrap()))
        .collect();
    let out = run(
        Arc::new(plan),
        initial,
        Arc::new(executor),
        Arc::new(DeviceCopyTransport::new(&mesh)),
        &RunOptions::default(),
    )
    .unwrap();
    for (m, result) in out.results.iter().enumerate() {
        // Four times x -> 2x + 1 is 16x + 15.
        let expected: Vec<f32> = inputs[m]
            .to_typed::<f32>()
            .unwrap()
            .iter()
            .map(|x| 16.0 * x + 15.0)
            .collect();
        assert_eq!(
            result.to_host().unwrap().to_typed::<f32>().unwrap(),
            expected
        );
        let devices: Vec<i32> = result
            .addressable_shards()
            .unwrap()
            .iter()
            .map(|s| s.device)
            .collect();
        assert_eq!(devices, [6, 7], "the last stage's output lives on group 3");
    }
    assert_eq!(out.timings.group_orders(4)[2], ["fwd s2 mb0", "fwd s2 mb1"]);
}

#[test]
fn a_donated_input_is_consumed_by_the_program() {
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    let spec = PartitionSpec::parse("P('data')").unwrap();
    let text = stage_module(mesh.lowering_mesh(), &spec).replace(
        "%x: tensor<4xf32> {mhlo.sharding",
        "%x: tensor<4xf32> {tf.aliasing_output = 0 : i32, mhlo.sharding",
    );
    assert!(text.contains("tf.aliasing_output"));
    let mut executor = PjrtExecutor::new(&client, &mesh);
    let layout = OutputLayout {
        shape: vec![4],
        ty: ElementType::F32,
        spec: spec.clone(),
    };
    let program = executor
        .compile_donating(Program::gspmd(text.as_bytes()), 0, vec![layout], vec![0])
        .unwrap();
    let sharding = NamedSharding::new(mesh.group(0).unwrap(), spec).unwrap();
    let host = HostArray::from_slice(&[4], &[0f32, 1., 2., 3.]).unwrap();
    let input = Array::device_put(&client, &host, &sharding).unwrap();
    let out = executor.execute(program, &[&input]).unwrap();
    assert_eq!(
        out[0].to_host().unwrap().to_typed::<f32>().unwrap(),
        [1., 3., 5., 7.]
    );
    let err = input
        .to_host()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("deleted or donated"), "{err}");
}

#[test]
fn the_device_copy_transport_sends_without_waiting_and_reports_a_failed_copy_to_the_receiver() {
    use tessera_mpmd::runtime::Transport;
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    let spec = PartitionSpec::parse("P('data')").unwrap();
    let sharding = NamedSharding::new(mesh.group(0).unwrap(), spec).unwrap();
    let host = HostArray::from_slice(&[4], &[0f32, 1., 2., 3.]).unwrap();
    let value = Array::device_put(&client, &host, &sharding).unwrap();
    let transport = DeviceCopyTransport::new(&mesh);
    let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(30);
    transport.send(7, &value, 0, 3).unwrap();
    let copy = transport.recv(7, 3, deadline()).unwrap().unwrap();
    assert_eq!(
        copy.to_host().unwrap().to_typed::<f32>().unwrap(),
        [0., 1., 2., 3.]
    );
    let devices: Vec<i32> = copy
        .addressable_shards()
        .unwrap()
        .iter()
        .map(|s| s.device)
        .collect();
    assert_eq!(devices, [6, 7]);
    // A group the mesh does not have: the send is queued, the receiver gets the copy's error.
    transport.send(8, &value, 0, 9).unwrap();
    let err = transport.recv(8, 9, deadline()).unwrap_err().to_string();
    assert!(!err.is_empty());
    // Nothing arrives for a value never sent: the deadline passes.
    let soon = std::time::Instant::now() + std::time::Duration::from_millis(20);
    assert!(transport.recv(9, 3, soon).unwrap().is_none());
}
