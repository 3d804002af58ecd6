//! The reliability plot of a reward model: observed success against mean predicted
//! probability in each bin (the diagonal is perfect calibration), and below it the
//! episodes per bin.

use super::metrics::RewardMetrics;
use crate::train::plots::{font, FAMILY};
use anyhow::anyhow;
use plotters::prelude::*;
use std::path::Path;

/// Draw `m`'s reliability plot into a PNG at `path` (text only when a font is found).
pub fn write_reliability_plot(m: &RewardMetrics, path: &Path) -> anyhow::Result<()> {
    let e = |x: &dyn std::fmt::Display| anyhow!("plot {}: {x}", path.display());
    let text = font().is_some();
    let root = BitMapBackend::new(path, (640, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (top, bottom) = root.split_vertically(520);

    let mut b = ChartBuilder::on(&top);
    b.margin(16);
    if text {
        let title = format!(
            "reliability (held out: n={}, AUC {}, ECE {:.3})",
            m.episodes,
            m.auc.map_or("-".into(), |a| format!("{a:.3}")),
            m.ece
        );
        b.caption(title, (FAMILY, 20)).x_label_area_size(40).y_label_area_size(56);
    }
    let mut chart = b.build_cartesian_2d(0f64..1f64, 0f64..1f64).map_err(|x| e(&x))?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(RGBColor(235, 235, 235));
    if text {
        mesh.x_desc("mean predicted P(success)").y_desc("observed success").label_style((FAMILY, 13));
    }
    mesh.draw().map_err(|x| e(&x))?;
    chart
        .draw_series(LineSeries::new([(0.0, 0.0), (1.0, 1.0)], BLACK.mix(0.4).stroke_width(1)))
        .map_err(|x| e(&x))?;
    let pts: Vec<(f64, f64)> =
        m.bins.iter().filter(|b| b.count > 0).map(|b| (b.mean_predicted, b.observed)).collect();
    let blue = RGBColor(31, 119, 180);
    chart.draw_series(LineSeries::new(pts.iter().copied(), blue.stroke_width(2))).map_err(|x| e(&x))?;
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, blue.filled()))).map_err(|x| e(&x))?;

    let max = m.bins.iter().map(|b| b.count).max().unwrap_or(0).max(1) as f64;
    let mut b = ChartBuilder::on(&bottom);
    b.margin(16);
    if text {
        b.x_label_area_size(36).y_label_area_size(56);
    }
    let mut hist = b.build_cartesian_2d(0f64..1f64, 0f64..max * 1.1).map_err(|x| e(&x))?;
    let mut mesh = hist.configure_mesh();
    mesh.light_line_style(RGBColor(235, 235, 235));
    if text {
        mesh.x_desc("predicted P(success)").y_desc("episodes").label_style((FAMILY, 13));
    }
    mesh.draw().map_err(|x| e(&x))?;
    hist.draw_series(m.bins.iter().map(|b| {
        Rectangle::new([(b.lo + 0.005, 0.0), (b.hi - 0.005, b.count as f64)], blue.mix(0.6).filled())
    }))
    .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
