//! Special functions in `f64` that `libm` lacks: the inverse error function, digamma and
//! polygamma. Accurate to about 1e-14 relative, far below `f32`'s resolution, so the
//! interpreter's `f32` results are the correctly rounded values (XLA's are within an ulp or two).

use std::f64::consts::PI;

/// The inverse of `erf` on `(-1, 1)`; `±inf` at `±1`, NaN outside.
pub(crate) fn erf_inv(y: f64) -> f64 {
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y == 1.0 || y == -1.0 {
        return y * f64::INFINITY;
    }
    // Giles' single-precision approximation, then Newton steps on erf(x) = y.
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        let p = [
            2.810_226_36e-08,
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ];
        p.iter().fold(0.0, |acc, &c| acc * w + c) * y
    } else {
        let w = w.sqrt() - 3.0;
        let p = [
            -0.000_200_214_257,
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ];
        p.iter().fold(0.0, |acc, &c| acc * w + c) * y
    };
    for _ in 0..3 {
        let err = libm::erf(x) - y;
        let slope = 2.0 / PI.sqrt() * (-x * x).exp();
        if slope == 0.0 || !slope.is_finite() {
            break;
        }
        x -= err / slope;
    }
    x
}

/// `erf_inv` in single precision as XLA computes it (CHLO's legalization): Giles' polynomial in
/// `w = -log1p(-x²)`, evaluated in `f32` operations, `±inf` at `±1`. Unlike [`erf_inv`] (correctly
/// rounded from `f64`), this gives XLA's `f32` results, which JAX's samplers (`normal`) rely on.
#[allow(clippy::excessive_precision)] // Giles' constants as XLA writes them; they round to f32.
pub(crate) fn erf_inv_f32(x: f32) -> f32 {
    const LESS: [f32; 9] = [
        2.810_226_36e-08,
        3.432_739_39e-07,
        -3.523_387_7e-06,
        -4.391_506_54e-06,
        0.000_218_580_87,
        -0.001_253_725_03,
        -0.004_177_681_64,
        0.246_640_727,
        1.501_409_41,
    ];
    const MORE: [f32; 9] = [
        -0.000_200_214_257,
        0.000_100_950_558,
        0.001_349_343_22,
        -0.003_673_428_44,
        0.005_739_507_73,
        -0.007_622_461_3,
        0.009_438_870_47,
        1.001_674_06,
        2.832_976_82,
    ];
    let w = -libm::log1pf(x * -x);
    let (coefficients, w) = if w < 5.0 {
        (LESS, w - 2.5)
    } else {
        (MORE, w.sqrt() - 3.0)
    };
    let p = coefficients[1..]
        .iter()
        .fold(coefficients[0], |p, &c| p.mul_add(w, c));
    if x.abs() == 1.0 {
        x * f32::INFINITY
    } else {
        p * x
    }
}

/// The digamma function `ψ(x) = Γ'(x)/Γ(x)`; NaN at the poles (0, -1, -2, ...).
pub(crate) fn digamma(x: f64) -> f64 {
    if x.is_nan() || x == f64::NEG_INFINITY {
        return f64::NAN;
    }
    if x <= 0.0 {
        if x == x.floor() {
            return f64::NAN;
        }
        // Reflection: ψ(1 - x) - ψ(x) = π cot(π x).
        return digamma(1.0 - x) - PI / (PI * x).tan();
    }
    let mut x = x;
    let mut acc = 0.0;
    while x < 12.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let inv2 = 1.0 / (x * x);
    // Asymptotic series with Bernoulli numbers B2k / (2k).
    let series = inv2
        * (1.0 / 12.0
            - inv2
                * (1.0 / 120.0
                    - inv2 * (1.0 / 252.0 - inv2 * (1.0 / 240.0 - inv2 * (1.0 / 132.0)))));
    acc + x.ln() - 0.5 / x - series
}

/// The polygamma function `ψ⁽ᵐ⁾(x)` for a whole `m >= 0` (NaN otherwise, as in JAX):
/// `(-1)^(m+1) m! ζ(m+1, x)` with the Hurwitz zeta function.
pub(crate) fn polygamma(m: f64, x: f64) -> f64 {
    if m.is_nan() || x.is_nan() || m < 0.0 || m != m.floor() {
        return f64::NAN;
    }
    if m == 0.0 {
        return digamma(x);
    }
    let factorial: f64 = (1..=m as u64).map(|k| k as f64).product();
    let sign = if (m as u64) % 2 == 1 { 1.0 } else { -1.0 };
    sign * factorial * hurwitz_zeta(m + 1.0, x)
}

/// `ζ(s, x) = Σ_k (x + k)^-s` for `s > 1`, by Euler–Maclaurin summation (NaN for `x <= 0`).
fn hurwitz_zeta(s: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return if x == x.floor() {
            f64::INFINITY
        } else {
            f64::NAN
        };
    }
    const N: usize = 12;
    let head: f64 = (0..N).map(|k| (x + k as f64).powf(-s)).sum();
    let a = x + N as f64;
    let mut tail = a.powf(1.0 - s) / (s - 1.0) + 0.5 * a.powf(-s);
    // B2k / (2k)! for k = 1..6.
    let b = [
        1.0 / 12.0,
        -1.0 / 720.0,
        1.0 / 30_240.0,
        -1.0 / 1_209_600.0,
        1.0 / 47_900_160.0,
        -691.0 / 1_307_674_368_000.0,
    ];
    // The rising product s (s+1) ... (s+2k-2) times a^(-s-2k+1).
    let mut rising = s;
    let mut power = a.powf(-s - 1.0);
    for (k, coef) in b.iter().enumerate() {
        tail += coef * rising * power;
        let j = 2.0 * k as f64;
        rising *= (s + j + 1.0) * (s + j + 2.0);
        power /= a * a;
    }
    head + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_inv_inverts_erf() {
        for &x in &[-3.5, -1.2, -0.3, 0.0, 1e-8, 0.7, 2.0, 3.5] {
            let y = libm::erf(x);
            assert!((erf_inv(y) - x).abs() < 1e-9 * (1.0 + x.abs()), "{x}");
        }
        assert_eq!(erf_inv(1.0), f64::INFINITY);
        assert!(erf_inv(1.5).is_nan());
    }

    #[test]
    fn the_f32_erf_inv_agrees_with_the_f64_one_within_f32_rounding() {
        for i in 1..400 {
            let y = -1.0 + f64::from(i) / 200.0;
            let (single, double) = (erf_inv_f32(y as f32), erf_inv(f64::from(y as f32)));
            assert!(
                (f64::from(single) - double).abs() <= 8.0 * f64::from(f32::EPSILON) * double.abs(),
                "{y}: {single} vs {double}"
            );
        }
        assert_eq!(erf_inv_f32(1.0), f32::INFINITY);
        assert_eq!(erf_inv_f32(-1.0), f32::NEG_INFINITY);
    }

    #[test]
    fn digamma_and_polygamma_match_known_values() {
        let euler = 0.577_215_664_901_532_9;
        assert!((digamma(1.0) + euler).abs() < 1e-13);
        assert!((digamma(0.5) + euler + 2.0 * 2f64.ln()).abs() < 1e-13);
        // ψ(-0.5) = ψ(0.5) + 2.
        assert!((digamma(-0.5) - digamma(0.5) - 2.0).abs() < 1e-13);
        // ψ'(1) = π²/6, ψ''(1) = -2 ζ(3).
        assert!((polygamma(1.0, 1.0) - PI * PI / 6.0).abs() < 1e-13);
        assert!((polygamma(2.0, 1.0) + 2.0 * 1.202_056_903_159_594_2).abs() < 1e-13);
        assert!(polygamma(1.5, 1.0).is_nan());
    }
}
