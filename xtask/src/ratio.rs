//! Ratios of Tessera to JAX over rounds, as the benchmark page states them: every round's
//! ratio, their median and spread, and "tie" where the spread crosses 1.0, so that no figure is
//! quoted more finely than the rounds agree.

/// The median of `values` (the mean of the middle two for an even count); NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The smallest and largest of `values`.
pub fn spread(values: &[f64]) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// "1.08×, 0.97×, 1.12×": every round's ratio.
pub fn each(ratios: &[f64]) -> String {
    let cells: Vec<String> = ratios.iter().map(|r| format!("{r:.2}×")).collect();
    cells.join(", ")
}

/// "1.26× (1.21×–1.30×)", or "tie (0.96×–1.04×)" when the rounds' ratios lie on both sides
/// of 1.0 (or touch it).
pub fn verdict(ratios: &[f64]) -> String {
    let (low, high) = spread(ratios);
    if low <= 1.0 && high >= 1.0 {
        format!("tie ({low:.2}×–{high:.2}×)")
    } else {
        format!("{:.2}× ({low:.2}×–{high:.2}×)", median(ratios))
    }
}

/// Which way a target bounds a ratio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The ratio must be at most the target (a time).
    AtMost,
    /// The ratio must be at least the target (a throughput).
    AtLeast,
}

/// "≤ 1.0×" or "≥ 1.0×".
pub fn target_cell(bound: Bound, target: f64) -> String {
    match bound {
        Bound::AtMost => format!("≤ {target:.1}×"),
        Bound::AtLeast => format!("≥ {target:.1}×"),
    }
}

/// "met in every round", "missed in every round", or "not settled: N of M rounds met" when
/// the rounds disagree.
pub fn check(ratios: &[f64], bound: Bound, target: f64) -> String {
    let met = ratios
        .iter()
        .filter(|r| match bound {
            Bound::AtMost => **r <= target,
            Bound::AtLeast => **r >= target,
        })
        .count();
    match met {
        0 => "missed in every round".into(),
        n if n == ratios.len() => "met in every round".into(),
        n => format!("not settled: {n} of {} rounds met", ratios.len()),
    }
}

/// `rounds` rounds of the runs `sides`, each round `{"round": r, "order": [...], side: what
/// `measure(side, round)` returned, ...}`, the order reversed every other round so that no side
/// always goes first.
pub fn alternating_rounds(
    rounds: usize,
    sides: &[&str],
    mut measure: impl FnMut(&str, usize) -> anyhow::Result<serde_json::Value>,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut all = Vec::new();
    for round in 1..=rounds {
        let mut order = sides.to_vec();
        if round % 2 == 0 {
            order.reverse();
        }
        let mut entry = serde_json::json!({ "round": round, "order": order });
        for side in order {
            entry[side] = measure(side, round)?;
        }
        all.push(entry);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_across_one_is_a_tie() {
        assert_eq!(verdict(&[0.97, 1.02, 1.05]), "tie (0.97×–1.05×)");
        assert_eq!(verdict(&[1.21, 1.30, 1.26]), "1.26× (1.21×–1.30×)");
        assert_eq!(verdict(&[0.8, 0.9]), "0.85× (0.80×–0.90×)");
        assert_eq!(each(&[1.0, 1.234]), "1.00×, 1.23×");
    }

    #[test]
    fn targets_are_checked_round_by_round() {
        assert_eq!(
            check(&[0.9, 0.95], Bound::AtMost, 1.0),
            "met in every round"
        );
        assert_eq!(
            check(&[0.9, 1.05], Bound::AtMost, 1.0),
            "not settled: 1 of 2 rounds met"
        );
        assert_eq!(
            check(&[0.9, 0.95], Bound::AtLeast, 1.0),
            "missed in every round"
        );
        assert_eq!(median(&[3.0, 1.0, 2.0, 4.0]), 2.5);
    }
}
