//! Pipeline schedules as plain data: per-actor task lists, validated, simulated and rendered.
//!
//! Pure: this crate depends on no other Tessera crate, so users can write and check their own
//! schedules.
//!
//! # Model
//! A pipeline of `S` stages runs `M` microbatches on `D` actors (MPMD groups of devices). A
//! [`Placement`] says which actor runs each stage. A [`Plan`] is the placement plus each
//! actor's ordered list of [`Action`]s; an action is one [`Task`] (`Fwd`, `Bwd`, or the split
//! backward `BwdI`/`BwdW`) or several tasks fused into one program. The MPMD runtime executes
//! plans as they are: it never special-cases a schedule.
//!
//! A [`Schedule`] makes plans; the built-ins mirror JAXPP's (`GPipe`, `InterleavedGPipe`,
//! `Std1F1B`, `Eager1F1B`, `Interleaved1F1B`, `KimiK2`, `ZeroBubble`, `DualPipeV`) and a
//! [`Registry`] maps command-line names to constructors, built-in or user-written. Where JAXPP
//! has the schedule, each actor's actions (tasks, order, fusion) equal what JAXPP's `tasks()`
//! returns (`tests/jaxpp_orders.rs`, against `tests/data/jaxpp_orders.json`): JAXPP fuses only
//! in Interleaved1F1B and KimiK2 (the last stage's forward and backward, or every steady-state
//! pair with `fuse_steady_state`) and in DualPipeV. Tessera's own variants: `1f1b-fuse-last`,
//! `eager-1f1b-fuse-last`, `zero-bubble-fuse-ends` (fusions JAXPP does not do) and
//! `dualpipev-deepseek` ([`DualPipeVDeepSeek`], DeepSeek's reference order). Tessera accepts
//! more than JAXPP in two places: interleaved microbatch counts that do not split into equal
//! rounds (the rounds are balanced) and ZeroBubble on one stage.
//!
//! ```
//! use tessera_schedule::{Costs, Registry, ScheduleParams, render, simulate, validate};
//!
//! let schedule = Registry::with_builtins().create("1f1b", ScheduleParams { stages: 4, mpmd_dim: 4 })?;
//! let plan = schedule.plan(8)?;
//! validate(&plan)?;
//! let sim = simulate(&plan, &Costs::uniform(4, 1.0, 2.0, 0.0))?;
//! assert_eq!(sim.makespan, (8.0 + 4.0 - 1.0) * 3.0); // (m+p-1)(F+B)
//! println!("{}", render::ascii(&plan, &sim));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Passes
//! - [`validate_forward_only()`]: the same for a forward-only plan ([`ForwardOnly`], an eval
//!   loss or inference pipelined over the training placement).
//! - [`validate()`]: every task exactly once, dependencies respected, no deadlock when each
//!   actor runs its list in order with blocking receives; [`transfers()`] lists the values that
//!   cross actors.
//! - [`simulate()`]: discrete-event simulation with per-stage costs `F`, `B`, `W` and a transfer
//!   latency: makespan, idle time, bubble ratio, peak live activations.
//! - [`shared`]: the same simulation for actors whose devices share a few host cores (the CPU
//!   plugin's virtual devices): actions running at once slow each other down.
//! - [`render`]: ASCII timeline, SVG timeline, JSON.
//! - [`memory`]: per-stage peak in-flight micro-batches between actions, and a predicted peak
//!   of live bytes per actor from each stage's activation bytes.
//! - [`plan`]: the planner's boundary search: the split of a chain of layers into stages with
//!   the fastest slowest stage from measured per-layer costs, under a memory limit.
//! - [`search`]: the planner's search over stage counts, boundaries, groups, devices per group,
//!   micro-batch counts and schedules, ranked by the simulator's step time, with peak bytes per
//!   device from the memory model (`tessera plan`).
//!
//! # Published formulas the tests pin (p actors, m ≥ p microbatches, zero latency)
//! - GPipe (Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks using
//!   Pipeline Parallelism"): bubble `(p-1)(F+B)` per actor, makespan `(m+p-1)(F+B)`, `m` live
//!   microbatches on the first actor.
//! - 1F1B, i.e. PipeDream-Flush (Narayanan et al. 2021, "Efficient Large-Scale Language Model
//!   Training on GPU Clusters Using Megatron-LM"): the same bubble, `p` live microbatches on the
//!   first actor.
//! - Interleaved 1F1B (same paper): with `v` stages per actor each costing `F`, `B`, the bubble
//!   is `(p-1)(F+B)`, a `v`-th of that of the same work on `p` stages.
//! - ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): bubble `(p-1)(F+B-2W)` in
//!   DualPipe's notation (`B` the whole backward, `W` its weight part) with 1F1B's peak memory.
//! - DualPipeV in DeepSeek's order, `dualpipev-deepseek` (DeepSeek-AI 2024, "DeepSeek-V3
//!   Technical Report", and the table in
//!   github.com/deepseek-ai/DualPipe): bubble `(PP/2-1)(F&B+B-3W)` for `PP = 2D` stages and
//!   `PP+1` live activations per device, in units of a `PP`-stage model's stage; with this
//!   crate's half-size stages and non-overlapped `F&B = F+B`, `D` devices: bubble
//!   `(D-1)(F+2B-3W)` and peak `2D+1` stage-microbatches. The bubble is exact when a forward
//!   takes as long as an input-gradient backward (`F = B-W`, as in the table's figure); other
//!   cost ratios shift it slightly either way. JAXPP's order (`dualpipev`) idles a few units
//!   more, independent of the microbatch count (docs/schedules.md).
//!
//! With a transfer latency `L` the schedules above pay `L` on every hop of their critical path;
//! the simulator models that, the formulas do not.

pub mod builtins;
pub mod error;
pub mod forward;
pub mod memory;
pub mod placement;
pub mod plan;
pub mod render;
pub mod schedule;
pub mod search;
pub mod shared;
pub mod simulate;
pub mod stage_costs;
pub mod task;
pub mod validate;
pub mod variants;

pub use builtins::{
    DualPipeV, DualPipeVDeepSeek, Eager1F1B, GPipe, Interleaved1F1B, InterleavedGPipe, KimiK2,
    Std1F1B, ZeroBubble,
};
pub use error::{CostError, ScheduleError, SimulateError, ValidationError};
pub use forward::{ForwardOnly, forward_actions, validate_forward_only};
pub use placement::Placement;
pub use schedule::{MAX_PIPELINE_CELLS, MAX_STAGES, Plan, Registry, Schedule, ScheduleParams};
pub use shared::{Sharing, simulate_shared};
pub use simulate::{Costs, Simulation, simulate};
pub use task::{Action, ActorId, Microbatch, StageId, Task, TaskKind};
pub use validate::{Payload, Span, Transfer, transfers, validate};
