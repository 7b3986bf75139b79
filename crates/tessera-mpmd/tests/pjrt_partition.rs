//! The partitioned pipeline on PJRT: each action's stage programs are lowered into one StableHLO
//! module, compiled for its group (4 groups x 2 devices), and run with device-to-device
//! transfers; gradients and losses match `value_and_grad` of the whole loss.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::eval_closed;
use tessera_ir::{Array, DType};
use tessera_mpmd::MpmdMesh;
mod common;

use common::loss;
use std::sync::Arc;
use tessera_mpmd::compose::action_module;
use tessera_mpmd::partition::{StagePrograms, key_aval, partition};
use tessera_mpmd::pipeline::{Key, build_plan};

use tessera_mpmd::runtime::{DeviceCopyTransport, OutputLayout, PjrtExecutor, RunOptions, run};
use tessera_pjrt::{Array as DeviceArray, Client, ElementType, HostArray};
use tessera_schedule::{Registry, ScheduleParams};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::{KeyTypes, PartBody, Partitioner, lower_flat, mlir_type};

struct Types<'a> {
    stages: &'a [StagePrograms],
    replicated: NamedSharding,
}

impl KeyTypes<Key> for Types<'_> {
    fn mlir_type(&self, key: &Key) -> Result<String, tessera_stablehlo::LowerError> {
        Ok(key_aval(self.stages, *key).map(|a| mlir_type(&a)).unwrap())
    }
    fn sharding(&self, _key: &Key) -> Result<Option<NamedSharding>, tessera_stablehlo::LowerError> {
        Ok(Some(self.replicated.clone()))
    }
}

fn values(shape: &[i64], seed: f64) -> Vec<f32> {
    let n: i64 = shape.iter().product();
    (0..n)
        .map(|i| (((i as f64 + 1.0) * 0.37 + seed).sin() * 0.7) as f32)
        .collect()
}

fn check(client: &Client, name: &str, stages: usize, microbatches: u32) {
    let program = loss(stages);
    let params: Vec<usize> = (1..=stages).collect();
    let parts = partition(&program, &params).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    let schedule = Registry::with_builtins()
        .create(
            name,
            ScheduleParams {
                stages: stages as u32,
                mpmd_dim: 4,
            },
        )
        .unwrap();
    let plan = schedule.plan(microbatches).unwrap();
    let shapes: Vec<_> = parts.iter().map(|p| p.shape.clone()).collect();
    let replicated = NamedSharding::new(mesh.group(0).unwrap(), PartitionSpec::replicated());
    let types = Types {
        stages: &parts,
        replicated: replicated.unwrap(),
    };
    let mut executor = PjrtExecutor::new(client, &mesh);
    let built = build_plan(&plan, &shapes, |sig| {
        let part_body = |part: &tessera_mpmd::pipeline::PartSignature| -> PartBody<'static> {
            let program = parts[part.task.stage as usize].part_program(part).clone();
            Box::new(move |b, args| lower_flat(b, &program, args))
        };
        let module = action_module(sig, &types, 2, Partitioner::default(), &part_body).unwrap();
        let group = plan.placement.actor(sig.parts[0].task.stage).unwrap() as usize;
        let layouts = sig
            .outputs
            .iter()
            .map(|&k| {
                let aval = key_aval(&parts, k).unwrap();
                OutputLayout {
                    shape: aval.shape.clone(),
                    ty: ElementType::F32,
                    spec: PartitionSpec::replicated(),
                }
            })
            .collect();
        executor.compile(&module, group, layouts).unwrap()
    })
    .unwrap();
    let weights: Vec<Vec<f32>> = (0..stages).map(|s| values(&[6, 6], s as f64)).collect();
    let batches: Vec<(Vec<f32>, Vec<f32>)> = (0..microbatches)
        .map(|m| {
            (
                values(&[4, 6], 10.0 + m as f64),
                values(&[4, 6], 20.0 + m as f64),
            )
        })
        .collect();
    let loss_arg = |k: usize, mb: usize| -> (Vec<f32>, Vec<i64>) {
        if k == 0 {
            (batches[mb].0.clone(), vec![4, 6])
        } else if k == stages + 1 {
            (batches[mb].1.clone(), vec![4, 6])
        } else {
            (weights[k - 1].clone(), vec![6, 6])
        }
    };
    let put = |(v, shape): (Vec<f32>, Vec<i64>), group: usize| {
        let sharding =
            NamedSharding::new(mesh.group(group).unwrap(), PartitionSpec::replicated()).unwrap();
        DeviceArray::device_put(
            client,
            &HostArray::from_slice(&shape, &v).unwrap(),
            &sharding,
        )
        .unwrap()
    };
    let initial = built
        .inputs
        .iter()
        .map(|&(key, group)| {
            let value = match key {
                Key::Param { stage, k } => loss_arg(parts[stage as usize].param_args[k], 0),
                Key::Data { stage, mb, k } => {
                    loss_arg(parts[stage as usize].data_args[k], mb as usize)
                }
                other => panic!("unexpected input {other:?}"),
            };
            (built.ids[&key], group, put(value, group))
        })
        .collect();
    let out = run(
        Arc::new(built.plan.clone()),
        initial,
        Arc::new(executor),
        Arc::new(DeviceCopyTransport::new(&mesh)),
        &RunOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let vg = value_and_grad(&program, &params).unwrap();
    let mut want = vec![vec![0.0f64; 36]; stages];
    let mut losses = Vec::new();
    for mb in 0..microbatches as usize {
        let args: Vec<Array> = (0..stages + 2)
            .map(|k| {
                let (v, s) = loss_arg(k, mb);
                Array::new(DType::F32, &s, v.iter().map(|&x| f64::from(x)).collect()).unwrap()
            })
            .collect();
        let r = eval_closed(&vg, &args).unwrap();
        losses.push(r[0].to_vec()[0]);
        for s in 0..stages {
            for (acc, g) in want[s].iter_mut().zip(r[1 + s].to_vec()) {
                *acc += g;
            }
        }
    }
    let got: Vec<Vec<f32>> = out
        .results
        .iter()
        .map(|a| a.to_host().unwrap().to_typed::<f32>().unwrap())
        .collect();
    for s in 0..stages {
        for (a, b) in got[s].iter().zip(&want[s]) {
            assert!(
                (f64::from(*a) - b).abs() <= 1e-4 * b.abs().max(1e-2),
                "{name}: stage {s} gradient {a} vs {b}"
            );
        }
    }
    for (l, w) in got[stages..].iter().zip(&losses) {
        assert!(
            (f64::from(l[0]) - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{name}: loss {} vs {w}",
            l[0]
        );
    }
}

#[test]
fn partitioned_pipelines_on_eight_devices_match_value_and_grad() {
    let client = Client::cpu(8).unwrap();
    check(&client, "1f1b", 4, 8);
    check(&client, "zero-bubble", 4, 4);
    check(&client, "dualpipev", 8, 8);
}

/// A parameter spec the group's mesh cannot take (an axis it lacks), given to the driver
/// directly (unchecked, as `mpmd_jit`'s own specs are checked before): the pipeline is refused
/// naming the value and the spec, not built with the value silently replicated.
#[test]
fn a_value_spec_the_group_cannot_take_is_refused_not_replaced() {
    use tessera_mpmd::ValueSpecs;
    use tessera_mpmd::driver::{CompiledPipeline, PipelineOptions};
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    let schedule = Registry::with_builtins()
        .create(
            "1f1b",
            ScheduleParams {
                stages: 4,
                mpmd_dim: 4,
            },
        )
        .unwrap();
    let options = PipelineOptions {
        specs: ValueSpecs::default().with_param(1, PartitionSpec::parse("P('model')").unwrap()),
        ..PipelineOptions::default()
    };
    let err = CompiledPipeline::new_in(
        &client,
        &mesh,
        &loss(4),
        &[1, 2, 3, 4],
        &*schedule,
        4,
        &options,
    )
    .err()
    .expect("the pipeline must be refused");
    let text = err.to_string();
    assert!(
        text.contains("cannot be laid out as P('model',)") && text.contains("ValueSpecs"),
        "{text}"
    );
}
