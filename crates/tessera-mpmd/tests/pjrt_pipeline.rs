//! Pipelined training steps on PJRT: a vector linear chain whose stages are SPMD programs over
//! their group's two devices (4 groups × 2 = 8 CPU devices), fused actions compiled as one
//! module, for several schedules; gradients and losses match the unpipelined host computation,
//! and each group runs its actions in the schedule's order.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashMap;
use std::sync::Arc;

use tessera_mpmd::MpmdMesh;
use tessera_mpmd::compose::action_module;
use tessera_mpmd::pipeline::{Key, PartSignature, StageShape, action_name, build_plan};
use tessera_mpmd::runtime::{DeviceCopyTransport, OutputLayout, PjrtExecutor, RunOptions, run};
use tessera_pjrt::{Array, Client, ElementType, HostArray};
use tessera_schedule::{Registry, ScheduleParams, TaskKind};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::{KeyTypes, LowerError, PartBody, Partitioner};

const V: &str = "tensor<4xf32>";
const S: &str = "tensor<f32>";

struct Types {
    sharded: NamedSharding,
    replicated: NamedSharding,
}

impl KeyTypes<Key> for Types {
    fn mlir_type(&self, key: &Key) -> Result<String, LowerError> {
        Ok(if matches!(key, Key::Loss { .. }) {
            S.into()
        } else {
            V.into()
        })
    }
    fn sharding(&self, key: &Key) -> Result<Option<NamedSharding>, LowerError> {
        Ok(Some(if matches!(key, Key::Loss { .. }) {
            self.replicated.clone()
        } else {
            self.sharded.clone()
        }))
    }
}

fn mul<'c, 'b>(
    b: &tessera_stablehlo::Body<'c, 'b>,
    x: tessera_stablehlo::Value<'c, 'b>,
    y: tessera_stablehlo::Value<'c, 'b>,
) -> Result<tessera_stablehlo::Value<'c, 'b>, LowerError> {
    Ok(b.op("stablehlo.multiply", &[x, y], &[V], &[])?[0])
}

fn add<'c, 'b>(
    b: &tessera_stablehlo::Body<'c, 'b>,
    x: tessera_stablehlo::Value<'c, 'b>,
    y: tessera_stablehlo::Value<'c, 'b>,
) -> Result<tessera_stablehlo::Value<'c, 'b>, LowerError> {
    Ok(b.op("stablehlo.add", &[x, y], &[V], &[])?[0])
}

/// The stage functions of the chain `x -> x * w_s`, loss `0.5 * sum((x * w - t)^2)`.
fn part_body(stages: usize) -> impl Fn(&PartSignature) -> PartBody<'static> {
    move |part: &PartSignature| {
        let s = part.task.stage as usize;
        let (first, last) = (s == 0, s + 1 == stages);
        // The stage's first weight gradient reads no accumulator: its gradient starts it.
        let starts = part.starts_accumulators();
        match part.task.kind {
            TaskKind::Fwd if !last => Box::new(|b, p| Ok(vec![mul(b, p[0], p[1])?, p[1]])),
            TaskKind::Fwd => Box::new(|b, p| {
                let y = mul(b, p[0], p[1])?;
                let r = b.op("stablehlo.subtract", &[y, p[2]], &[V], &[])?[0];
                let sq = mul(b, r, r)?;
                let zero = b.op(
                    "stablehlo.constant",
                    &[],
                    &[S],
                    &[("value", "dense<0.0> : tensor<f32>".into())],
                )?[0];
                let sum_body = b.region(&[S, S], "stablehlo.return", |inner, xs| {
                    inner.op("stablehlo.add", xs, &[S], &[])
                })?;
                let total = b.op_with_regions(
                    "stablehlo.reduce",
                    &[sq, zero],
                    &[S],
                    &[("dimensions", "array<i64: 0>".into())],
                    vec![sum_body],
                )?[0];
                let half = b.op(
                    "stablehlo.constant",
                    &[],
                    &[S],
                    &[("value", "dense<0.5> : tensor<f32>".into())],
                )?[0];
                let loss = b.op("stablehlo.multiply", &[total, half], &[S], &[])?[0];
                Ok(vec![loss, p[1], r])
            }),
            // [w, x, ct, acc?] -> [ct*w if s>0, acc + ct*x]
            TaskKind::Bwd => Box::new(move |b, p| {
                let grad = mul(b, p[2], p[1])?;
                let grad = if starts { grad } else { add(b, p[3], grad)? };
                Ok(if first {
                    vec![grad]
                } else {
                    vec![mul(b, p[2], p[0])?, grad]
                })
            }),
            // [w, x, ct] -> [ct*w if s>0, x, ct]
            TaskKind::BwdI => Box::new(move |b, p| {
                Ok(if first {
                    vec![p[1], p[2]]
                } else {
                    vec![mul(b, p[2], p[0])?, p[1], p[2]]
                })
            }),
            // [x, ct, acc?] -> [acc + x*ct]
            TaskKind::BwdW => Box::new(move |b, p| {
                let grad = mul(b, p[0], p[1])?;
                Ok(vec![if starts { grad } else { add(b, p[2], grad)? }])
            }),
        }
    }
}

fn reference(w: &[Vec<f64>], data: &[(Vec<f64>, Vec<f64>)]) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut grads = vec![vec![0.0; 4]; w.len()];
    let mut losses = Vec::new();
    for (x, t) in data {
        let mut acts = vec![x.clone()];
        for ws in w {
            acts.push(
                acts.last()
                    .unwrap()
                    .iter()
                    .zip(ws)
                    .map(|(a, b)| a * b)
                    .collect(),
            );
        }
        let r: Vec<f64> = acts[w.len()].iter().zip(t).map(|(a, b)| a - b).collect();
        losses.push(0.5 * r.iter().map(|v| v * v).sum::<f64>());
        let mut ct = r;
        for s in (0..w.len()).rev() {
            for i in 0..4 {
                grads[s][i] += ct[i] * acts[s][i];
                ct[i] *= w[s][i];
            }
        }
    }
    (losses, grads)
}

fn check(client: &Client, name: &str, stages: u32, microbatches: u32) {
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    let spec = PartitionSpec::parse("P('data')").unwrap();
    let group_sharding =
        |g: usize| NamedSharding::new(mesh.group(g).unwrap(), spec.clone()).unwrap();
    let types = Types {
        sharded: group_sharding(0),
        replicated: NamedSharding::new(mesh.group(0).unwrap(), PartitionSpec::replicated())
            .unwrap(),
    };
    let schedule = Registry::with_builtins()
        .create(
            name,
            ScheduleParams {
                stages,
                mpmd_dim: 4,
            },
        )
        .unwrap();
    let sched_plan = schedule.plan(microbatches).unwrap();
    let n = stages as usize;
    let shapes: Vec<StageShape> = (0..n)
        .map(|s| {
            let last = s + 1 == n;
            let data = usize::from(s == 0) + usize::from(last);
            let residuals = if last { 2 } else { 1 };
            StageShape::chain(s as u32, stages, 1, data, residuals, 2)
        })
        .collect();
    let mut executor = PjrtExecutor::new(client, &mesh);
    let body = part_body(n);
    let mut failure = None;
    let built = build_plan(&sched_plan, &shapes, |sig| {
        let module = action_module(sig, &types, 2, Partitioner::default(), &body).unwrap();
        let group = sched_plan.placement.actor(sig.parts[0].task.stage).unwrap() as usize;
        let layouts = sig
            .outputs
            .iter()
            .map(|k| match k {
                Key::Loss { .. } => OutputLayout {
                    shape: vec![],
                    ty: ElementType::F32,
                    spec: PartitionSpec::replicated(),
                },
                _ => OutputLayout {
                    shape: vec![4],
                    ty: ElementType::F32,
                    spec: spec.clone(),
                },
            })
            .collect();
        executor
            .compile(&module, group, layouts)
            .map_err(|e| failure = Some(e.to_string()))
            .unwrap_or(0)
    })
    .unwrap();
    assert_eq!(failure, None, "{name}");
    let w: Vec<Vec<f64>> = (0..n)
        .map(|s| (0..4).map(|i| 0.8 + 0.05 * (s + i) as f64).collect())
        .collect();
    let data: Vec<(Vec<f64>, Vec<f64>)> = (0..microbatches as usize)
        .map(|m| {
            (
                (0..4).map(|i| 1.0 + 0.1 * (m + i) as f64).collect(),
                (0..4).map(|i| 0.5 - 0.1 * (m * i) as f64).collect(),
            )
        })
        .collect();
    let put = |values: &[f64], group: usize| {
        let host =
            HostArray::from_slice(&[4], &values.iter().map(|&v| v as f32).collect::<Vec<_>>())
                .unwrap();
        Array::device_put(client, &host, &group_sharding(group)).unwrap()
    };
    let initial = built
        .inputs
        .iter()
        .map(|&(key, group)| {
            let array = match key {
                Key::Param { stage, .. } => put(&w[stage as usize], group),
                Key::Data { stage, mb, k } => {
                    let (x, t) = &data[mb as usize];
                    put(if stage == 0 && k == 0 { x } else { t }, group)
                }
                other => panic!("unexpected input {other:?}"),
            };
            (built.ids[&key], group, array)
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
    let (losses, grads) = reference(&w, &data);
    let got: Vec<Vec<f64>> = out
        .results
        .iter()
        .map(|a| {
            a.to_host()
                .unwrap()
                .to_typed::<f32>()
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect()
        })
        .collect();
    let expected: Vec<Vec<f64>> = grads
        .into_iter()
        .chain(losses.into_iter().map(|l| vec![l]))
        .collect();
    for (a, b) in got.iter().flatten().zip(expected.iter().flatten()) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "{name}: {got:?} vs {expected:?}"
        );
    }
    let orders = out.timings.group_orders(4);
    let by_actor: HashMap<usize, Vec<String>> = sched_plan
        .actors
        .iter()
        .enumerate()
        .map(|(a, acts)| (a, acts.iter().map(action_name).collect()))
        .collect();
    for (actor, expected) in by_actor {
        assert_eq!(orders[actor], expected, "{name}: actor {actor}");
    }
}

#[test]
fn pipelined_steps_match_the_unpipelined_gradients_on_eight_devices() {
    let client = Client::cpu(8).unwrap();
    check(&client, "1f1b", 4, 8);
    check(&client, "gpipe", 4, 4);
    check(&client, "zero-bubble", 4, 4);
    check(&client, "interleaved-1f1b", 8, 4);
    check(&client, "dualpipev", 8, 8);
}
