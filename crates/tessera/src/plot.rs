//! The loss curve of a training run as an SVG file (`plotters`, SVG back end): the training loss
//! per step and, where measured, the eval loss.

use std::path::Path;

use plotters::prelude::*;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the loss curve {path}: {reason}")]
pub struct PlotError {
    /// The file.
    pub path: String,
    /// What went wrong.
    pub reason: String,
}

/// Writes the curves `(step, loss)` of `train` and `eval` to `path` with `title` above them.
/// Non-finite losses are left out.
pub fn loss_curve_svg(
    path: &Path,
    title: &str,
    train: &[(u64, f64)],
    eval: &[(u64, f64)],
) -> Result<(), PlotError> {
    let fail = |reason: String| PlotError {
        path: path.display().to_string(),
        reason,
    };
    let finite = |points: &[(u64, f64)]| -> Vec<(u64, f64)> {
        points
            .iter()
            .copied()
            .filter(|(_, l)| l.is_finite() && *l > 0.0)
            .collect()
    };
    let (train, eval) = (finite(train), finite(eval));
    // Losses are positive and finite from here on (cross-entropies).
    let all = train.iter().chain(&eval);
    let last_step = all
        .clone()
        .map(|(s, _)| *s)
        .max()
        .ok_or_else(|| fail("no finite loss to draw".into()))?;
    let low = all.clone().map(|(_, l)| *l).fold(f64::INFINITY, f64::min);
    let high = all.map(|(_, l)| *l).fold(0.0, f64::max);
    let pad = ((high - low) * 0.05).max(1e-3);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0u64..last_step.max(1), low - pad..high + pad)
        .map_err(|e| fail(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .y_labels(8)
        .y_label_formatter(&|v| format!("{v:.2}"))
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    chart
        .draw_series(LineSeries::new(train, &BLUE))
        .map_err(|e| fail(e.to_string()))?
        .label("train")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    if !eval.is_empty() {
        chart
            .draw_series(LineSeries::new(eval.clone(), &RED))
            .map_err(|e| fail(e.to_string()))?
            .label("eval")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart
            .draw_series(eval.iter().map(|&p| Circle::new(p, 3, RED.filled())))
            .map_err(|e| fail(e.to_string()))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_svg_has_both_curves_and_their_legend() {
        let path = std::env::temp_dir().join(format!("tessera-plot-{}.svg", std::process::id()));
        let train: Vec<(u64, f64)> = (0..50)
            .map(|s| (s, 5.5 * (-0.03 * s as f64).exp() + 1.0))
            .collect();
        let eval = vec![(10, 4.8), (20, 3.9), (30, 3.1), (40, 2.6), (49, f64::NAN)];
        loss_curve_svg(&path, "Llama 1M on corpus.txt", &train, &eval).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        for text in ["Llama 1M on corpus.txt", "train", "eval", "step", "loss"] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(svg.matches("<polyline").count() >= 2, "two curves");
        // TESSERA_KEEP_PLOT=1 keeps the file to look at (render it with rsvg-convert).
        if std::env::var_os("TESSERA_KEEP_PLOT").is_none() {
            std::fs::remove_file(&path).unwrap();
        }
        let empty = path.with_extension("empty.svg");
        let err = loss_curve_svg(&empty, "x", &[(0, f64::NAN)], &[]).unwrap_err();
        assert!(err.to_string().contains("no finite loss"), "{err}");
    }
}
