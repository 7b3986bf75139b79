//! Rotary position embeddings and their scalings, as Hugging Face `transformers` defines them
//! (`modeling_rope_utils.py`): the default frequencies `theta^(-2i/d)`, and the `linear`,
//! `dynamic` (NTK), `llama3` and `yarn` scalings of long-context checkpoints.
//!
//! The frequencies are computed on the host in float32, in the same order of operations as
//! `transformers`, and enter the traced program as a small vector (one select per frequency,
//! which XLA folds to a constant). The default rope keeps the in-graph formula Tessera has always
//! used, so every result of a model without scaling stays as it was.

use tessera_ir::DType;
use tessera_ir::trace::{Tensor, where_};

/// How a rope's frequencies are scaled for contexts longer than the model was trained on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// The frequencies `theta^(-2i/d)` as they are.
    None,
    /// Positions divided by `factor` (every frequency divided by it).
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// NTK-aware scaling: for sequences longer than `max_positions`, a larger `theta`.
    Dynamic {
        /// The scaling factor.
        factor: f64,
        /// The model's `max_position_embeddings`.
        max_positions: i64,
    },
    /// Llama 3.1's: low frequencies divided by `factor`, high ones kept, a smooth ramp between.
    Llama3 {
        /// The divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_positions / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_positions / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was first trained on.
        original_max_positions: i64,
    },
    /// YaRN: a ramp between interpolated and extrapolated frequencies, and cos/sin scaled.
    Yarn {
        /// The scaling factor.
        factor: f64,
        /// The context length the model was first trained on.
        original_max_positions: i64,
        /// Rotations where the ramp starts extrapolating (32 by default).
        beta_fast: f64,
        /// Rotations where the ramp ends (1 by default).
        beta_slow: f64,
        /// What cos and sin are multiplied by.
        attention_factor: f64,
        /// Whether the ramp's bounds are rounded to whole dimensions (`true` by default).
        truncate: bool,
    },
}

/// A rotary embedding: its base and scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// The base of the frequencies (`rope_theta`; 10000 in Llama 2).
    pub theta: f64,
    /// The scaling.
    pub scaling: RopeScaling,
}

impl Rope {
    /// An unscaled rope of base `theta`.
    pub fn new(theta: f64) -> Self {
        Rope {
            theta,
            scaling: RopeScaling::None,
        }
    }

    /// The `head_dim / 2` inverse frequencies for a program of `seq_len` positions, and the
    /// factor cos and sin are multiplied by, both as `transformers` computes them in float32.
    pub fn frequencies(&self, head_dim: i64, seq_len: i64) -> (Vec<f32>, f32) {
        let dim = head_dim as f32;
        let base_freqs = |base: f32| -> Vec<f32> {
            (0..head_dim / 2)
                .map(|i| 1.0 / base.powf((2 * i) as f32 / dim))
                .collect()
        };
        let theta = self.theta as f32;
        match self.scaling {
            RopeScaling::None => (base_freqs(theta), 1.0),
            RopeScaling::Linear { factor } => (
                base_freqs(theta)
                    .into_iter()
                    .map(|f| f / factor as f32)
                    .collect(),
                1.0,
            ),
            RopeScaling::Dynamic {
                factor,
                max_positions,
            } => {
                let seq = seq_len.max(max_positions) as f64;
                let scale = factor * seq / max_positions as f64 - (factor - 1.0);
                let base = self.theta * scale.powf(head_dim as f64 / (head_dim as f64 - 2.0));
                (base_freqs(base as f32), 1.0)
            }
            RopeScaling::Llama3 { .. } => (self.llama3(base_freqs(theta)), 1.0),
            RopeScaling::Yarn {
                attention_factor, ..
            } => (self.yarn(head_dim), attention_factor as f32),
        }
    }

    fn llama3(&self, inv_freq: Vec<f32>) -> Vec<f32> {
        let RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_positions,
        } = self.scaling
        else {
            return inv_freq;
        };
        let (factor, low, high) = (
            factor as f32,
            low_freq_factor as f32,
            high_freq_factor as f32,
        );
        let old = original_max_positions as f32;
        let (low_wavelen, high_wavelen) = (old / low, old / high);
        inv_freq
            .into_iter()
            .map(|f| {
                let wavelen = 2.0 * std::f32::consts::PI / f;
                let scaled = if wavelen > low_wavelen { f / factor } else { f };
                let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                if medium {
                    let smooth = (old / wavelen - low) / (high - low);
                    (1.0 - smooth) * scaled / factor + smooth * scaled
                } else {
                    scaled
                }
            })
            .collect()
    }

    fn yarn(&self, head_dim: i64) -> Vec<f32> {
        let RopeScaling::Yarn {
            factor,
            original_max_positions,
            beta_fast,
            beta_slow,
            truncate,
            ..
        } = self.scaling
        else {
            return Vec::new();
        };
        let (dim, base) = (head_dim as f64, self.theta);
        let correction = |rotations: f64| {
            dim * (original_max_positions as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
        if truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
        if low == high {
            high += 0.001;
        }
        let theta = base as f32;
        (0..head_dim / 2)
            .map(|i| {
                let pos_freq = theta.powf((2 * i) as f32 / dim as f32);
                let (extrapolation, interpolation) =
                    (1.0 / pos_freq, 1.0 / (factor as f32 * pos_freq));
                let ramp = ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                interpolation * (1.0 - keep) + extrapolation * keep
            })
            .collect()
    }

    /// `x` (`[..., seq, head_dim]`) rotated by the positions `0..seq`.
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let rank = x.rank();
        let t = x.shape()[rank - 2];
        let positions = x.iota_along(&[t], 0);
        self.apply_at(x, &positions, t)
    }

    /// `x` (`[..., seq, head_dim]`) rotated by `positions` (`[seq]`, integer), the frequencies
    /// those of a sequence of `seq_len` positions (only dynamic scaling depends on it).
    pub fn apply_at(&self, x: &Tensor, positions: &Tensor, seq_len: i64) -> Tensor {
        self.apply_with(x, positions, RopeLen::Fixed(seq_len))
    }

    /// [`Rope::apply_at`] with the sequence length given as it is known: fixed when the program
    /// is traced, or a traced integer scalar (a decode step's position + 1, as `transformers`
    /// recomputes dynamic scaling at each generated token).
    pub fn apply_with(&self, x: &Tensor, positions: &Tensor, seq_len: RopeLen<'_>) -> Tensor {
        let rank = x.rank();
        let (t, dh) = (x.shape()[rank - 2], x.shape()[rank - 1]);
        let half = dh / 2;
        let position = positions
            .astype(DType::F32)
            .broadcast_in_dim(&[t, dh], &[0]);
        let column = x.iota_along(&[t, dh], 1);
        let pair = column.binary(tessera_ir::Prim::Rem, &column.full_like_scalar(half as f64));
        let (inv_freq, factor) = match (self.scaling, seq_len) {
            // Tessera's own formula since its first Llama: results stay as they were.
            (RopeScaling::None, _) => {
                let exponent = -2.0 * self.theta.ln() / dh as f64;
                ((pair.astype(DType::F32) * exponent).exp(), 1.0)
            }
            (
                RopeScaling::Dynamic {
                    factor,
                    max_positions,
                },
                RopeLen::Traced(len),
            ) => (
                dynamic_frequencies(&pair, dh, self.theta, factor, max_positions, len),
                1.0,
            ),
            // The other scalings do not depend on the length; dynamic's, known, is fixed.
            (
                RopeScaling::Linear { .. }
                | RopeScaling::Dynamic { .. }
                | RopeScaling::Llama3 { .. }
                | RopeScaling::Yarn { .. },
                len,
            ) => {
                let len = match len {
                    RopeLen::Fixed(n) => n,
                    RopeLen::Traced(_) => t,
                };
                let (freqs, factor) = self.frequencies(dh, len);
                (host_vector(&pair, &freqs), factor)
            }
        };
        let angle = position * inv_freq;
        let (mut cos, mut sin) = (angle.cos(), angle.sin());
        if factor != 1.0 {
            (cos, sin) = (cos * f64::from(factor), sin * f64::from(factor));
        }
        // rotate_half(x) = concat(-x2, x1) along the head dimension.
        let (x1, x2) = (
            Tensor::slice_axis(x, rank - 1, 0, half),
            Tensor::slice_axis(x, rank - 1, half, dh),
        );
        let rotated = (-&x2).concatenate(&[&x1], rank - 1);
        x * cos.astype(x.dtype()) + rotated * sin.astype(x.dtype())
    }
}

/// The sequence length a rope's frequencies are computed for.
#[derive(Debug, Clone, Copy)]
pub enum RopeLen<'a> {
    /// Known when the program is traced.
    Fixed(i64),
    /// A traced integer scalar.
    Traced(&'a Tensor),
}

/// Dynamic (NTK) scaling's frequencies for `pair` (each column's frequency index) when the
/// sequence length `len` is traced: `theta` grows with `len` past `max_positions`.
fn dynamic_frequencies(
    pair: &Tensor,
    dh: i64,
    theta: f64,
    factor: f64,
    max_positions: i64,
    len: &Tensor,
) -> Tensor {
    let len = len.astype(DType::F32).maximum(
        &len.astype(DType::F32)
            .full_like_scalar(max_positions as f64),
    );
    let scale = len * (factor / max_positions as f64) - (factor - 1.0);
    let ln_base = scale.log() * (dh as f64 / (dh as f64 - 2.0)) + theta.ln();
    let ln_base = ln_base.broadcast_in_dim(pair.shape(), &[]);
    (pair.astype(DType::F32) * (-2.0 / dh as f64) * ln_base).exp()
}

/// `values[index]` for each element of `index` (integer, each in `0..values.len()`), as float32:
/// one select per value, all of them constants XLA folds.
fn host_vector(index: &Tensor, values: &[f32]) -> Tensor {
    let mut out = index.astype(DType::F32).full_like_scalar(0.0);
    for (i, &v) in values.iter().enumerate() {
        let here = index.eq(&index.full_like_scalar(i as f64));
        out = where_(&here, &out.full_like_scalar(f64::from(v)), &out);
    }
    out
}

/// Rotary position embedding of `x` (`[..., seq, head_dim]`), rotating the two halves of each
/// head (the GPT-NeoX / Hugging Face Llama layout): `x cos + rotate_half(x) sin`, frequencies
/// `base^(-2i/head_dim)`.
pub fn rotary(x: &Tensor, base: f64) -> Tensor {
    Rope::new(base).apply(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalings_leave_the_highest_frequency_alone_and_slow_the_lowest() {
        let base = Rope::new(10_000.0).frequencies(16, 8).0;
        let llama3 = Rope {
            theta: 10_000.0,
            scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_positions: 32,
            },
        }
        .frequencies(16, 8)
        .0;
        assert_eq!(base[0], llama3[0]);
        assert!((llama3[7] - base[7] / 8.0).abs() < 1e-12, "{llama3:?}");
        let linear = Rope {
            theta: 10_000.0,
            scaling: RopeScaling::Linear { factor: 2.0 },
        }
        .frequencies(16, 8)
        .0;
        assert!(linear.iter().zip(&base).all(|(l, b)| *l == b / 2.0));
        // Dynamic changes nothing up to the model's positions, lowers frequencies beyond.
        let dynamic = |seq| {
            Rope {
                theta: 10_000.0,
                scaling: RopeScaling::Dynamic {
                    factor: 2.0,
                    max_positions: 16,
                },
            }
            .frequencies(16, seq)
            .0
        };
        assert_eq!(dynamic(16), base);
        assert!(dynamic(64)[7] < base[7]);
    }
}
