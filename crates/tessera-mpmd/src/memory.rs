//! Memory accounting of a pipelined step: from the values each group held during the run
//! ([`crate::runtime::ValueSpan`]s), per group the peak live bytes, and per stage the peak number
//! of micro-batches whose activations (the residuals its backward reads) were live; next to them
//! what the schedule predicts (`tessera_schedule::memory`) from the measured activation bytes
//! of each stage, the accumulators each stage's first weight gradient makes, and the bytes each
//! group holds from the start of the run. Parameters count as live for the whole step: the
//! runtime drops its reference after their last reader, but the caller holds them (they are the
//! step's arguments).

use std::collections::HashMap;

use tessera_schedule::memory::StageBytes;

use crate::pipeline::Key;
use crate::runtime::{Timings, ValueId, ValueSpan};

/// Measured and predicted memory of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryReport {
    /// Per group, the peak bytes live on its devices during the step.
    pub peak_live_bytes: Vec<u64>,
    /// Per group, the schedule's prediction of that peak.
    pub predicted_peak_live_bytes: Vec<u64>,
    /// Per stage, the peak number of micro-batches whose activations were live.
    pub peak_inflight_microbatches: Vec<u32>,
    /// Per stage, the schedule's prediction of that peak.
    pub predicted_inflight_microbatches: Vec<u32>,
    /// Per stage, the measured activation (residual) bytes of one micro-batch (the largest).
    pub activation_bytes: Vec<u64>,
    /// Per group, the bytes of the values placed on it before the run.
    pub resident_bytes: Vec<u64>,
    /// Per stage, the bytes of its parameters and initial gradient accumulators (placed before
    /// the run; what the planner counts per part).
    pub stage_parameter_bytes: Vec<u64>,
    /// Per stage, the bytes of its data inputs over all micro-batches.
    pub stage_data_bytes: Vec<u64>,
    /// Per stage, the gradient accumulators its first weight gradient makes.
    pub stage_accumulator_bytes: Vec<u64>,
    /// Per stage, the measured weight-gradient residual bytes of one micro-batch (the largest;
    /// 0 where its backward never split).
    pub weight_residual_bytes: Vec<u64>,
}

/// The report of a run of `plan` whose values are named by `keys`.
pub(crate) fn report(
    plan: &tessera_schedule::Plan,
    keys: &HashMap<ValueId, Key>,
    timings: &Timings,
) -> MemoryReport {
    // The caller holds the parameters through the step (they are the step's arguments), so
    // they stay live after the runtime's last reader lets go of its reference.
    let end = timings.values.iter().map(|v| v.end_us).fold(0.0, f64::max);
    let mut timings = timings.clone();
    for v in &mut timings.values {
        if matches!(keys.get(&v.value), Some(Key::Param { .. })) {
            v.end_us = end;
        }
    }
    let timings = &timings;
    let groups = plan.actors.len();
    let stages = plan.num_stages as usize;
    let activation = |v: &ValueSpan| match keys.get(&v.value) {
        Some(Key::Resid { stage, mb, .. } | Key::WResid { stage, mb, .. }) => {
            Some((*stage as usize, *mb))
        }
        _ => None,
    };
    // Per stage, the largest bytes one micro-batch holds of each kind.
    let mut per_mb: HashMap<(usize, u32, u8), u64> = HashMap::new();
    for v in &timings.values {
        let kind = match keys.get(&v.value) {
            Some(Key::Resid { stage, mb, .. }) => (*stage as usize, *mb, 0),
            Some(Key::WResid { stage, mb, .. }) => (*stage as usize, *mb, 1),
            _ => continue,
        };
        *per_mb.entry(kind).or_default() += v.bytes;
    }
    let mut stage_bytes = vec![StageBytes::default(); stages];
    for (&(s, _, kind), &bytes) in &per_mb {
        // A backward allocates no accumulator: the compiled action updates it in place.
        let slot = if kind == 0 {
            &mut stage_bytes[s].activation
        } else {
            &mut stage_bytes[s].weight_residual
        };
        *slot = (*slot).max(bytes);
    }
    let mut resident_bytes = vec![0_u64; groups];
    let (mut stage_parameter_bytes, mut stage_data_bytes) = (vec![0_u64; stages], vec![0; stages]);
    for v in &timings.values {
        let per_stage = match keys.get(&v.value) {
            Some(Key::Param { stage, .. } | Key::Acc { stage, step: 0, .. }) => {
                stage_parameter_bytes.get_mut(*stage as usize)
            }
            Some(Key::Data { stage, .. }) => stage_data_bytes.get_mut(*stage as usize),
            _ => None,
        };
        if let Some(b) = per_stage {
            *b += v.bytes;
        }
        match keys.get(&v.value) {
            Some(Key::Param { .. } | Key::Data { .. } | Key::Acc { step: 0, .. })
                if v.group < groups =>
            {
                resident_bytes[v.group] += v.bytes;
            }
            // The accumulators a stage's first weight gradient makes.
            Some(Key::Acc { stage, step: 1, .. }) => {
                if let Some(b) = stage_bytes.get_mut(*stage as usize) {
                    b.accumulators += v.bytes;
                }
            }
            _ => {}
        }
    }
    MemoryReport {
        peak_live_bytes: timings.peak_live_bytes(groups),
        predicted_peak_live_bytes: tessera_schedule::memory::predict_peak_bytes(
            plan,
            &resident_bytes,
            &stage_bytes,
        ),
        peak_inflight_microbatches: inflight(timings, stages, activation),
        predicted_inflight_microbatches: tessera_schedule::memory::peak_inflight(plan),
        activation_bytes: stage_bytes.iter().map(|b| b.activation).collect(),
        resident_bytes,
        stage_parameter_bytes,
        stage_data_bytes,
        stage_accumulator_bytes: stage_bytes.iter().map(|b| b.accumulators).collect(),
        weight_residual_bytes: stage_bytes.iter().map(|b| b.weight_residual).collect(),
    }
}

/// Per stage, the peak number of micro-batches with a live activation value.
fn inflight(
    timings: &Timings,
    stages: usize,
    activation: impl Fn(&ValueSpan) -> Option<(usize, u32)>,
) -> Vec<u32> {
    let mut peaks = vec![0_u32; stages];
    for (s, peak) in peaks.iter_mut().enumerate() {
        // (time, +1 at start / -1 at end, micro-batch); ends sort before starts at a tie.
        let mut events: Vec<(f64, i32, u32)> = Vec::new();
        for v in &timings.values {
            if let Some((_, mb)) = activation(v).filter(|&(stage, _)| stage == s) {
                events.push((v.start_us, 1, mb));
                events.push((v.end_us, -1, mb));
            }
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut held: HashMap<u32, i32> = HashMap::new();
        let mut live = 0_u32;
        for (_, d, mb) in events {
            let n = held.entry(mb).or_default();
            let before = *n > 0;
            *n += d;
            match (before, *n > 0) {
                (false, true) => live += 1,
                (true, false) => live = live.saturating_sub(1),
                _ => {}
            }
            *peak = (*peak).max(live);
        }
    }
    peaks
}
