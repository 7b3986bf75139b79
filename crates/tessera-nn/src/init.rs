//! Initial parameter values: a small seeded generator (SplitMix64, normals by Box–Muller) and the
//! initializers the layers use. The same seed gives the same parameters on every machine.

use tessera_ir::{Array, DType};

use crate::error::{NnError, Result};

/// A seeded pseudo-random generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal number.
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// How a parameter starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// All zeros (biases, LayerNorm offsets).
    Zeros,
    /// All ones (norm gains).
    Ones,
    /// Normal with this standard deviation (weights, embeddings).
    Normal(f64),
}

impl Init {
    /// A float32 array of `shape` drawn from `rng`.
    pub fn array(self, shape: &[i64], rng: &mut Rng) -> Result<Array> {
        let n = shape
            .iter()
            .try_fold(1i64, |n, &d| n.checked_mul(d.max(0)))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                NnError::Config(format!(
                    "a parameter of shape {shape:?} has more elements than fit in memory; use \
                     smaller sizes"
                ))
            })?;
        let values: Vec<f64> = match self {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Normal(std) => (0..n).map(|_| rng.normal() * std).collect(),
        };
        Ok(Array::new(DType::F32, shape, values)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normals_have_the_asked_moments_and_repeat_by_seed() {
        let mut rng = Rng::new(7);
        let xs: Vec<f64> = (0..20_000).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
        let again: Vec<f64> = {
            let mut rng = Rng::new(7);
            (0..5).map(|_| rng.normal()).collect()
        };
        assert_eq!(&xs[..5], &again[..]);
    }
}
