//! PNG plots of a run's `metrics.jsonl` into `plots/`: reward, success, loss, KL and
//! entropy against environment steps, success also against wall-clock time; PPO runs
//! also the critic's value loss and explained variance.
//!
//! Text needs a TrueType font (plotters' `ab_glyph` backend has none built in): the first
//! of `$GUIRL_FONT`, DejaVu Sans, Liberation Sans, or any `.ttf` under /usr/share/fonts.
//! Without one the plots are drawn without titles, labels or legends, and a warning says
//! so (install `fonts-dejavu-core`).

use super::metrics::{read_metrics, IterationMetrics};
use anyhow::anyhow;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The family name fonts are registered under.
pub(crate) const FAMILY: &str = "sans-serif";

/// Whether plots can have text (a font was found and registered).
pub(crate) fn has_font() -> bool {
    font().is_some()
}

/// Where a font was found, if any (looked up and registered once per process).
pub(crate) fn font() -> Option<&'static Path> {
    static FONT: OnceLock<Option<PathBuf>> = OnceLock::new();
    FONT.get_or_init(|| {
        let found = find_font()?;
        let bytes: &'static [u8] = Box::leak(std::fs::read(&found).ok()?.into_boxed_slice());
        match plotters::style::register_font(FAMILY, FontStyle::Normal, bytes) {
            Ok(()) => Some(found),
            Err(_) => {
                tracing::warn!("plots: {} is not a usable font; plots will have no text", found.display());
                None
            }
        }
    })
    .as_deref()
    .or_else(|| {
        static WARNED: OnceLock<()> = OnceLock::new();
        WARNED.get_or_init(|| {
            tracing::warn!(
                "plots: no TrueType font found (set GUIRL_FONT or install fonts-dejavu-core); \
                 drawing plots without titles, labels or legends"
            )
        });
        None
    })
}

fn find_font() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GUIRL_FONT").map(PathBuf::from).filter(|p| p.is_file()) {
        return Some(p);
    }
    let known = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/System/Library/Fonts/Supplemental/Arial.ttf",
    ];
    if let Some(p) = known.iter().map(PathBuf::from).find(|p| p.is_file()) {
        return Some(p);
    }
    // any .ttf, two levels deep
    let mut dirs = vec![(PathBuf::from("/usr/share/fonts"), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        for e in std::fs::read_dir(&dir).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() && depth < 2 {
                dirs.push((p, depth + 1));
            } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf")) {
                return Some(p);
            }
        }
    }
    None
}

/// One line of a plot.
pub(crate) struct Line {
    /// Its legend entry.
    pub label: String,
    /// Its colour.
    pub color: RGBColor,
    /// Its (x, y) points, in order.
    pub points: Vec<(f64, f64)>,
}

fn line(
    label: &'static str,
    color: RGBColor,
    ms: &[IterationMetrics],
    xy: impl Fn(&IterationMetrics) -> Option<(f64, f64)>,
) -> Line {
    let points = ms.iter().filter_map(xy).filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
    Line { label: label.to_string(), color, points }
}

/// Draw `lines` into a PNG at `path` (`y_unit`: the y axis spans at least 0..1); text
/// only with `text` (see [`has_font`]).
pub(crate) fn draw(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    y_unit: bool,
    lines: &[Line],
    text: bool,
) -> anyhow::Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    let pts = lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        (x0, x1) = (x0 - 1.0, x1 + 1.0);
    }
    if y_unit {
        (y0, y1) = (y0.min(0.0), y1.max(1.0));
    }
    let pad = if y1 > y0 { 0.05 * (y1 - y0) } else { 0.5f64.max(0.05 * y0.abs()) };
    (y0, y1) = (y0 - pad, y1 + pad);
    let (x_span, y_span) = (x1 - x0, y1 - y0);

    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(16);
    if text {
        builder.caption(title, (FAMILY, 24)).x_label_area_size(44).y_label_area_size(64);
    }
    let mut chart = builder.build_cartesian_2d(x0..x1, y0..y1).map_err(|x| e(&x))?;
    let fx = |v: &f64| tick(*v, x_span);
    let fy = |v: &f64| tick(*v, y_span);
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(RGBColor(235, 235, 235));
    if text {
        mesh.x_label_formatter(&fx).y_label_formatter(&fy);
        mesh.x_desc(x_desc).y_desc(y_desc).label_style((FAMILY, 14)).axis_desc_style((FAMILY, 16));
    }
    mesh.draw().map_err(|x| e(&x))?;
    let drawn: Vec<&Line> = lines.iter().filter(|l| !l.points.is_empty()).collect();
    for (i, l) in drawn.iter().enumerate() {
        // A line a later one draws over exactly (GRPO's mean reward is its group baseline;
        // with no KL or entropy term the loss is its policy term) is drawn wider, so that
        // it shows as a border, and its legend says which line covers it.
        let under = drawn[i + 1..].iter().find(|o| o.points == l.points);
        let width = if under.is_some() { 6 } else { 2 };
        let style = l.color.stroke_width(width);
        let s = chart.draw_series(LineSeries::new(l.points.iter().copied(), style)).map_err(|x| e(&x))?;
        if text {
            let c = l.color;
            let label = match under {
                Some(o) => format!("{} (= {})", l.label, o.label),
                None => l.label.clone(),
            };
            s.label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(width)));
        }
        if l.points.len() == 1 {
            chart
                .draw_series(l.points.iter().map(|&p| Circle::new(p, 3, l.color.filled())))
                .map_err(|x| e(&x))?;
        }
    }
    if text && lines.len() > 1 {
        chart
            .configure_series_labels()
            .position(legend_corner(lines, (x0, x1), (y0, y1)))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .label_font((FAMILY, 14))
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The corner whose box (40 % of each axis) holds the fewest points, so the legend hides
/// the least of the lines: upper left first on a tie, then upper right, lower right, lower
/// left (curves near 1 leave the lower corners free; rising ones the upper left).
fn legend_corner(lines: &[Line], (x0, x1): (f64, f64), (y0, y1): (f64, f64)) -> SeriesLabelPosition {
    let (wx, wy) = (0.4 * (x1 - x0), 0.4 * (y1 - y0));
    let corners = [
        (SeriesLabelPosition::UpperLeft, x0..=x0 + wx, y1 - wy..=y1),
        (SeriesLabelPosition::UpperRight, x1 - wx..=x1, y1 - wy..=y1),
        (SeriesLabelPosition::LowerRight, x1 - wx..=x1, y0..=y0 + wy),
        (SeriesLabelPosition::LowerLeft, x0..=x0 + wx, y0..=y0 + wy),
    ];
    let points = || lines.iter().flat_map(|l| l.points.iter());
    corners
        .into_iter()
        .min_by_key(|(_, xs, ys)| points().filter(|(x, y)| xs.contains(x) && ys.contains(y)).count())
        .map_or(SeriesLabelPosition::UpperLeft, |(c, _, _)| c)
}

/// A tick label with as many decimals as the axis span needs (`5000`, `0.25`, `0.002`).
fn tick(v: f64, span: f64) -> String {
    let decimals = (1.0 - span.abs().max(1e-12).log10().floor()).clamp(0.0, 8.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].to_string()
    } else {
        s
    }
}

const BLUE_: RGBColor = RGBColor(31, 119, 180);
const ORANGE: RGBColor = RGBColor(255, 127, 14);
const GREEN_: RGBColor = RGBColor(44, 160, 44);
const RED_: RGBColor = RGBColor(214, 39, 40);

/// Draw every plot of `metrics` into `dir` (created); returns the files written.
pub fn write_plots(metrics: &[IterationMetrics], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_plots_with(metrics, dir, font().is_some())
}

/// Whether a metrics line comes from a training iteration (iteration 0 holds only the
/// starting policy's evaluation).
fn train(m: &IterationMetrics) -> bool {
    m.iteration > 0
}

/// Read `<run>/metrics.jsonl` and draw `<run>/plots/`.
pub fn plot_run(run_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let ms = read_metrics(&run_dir.join("metrics.jsonl"))?;
    write_plots(&ms, &run_dir.join("plots"))
}

fn write_plots_with(ms: &[IterationMetrics], dir: &Path, text: bool) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow!("cannot create {}: {e}", dir.display()))?;
    let steps = "environment steps";
    let at_steps = |f: fn(&IterationMetrics) -> f64| {
        move |m: &IterationMetrics| train(m).then(|| (m.env_steps as f64, f(m)))
    };
    let eval_at = |m: &IterationMetrics| m.eval_success.map(|s| (m.env_steps as f64, s));
    let mut plots: Vec<(&str, &str, &str, &str, Vec<Line>)> = vec![
        (
            "reward.png",
            "Episode reward",
            steps,
            "reward",
            vec![
                line("mean reward", BLUE_, ms, at_steps(|m| m.reward_mean)),
                line("group baseline", ORANGE, ms, at_steps(|m| m.baseline_mean)),
                line("eval reward", GREEN_, ms, |m| m.eval_reward.map(|r| (m.env_steps as f64, r))),
            ],
        ),
        (
            "success.png",
            "Success rate",
            steps,
            "success rate",
            vec![
                line("train", BLUE_, ms, at_steps(|m| m.success_rate)),
                line("eval (held-out seeds)", GREEN_, ms, eval_at),
            ],
        ),
        (
            "success_wall.png",
            "Success rate against wall-clock time",
            "wall-clock minutes",
            "success rate",
            vec![
                line("train", BLUE_, ms, |m| train(m).then(|| (m.wall_secs / 60.0, m.success_rate))),
                line("eval (held-out seeds)", GREEN_, ms, |m| {
                    m.eval_success.map(|s| (m.wall_secs / 60.0, s))
                }),
            ],
        ),
        (
            "loss.png",
            "Loss",
            steps,
            "loss",
            vec![
                line("total", BLUE_, ms, at_steps(|m| m.loss)),
                line("policy term", ORANGE, ms, at_steps(|m| m.policy_loss)),
            ],
        ),
        (
            "kl.png",
            "KL divergence",
            steps,
            "KL",
            vec![
                line("KL(π ‖ π_ref)", BLUE_, ms, at_steps(|m| m.kl)),
                line("KL(π_old ‖ π)", RED_, ms, at_steps(|m| m.approx_kl_old)),
            ],
        ),
        (
            "entropy.png",
            "Policy entropy",
            steps,
            "entropy (nats / token)",
            vec![line("entropy", BLUE_, ms, at_steps(|m| m.entropy))],
        ),
    ];
    if ms.iter().any(|m| m.value_loss.is_some()) {
        // PPO's critic.
        plots.push((
            "value.png",
            "Critic",
            steps,
            "value loss / explained variance",
            vec![
                line("value loss", BLUE_, ms, |m| m.value_loss.map(|v| (m.env_steps as f64, v))),
                line("explained variance", GREEN_, ms, |m| {
                    m.explained_variance.map(|v| (m.env_steps as f64, v))
                }),
            ],
        ));
    }
    let mut out = Vec::new();
    if let Some(path) = task_plot(ms, dir, text)? {
        out.push(path);
    }
    for (file, title, x, y, mut lines) in plots {
        // drop optional lines with no points (e.g. no evaluation yet)
        lines.retain(|l| !l.points.is_empty() || l.label == "mean reward" || l.label == "train");
        let path = dir.join(file);
        draw(&path, title, (x, y), file.starts_with("success"), &lines, text)?;
        out.push(path);
    }
    Ok(out)
}

/// With several tasks, `tasks.png`: each task's training success against env steps (the
/// first ten tasks by id; the rest are in `metrics.jsonl`).
fn task_plot(ms: &[IterationMetrics], dir: &Path, text: bool) -> anyhow::Result<Option<PathBuf>> {
    const PALETTE: [RGBColor; 10] = [
        BLUE_,
        ORANGE,
        GREEN_,
        RED_,
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    let ids: std::collections::BTreeSet<&String> = ms.iter().flat_map(|m| m.task_success.keys()).collect();
    if ids.is_empty() {
        return Ok(None);
    }
    let lines: Vec<Line> = ids
        .into_iter()
        .take(PALETTE.len())
        .zip(PALETTE)
        .map(|(id, color)| Line {
            label: id.clone(),
            color,
            points: ms.iter().filter_map(|m| Some((m.env_steps as f64, *m.task_success.get(id)?))).collect(),
        })
        .collect();
    let path = dir.join("tasks.png");
    draw(&path, "Training success by task", ("environment steps", "success rate"), true, &lines, text)?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_goes_where_the_lines_are_not() {
        let line = |points: Vec<(f64, f64)>| Line { label: "l".into(), color: RED_, points };
        let at = |ls: &[Line]| legend_corner(ls, (0.0, 1.0), (0.0, 1.0));
        // Curves near 1 (a strong clone): the upper corners are taken.
        let high = [line(vec![(0.0, 0.91), (0.5, 0.95), (1.0, 0.96)])];
        assert!(matches!(at(&high), SeriesLabelPosition::LowerRight));
        // Curves near 0.3: the upper left is free.
        let low = [line(vec![(0.0, 0.24), (0.5, 0.4), (1.0, 0.36)])];
        assert!(matches!(at(&low), SeriesLabelPosition::UpperLeft));
        // A falling loss starts in the upper left.
        let falling = [line(vec![(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)])];
        assert!(matches!(at(&falling), SeriesLabelPosition::UpperRight));
    }

    /// A synthetic run: the starting policy's evaluation (iteration 0), then success
    /// climbing from 0 to ~0.9 with noise, eval every 5 iterations.
    fn synthetic(n: u64) -> Vec<IterationMetrics> {
        let baseline =
            IterationMetrics { eval_success: Some(0.02), eval_reward: Some(-0.5), ..Default::default() };
        std::iter::once(baseline)
            .chain((0..n).map(|i| {
                let t = i as f64 / n as f64;
                let wobble = ((i * 7919) % 13) as f64 / 13.0 - 0.5;
                let success = (0.9 / (1.0 + (-10.0 * (t - 0.4)).exp()) + 0.05 * wobble).clamp(0.0, 1.0);
                IterationMetrics {
                    iteration: i + 1,
                    env_steps: 640 * (i + 1),
                    reward_mean: success,
                    baseline_mean: success - 0.02,
                    success_rate: success,
                    loss: -0.05 * (1.0 - t) + 0.01 * wobble,
                    policy_loss: -0.06 * (1.0 - t) + 0.01 * wobble,
                    kl: 0.02 * t,
                    approx_kl_old: 0.002 + 0.001 * wobble,
                    entropy: 2.5 * (1.0 - 0.6 * t),
                    eval_success: (i % 5 == 4).then_some((success - 0.05).max(0.0)),
                    wall_secs: 12.5 * (i + 1) as f64,
                    ..Default::default()
                }
            }))
            .collect()
    }

    fn check_png(p: &Path) {
        let img = image::open(p).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (800, 480));
        // not blank: some pixels are neither white nor grid grey
        let inked = img.pixels().filter(|px| px.0.iter().any(|&c| c < 200)).count();
        assert!(inked > 500, "{} looks empty ({inked} dark pixels)", p.display());
    }

    #[test]
    fn plots_from_a_metrics_file() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let mut w = crate::train::MetricsWriter::open(&run.join("metrics.jsonl")).unwrap();
        for m in synthetic(60) {
            w.append(&m).unwrap();
        }
        let files = plot_run(run).unwrap();
        let names: Vec<String> =
            files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(
            names,
            ["reward.png", "success.png", "success_wall.png", "loss.png", "kl.png", "entropy.png"]
        );
        for f in &files {
            check_png(f);
        }
        if let Ok(keep) = std::env::var("GUIRL_KEEP_PLOTS") {
            for f in &files {
                std::fs::copy(f, Path::new(&keep).join(f.file_name().unwrap())).unwrap();
            }
        }
    }

    #[test]
    fn plots_without_a_font_or_with_few_points() {
        let dir = tempfile::tempdir().unwrap();
        // no text at all: must not touch the font machinery
        for f in write_plots_with(&synthetic(10), dir.path(), false).unwrap() {
            check_png(&f);
            if let Ok(keep) = std::env::var("GUIRL_KEEP_PLOTS") {
                let name = format!("nofont_{}", f.file_name().unwrap().to_string_lossy());
                std::fs::copy(&f, Path::new(&keep).join(name)).unwrap();
            }
        }
        // one iteration, and none
        write_plots(&synthetic(1), &dir.path().join("one")).unwrap();
        write_plots(&[], &dir.path().join("none")).unwrap();
    }

    /// A line that a later one covers exactly still shows (as a border round it).
    #[test]
    fn a_line_drawn_over_exactly_still_shows() {
        let dir = tempfile::tempdir().unwrap();
        let points: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, (i % 3) as f64)).collect();
        let mk = |label: &str, color| Line { label: label.into(), color, points: points.clone() };
        let path = dir.path().join("same.png");
        draw(&path, "t", ("x", "y"), false, &[mk("mean", BLUE_), mk("baseline", ORANGE)], false).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        let count = |c: RGBColor| img.pixels().filter(|p| p.0 == [c.0, c.1, c.2]).count();
        assert!(count(ORANGE) > 100, "the top line is drawn");
        assert!(count(BLUE_) > 100, "the covered line shows: {} pixels", count(BLUE_));
    }
}
