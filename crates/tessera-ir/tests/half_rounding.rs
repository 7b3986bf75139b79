//! `bf16` and `f16` values rounded from `f64` once, to nearest with ties to even: checked at
//! values just off a tie (which rounding through `f32`, or reading only an `f64`'s top bits,
//! gets wrong), at subnormals, overflow, infinities and NaN, and against an exact reference
//! (the nearest of the format's values, found by searching them) on random and near-tie inputs.

#![allow(clippy::unwrap_used, missing_docs)]

use proptest::prelude::*;
use tessera_ir::DType;
use tessera_ir::dtype::{bf16_from_f64, f16_from_f64};

/// A 16-bit float format: its largest finite bit pattern and how a bit pattern reads as `f64`.
#[derive(Clone, Copy)]
struct Format {
    dtype: DType,
    max_bits: u16,
    value: fn(u16) -> f64,
    round: fn(f64) -> u16,
}

const BF16: Format = Format {
    dtype: DType::BF16,
    max_bits: 0x7F7F,
    value: |b| f64::from(half::bf16::from_bits(b)),
    round: |x| bf16_from_f64(x).to_bits(),
};

const F16: Format = Format {
    dtype: DType::F16,
    max_bits: 0x7BFF,
    value: |b| f64::from(half::f16::from_bits(b)),
    round: |x| f16_from_f64(x).to_bits(),
};

impl Format {
    /// The value of the positive bit pattern `b`, with the one past the largest finite value
    /// (infinity) read as the power of two where the exponent range ends, as rounding does.
    fn magnitude(self, b: u16) -> f64 {
        if b > self.max_bits {
            2.0 * self.top()
        } else {
            (self.value)(b)
        }
    }

    /// The largest power of two of the format (its top binade's start).
    fn top(self) -> f64 {
        let max = (self.value)(self.max_bits);
        2f64.powi(max.log2().floor() as i32)
    }

    /// The exact nearest bit pattern to `x` (finite): a binary search for the largest
    /// magnitude not above `|x|`, then the nearer of it and the next, ties to the even pattern.
    fn reference(self, x: f64) -> u16 {
        let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
        let a = x.abs();
        let (mut lo, mut hi) = (0u16, self.max_bits + 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.magnitude(mid) <= a {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if self.magnitude(hi) <= a {
            lo = hi;
        }
        // Differences of neighbours within a factor of two are exact in f64 (Sterbenz).
        let up = lo + 1;
        let (below, above) = (a - self.magnitude(lo), self.magnitude(up) - a);
        let pick = if below < above || (below == above && lo % 2 == 0) || lo > self.max_bits {
            lo
        } else {
            up
        };
        sign | pick
    }

    /// The midpoint between pattern `b` and the next (exact in f64).
    fn tie(self, b: u16) -> f64 {
        (self.magnitude(b) + self.magnitude(b + 1)) / 2.0
    }
}

/// The f64 `steps` units in the last place away from `x` (toward +infinity when positive).
fn nudge(x: f64, steps: i64) -> f64 {
    f64::from_bits((x.to_bits() as i64 + steps) as u64)
}

fn check(format: Format, x: f64) {
    let got = (format.round)(x);
    let want = format.reference(x);
    assert_eq!(
        got,
        want,
        "{:?} of {x:e} ({:#018x})",
        format.dtype,
        x.to_bits()
    );
    // DType::round, what the interpreter stores, is the same value.
    let stored = format.dtype.round(x);
    assert_eq!(stored.to_bits(), (format.value)(want).to_bits(), "{x:e}");
}

#[test]
fn the_reference_finds_known_roundings() {
    assert_eq!(BF16.top(), 2f64.powi(127));
    assert_eq!(F16.top(), 32768.0);
    assert_eq!(BF16.magnitude(0x7F80), 2f64.powi(128));
    assert_eq!(F16.magnitude(0x7C00), 65536.0);
    assert_eq!(BF16.reference(1.0), 0x3F80);
    assert_eq!(
        BF16.reference(1.0 + 2f64.powi(-8)),
        0x3F80,
        "a tie goes to even"
    );
    assert_eq!(
        F16.reference(65520.0),
        0x7C00,
        "the tie past the maximum overflows"
    );
    assert_eq!(F16.reference(2f64.powi(-25)), 0x0000);
}

#[test]
fn values_just_off_a_tie_round_to_the_nearer_side() {
    for format in [BF16, F16] {
        for b in [
            0x0001,
            0x0002,
            0x0100,
            0x3F80,
            0x3F81,
            0x4049,
            format.max_bits - 1,
        ] {
            let tie = format.tie(b);
            for x in [tie, -tie] {
                check(format, x);
                for steps in [1, 2, 1 << 20, 1 << 28, 1 << 31] {
                    check(format, nudge(x, steps));
                    check(format, nudge(x, -steps));
                }
            }
        }
    }
    // The cases double rounding gets wrong: the f64 rounds to the f32 tie first, or the excess
    // lies below the top 32 bits that `half` reads.
    let above = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
    assert_eq!(bf16_from_f64(above).to_bits(), 0x3F81);
    assert_eq!(bf16_from_f64(-above).to_bits(), 0xBF81);
    assert_eq!(
        bf16_from_f64(1.0 + 2f64.powi(-8) + 2f64.powi(-40)).to_bits(),
        0x3F81
    );
    assert_eq!(
        f16_from_f64(1.0 + 2f64.powi(-11) + 2f64.powi(-40)).to_bits(),
        0x3C01
    );
    assert_eq!(
        f16_from_f64(1.0 + 2f64.powi(-11) + 2f64.powi(-30)).to_bits(),
        0x3C01
    );
}

#[test]
fn specials_overflow_and_subnormals() {
    for format in [BF16, F16] {
        let max = (format.value)(format.max_bits);
        let round = |x: f64| (format.value)((format.round)(x));
        assert_eq!(round(f64::INFINITY), f64::INFINITY);
        assert_eq!(round(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert!(round(f64::NAN).is_nan());
        assert_eq!(round(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(round(f64::MAX), f64::INFINITY);
        assert_eq!(round(1e300), f64::INFINITY);
        assert_eq!(round(-1e39), f64::NEG_INFINITY);
        assert_eq!(round(max), max);
        let tie = format.tie(format.max_bits);
        assert_eq!(
            round(tie),
            f64::INFINITY,
            "the tie past the maximum overflows"
        );
        assert_eq!(round(nudge(tie, -1)), max);
        let least = (format.value)(1);
        assert_eq!(
            round(least / 2.0),
            0.0,
            "half the least subnormal ties to zero"
        );
        assert_eq!(round(nudge(least / 2.0, 1)), least);
        assert_eq!(round(f64::MIN_POSITIVE), 0.0);
        assert_eq!(round(-5e-324).to_bits(), (-0.0f64).to_bits());
    }
}

/// Finite f64s of any magnitude, and f64s within a few units of a tie of either format.
fn inputs() -> impl Strategy<Value = f64> {
    let wide = any::<u64>()
        .prop_map(f64::from_bits)
        .prop_filter("finite", |x| x.is_finite());
    let near = |format: Format| {
        (0..=format.max_bits, -4i64..=4, any::<bool>()).prop_map(move |(b, steps, neg)| {
            let x = nudge(format.tie(b), steps);
            if neg { -x } else { x }
        })
    };
    let in_range = (-40.0f64..40.0).prop_map(f64::exp2);
    prop_oneof![wide, near(BF16), near(F16), in_range]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn rounding_matches_the_exact_reference(x in inputs()) {
        check(BF16, x);
        check(F16, x);
    }
}
