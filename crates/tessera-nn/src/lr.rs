//! Learning-rate schedules, evaluated on the host for each step (the step program takes the
//! learning rate as an argument, so one compiled step serves every step of a run).

use crate::error::{NnError, Result};

/// A learning rate per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrSchedule {
    /// The same rate at every step.
    Constant(f64),
    /// Linear warm-up from `init` to `peak` over `warmup` steps, then cosine decay to `end` at
    /// step `decay_steps` (and `end` after it), as optax's `warmup_cosine_decay_schedule`.
    WarmupCosine {
        /// The rate at step 0.
        init: f64,
        /// The rate at the end of the warm-up.
        peak: f64,
        /// Warm-up steps.
        warmup: u64,
        /// The step where the decay ends (warm-up included).
        decay_steps: u64,
        /// The final rate.
        end: f64,
    },
}

impl LrSchedule {
    /// Checks that every rate is finite and at least 0 and that the warm-up ends by the end of
    /// the decay, saying which is wrong: [`LrSchedule::at`] of a schedule that passes is a
    /// finite rate at every step (one that does not may give NaN or a negative rate).
    pub fn validate(&self) -> Result<()> {
        let rates: &[(&str, f64)] = match self {
            LrSchedule::Constant(lr) => &[("rate", *lr)],
            LrSchedule::WarmupCosine {
                init, peak, end, ..
            } => &[("init", *init), ("peak", *peak), ("end", *end)],
        };
        if let Some((name, rate)) = rates.iter().find(|(_, r)| !(r.is_finite() && *r >= 0.0)) {
            return Err(NnError::Config(format!(
                "the learning rate schedule's {name} is {rate}; give a finite rate of at least 0"
            )));
        }
        if let LrSchedule::WarmupCosine {
            warmup,
            decay_steps,
            ..
        } = self
            && warmup > decay_steps
        {
            return Err(NnError::Config(format!(
                "the learning rate warm-up of {warmup} steps ends after the decay's last step \
                 {decay_steps}; warm up for at most {decay_steps} steps"
            )));
        }
        Ok(())
    }

    /// The rate at `step` (counted from 0).
    pub fn at(&self, step: u64) -> f64 {
        match *self {
            LrSchedule::Constant(lr) => lr,
            LrSchedule::WarmupCosine {
                init,
                peak,
                warmup,
                decay_steps,
                end,
            } => {
                if step < warmup {
                    // The fraction first: `(peak - init) * step` overflows for a huge peak.
                    return init + (peak - init) * (step as f64 / warmup as f64);
                }
                let span = decay_steps.saturating_sub(warmup).max(1);
                let progress = (step - warmup).min(span) as f64 / span as f64;
                let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                end + (peak - end) * cosine
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine() {
        let s = LrSchedule::WarmupCosine {
            init: 0.0,
            peak: 1e-3,
            warmup: 10,
            decay_steps: 110,
            end: 1e-4,
        };
        assert_eq!(s.at(0), 0.0);
        assert!((s.at(5) - 5e-4).abs() < 1e-12);
        assert!((s.at(10) - 1e-3).abs() < 1e-12);
        assert!((s.at(60) - (1e-4 + 0.9e-3 * 0.5)).abs() < 1e-12);
        assert!((s.at(110) - 1e-4).abs() < 1e-12);
        assert!((s.at(500) - 1e-4).abs() < 1e-12);
        assert_eq!(LrSchedule::Constant(0.1).at(7), 0.1);
    }
}
