//! Modules built by tessera-stablehlo's emitter compile and run on the PJRT CPU plugin, from text
//! and from MLIR bytecode, SPMD over eight devices, annotated for Shardy and for GSPMD.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{Buffer, Client, CompileOptions, HostArray};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::{
    ArgSpec, EmittedModule, ModuleEmitter, Partitioner, ResultSpec, new_context,
};

/// `sum(x * x)` of an 8-vector sharded over 8 devices, returned replicated.
fn sum_of_squares(partitioner: Partitioner) -> EmittedModule {
    let context = new_context();
    let emitter = ModuleEmitter::new(&context, "sum_of_squares", 8, 1, partitioner).unwrap();
    let mesh = Mesh::auto(&[("x", 8)]).unwrap();
    let sharding = |spec: &str| NamedSharding::new(&mesh, PartitionSpec::parse(spec).unwrap());
    let args = [ArgSpec::new("tensor<8xf32>").sharded(sharding("P('x')").unwrap())];
    let results = [ResultSpec::new("tensor<f32>").sharded(sharding("P()").unwrap())];
    emitter
        .add_function("main", &args, &results, true, |body, params| {
            let sq = body.op(
                "stablehlo.multiply",
                &[params[0], params[0]],
                &["tensor<8xf32>"],
                &[],
            )?;
            let zero = body.op(
                "stablehlo.constant",
                &[],
                &["tensor<f32>"],
                &[("value", "dense<0.0> : tensor<f32>".into())],
            )?;
            let add = body.region(
                &["tensor<f32>", "tensor<f32>"],
                "stablehlo.return",
                |inner, xs| inner.op("stablehlo.add", xs, &["tensor<f32>"], &[]),
            )?;
            body.op_with_regions(
                "stablehlo.reduce",
                &[sq[0], zero[0]],
                &["tensor<f32>"],
                &[("dimensions", "array<i64: 0>".into())],
                vec![add],
            )
        })
        .unwrap();
    emitter.finish().unwrap()
}

fn run(client: &Client, module: &[u8], partitioner: Partitioner) -> Vec<f32> {
    let devices: Vec<i64> = (0..8).collect();
    let options = CompileOptions::spmd(&devices).with_shardy(partitioner.is_shardy());
    let exe = client.compile(module, &options).unwrap();
    let shards: Vec<Buffer> = (0..8)
        .map(|d| {
            Buffer::from_host_to(
                client,
                &HostArray::from_slice(&[1], &[d as f32 + 1.0]).unwrap(),
                d,
            )
            .unwrap()
        })
        .collect();
    let args: Vec<Vec<&Buffer>> = shards.iter().map(|b| vec![b]).collect();
    exe.execute(&args)
        .unwrap()
        .iter()
        .map(|outs| outs[0].to_host().unwrap().to_typed::<f32>().unwrap()[0])
        .collect()
}

#[test]
fn emitted_text_and_bytecode_run_spmd_on_eight_cpu_devices() {
    let client = Client::cpu(8).unwrap();
    let expected: f32 = (1..=8).map(|i| (i * i) as f32).sum();
    for partitioner in Partitioner::ALL {
        let module = sum_of_squares(partitioner);
        assert_eq!(module.partitioner, partitioner);
        assert_eq!(
            module.text.contains("sdy.mesh"),
            partitioner.is_shardy(),
            "{}",
            module.text
        );
        let text = run(&client, module.text.as_bytes(), partitioner);
        assert_eq!(text, vec![expected; 8], "{partitioner}");
        let bytecode = run(&client, &module.bytecode, partitioner);
        assert_eq!(bytecode, vec![expected; 8], "{partitioner}");
    }
}
