#![allow(missing_docs)] // criterion_group! generates undocumented functions.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

//! PJRT costs on the CPU plugin: compiling a small module, per-call dispatch of a tiny
//! executable on one and on eight devices, and host ↔ device transfers.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tessera_pjrt::{Buffer, Client, CompileOptions, HostArray};

const TINY: &str = r#"
module @tiny attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %a : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"#;

const TINY_SPMD: &str = r#"
module @tiny_spmd attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"}) -> (tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"}) {
    %0 = stablehlo.add %a, %a : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"#;

fn compile(c: &mut Criterion) {
    let client = Client::cpu(8).expect("PJRT CPU plugin (run `cargo xtask setup`)");
    c.bench_function("pjrt/compile tiny module", |b| {
        b.iter(|| {
            client
                .compile(TINY.as_bytes(), &CompileOptions::spmd(&[0]))
                .unwrap()
        })
    });
}

fn dispatch(c: &mut Criterion) {
    let client = Client::cpu(8).expect("PJRT CPU plugin (run `cargo xtask setup`)");
    let one = client
        .compile(TINY.as_bytes(), &CompileOptions::spmd(&[0]))
        .unwrap();
    let x = Buffer::from_host_to(
        &client,
        &HostArray::from_slice(&[4], &[1f32; 4]).unwrap(),
        0,
    )
    .unwrap();
    c.bench_function("pjrt/dispatch tiny executable, 1 device", |b| {
        b.iter(|| {
            let out = one.execute(&[vec![&x]]).unwrap();
            out[0][0].block_until_ready().unwrap();
        })
    });
    let devices: Vec<i64> = (0..8).collect();
    let eight = client
        .compile(TINY_SPMD.as_bytes(), &CompileOptions::spmd(&devices))
        .unwrap();
    let shards: Vec<Buffer> = (0..8)
        .map(|d| {
            Buffer::from_host_to(&client, &HostArray::from_slice(&[1], &[1f32]).unwrap(), d)
                .unwrap()
        })
        .collect();
    let args: Vec<Vec<&Buffer>> = shards.iter().map(|b| vec![b]).collect();
    c.bench_function("pjrt/dispatch tiny executable, 8 devices", |b| {
        b.iter(|| {
            for out in eight.execute(&args).unwrap() {
                out[0].block_until_ready().unwrap();
            }
        })
    });
}

fn transfers(c: &mut Criterion) {
    let client = Client::cpu(8).expect("PJRT CPU plugin (run `cargo xtask setup`)");
    let host = HostArray::from_slice(&[256, 1024], &vec![1f32; 256 * 1024]).unwrap();
    c.bench_function("pjrt/host to device, 1 MiB", |b| {
        b.iter(|| Buffer::from_host_to(&client, &host, 1).unwrap())
    });
    let on_device = Buffer::from_host_to(&client, &host, 1).unwrap();
    c.bench_function("pjrt/device to host, 1 MiB", |b| {
        b.iter(|| on_device.to_host().unwrap())
    });
    c.bench_function("pjrt/device to device, 1 MiB", |b| {
        b.iter_batched(
            || (),
            |_| on_device.copy_to(2).unwrap().block_until_ready().unwrap(),
            BatchSize::SmallInput,
        )
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = compile, dispatch, transfers
}
criterion_main!(benches);
