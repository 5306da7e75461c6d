//! The pair plot: each parameter's marginal histogram on the diagonal, each pair's draws
//! below it, one colour per chain; in simulations an exact posterior sample beneath them
//! (grey points, black histograms), so that a part of the posterior the chains miss shows.
use std::collections::HashSet;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{
    AXIS_SIZE, Draws, FONT, Figure, LEGEND_WIDTH, TICK_SIZE, TITLE_HEIGHT, TITLE_SIZE,
    chain_colour, legend, padded_range, thinned,
};

/// Most dots of one chain in a scatter panel, and of the exact sample.
const MAX_POINTS: usize = 200;
const MAX_EXACT_POINTS: usize = 400;
const BINS: usize = 40;

pub(super) struct PairPlot<'a> {
    draws: &'a Draws,
    exact: Option<&'a [Vec<f64>]>,
    title: &'a str,
    /// Each parameter's axis, wide enough for the chains' and the exact draws.
    ranges: Vec<Range<f64>>,
}

impl<'a> PairPlot<'a> {
    pub(super) fn new(draws: &'a Draws, exact: Option<&'a [Vec<f64>]>, title: &'a str) -> Self {
        let ranges = (0..draws.dim)
            .map(|j| {
                let exact = exact.into_iter().flatten().map(move |x| x[j]);
                padded_range(draws.parameter(j).chain(exact))
            })
            .collect();
        PairPlot {
            draws,
            exact,
            title,
            ranges,
        }
    }

    /// Side of one panel: smaller panels for many parameters, so the figure stays readable.
    fn panel(&self) -> u32 {
        match self.draws.dim {
            0..=3 => 300,
            4..=6 => 220,
            _ => 160,
        }
    }

    /// The axes of the panel in `row`, `col`: θ_col across, and θ_row (off the diagonal) or
    /// density (on it) up; only the outer panels name their axes.
    fn axes<'b, DB: DrawingBackend>(
        &self,
        panel: &'b DrawingArea<DB, Shift>,
        (row, col): (usize, usize),
        y: Range<f64>,
    ) -> Result<Chart<'b, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
        let mut chart = ChartBuilder::on(panel)
            .margin(6)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(self.ranges[col].clone(), y)?;
        let mut mesh = chart.configure_mesh();
        mesh.disable_mesh()
            .x_labels(4)
            .y_labels(4)
            .label_style((FONT, TICK_SIZE))
            .axis_desc_style((FONT, AXIS_SIZE));
        if row + 1 == self.draws.dim {
            mesh.x_desc(format!("theta.{}", col + 1));
        }
        if col == 0 {
            mesh.y_desc(if row == 0 {
                "density".to_string()
            } else {
                format!("theta.{}", row + 1)
            });
        }
        mesh.draw()?;
        Ok(chart)
    }

    /// Histogram outlines of parameter `j`: one per chain, the exact sample's in black.
    fn marginal<DB: DrawingBackend>(
        &self,
        panel: &DrawingArea<DB, Shift>,
        j: usize,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let range = &self.ranges[j];
        let chains: Vec<(usize, Vec<f64>)> = self
            .draws
            .chains
            .iter()
            .map(|(c, p)| (*c, density(p[j].iter().copied(), range)))
            .collect();
        let exact = self.exact.map(|e| density(e.iter().map(|x| x[j]), range));
        let top = chains
            .iter()
            .map(|(_, d)| d)
            .chain(&exact)
            .flatten()
            .fold(0.0_f64, |m, &d| m.max(d));
        let mut chart = self.axes(panel, (j, j), 0.0..1.1 * top.max(f64::MIN_POSITIVE))?;
        if let Some(d) = &exact {
            chart.draw_series(LineSeries::new(outline(d, range), exact_line()))?;
        }
        for (c, d) in &chains {
            let style = chain_colour(*c).stroke_width(1);
            chart.draw_series(LineSeries::new(outline(d, range), style))?;
        }
        Ok(())
    }

    /// θ_col against θ_row: the exact sample's draws in grey, then each chain's over them.
    fn scatter<DB: DrawingBackend>(
        &self,
        panel: &DrawingArea<DB, Shift>,
        (row, col): (usize, usize),
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let mut chart = self.axes(panel, (row, col), self.ranges[row].clone())?;
        if let Some(e) = self.exact {
            let points = distinct_pixels(&chart, e.iter().map(|x| (x[col], x[row])));
            dots(
                &mut chart,
                &points,
                MAX_EXACT_POINTS,
                BLACK.mix(0.3).filled(),
            )?;
        }
        for (c, p) in &self.draws.chains {
            let points =
                distinct_pixels(&chart, p[col].iter().copied().zip(p[row].iter().copied()));
            dots(
                &mut chart,
                &points,
                MAX_POINTS,
                chain_colour(*c).mix(0.7).filled(),
            )?;
        }
        Ok(())
    }
}

type Chart<'b, DB> = ChartContext<'b, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// `points` less those on a pixel already taken: a random walk repeats its state at every
/// rejection, and more dots on one pixel add only bytes to the SVG.
fn distinct_pixels<DB: DrawingBackend>(
    chart: &Chart<'_, DB>,
    points: impl Iterator<Item = (f64, f64)>,
) -> Vec<(f64, f64)> {
    let mut taken = HashSet::new();
    points
        .filter(|p| taken.insert(chart.backend_coord(p)))
        .collect()
}

/// At most `max` of `points`, evenly spaced, as dots.
fn dots<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    points: &[(f64, f64)],
    max: usize,
    style: ShapeStyle,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart.draw_series(thinned(points.len(), max).map(|i| Circle::new(points[i], 2, style)))?;
    Ok(())
}

/// The exact posterior's histogram line, and its key.
fn exact_line() -> ShapeStyle {
    BLACK.stroke_width(2)
}

/// Histogram of `values` over `range` in `BINS` bins, as a density (values outside are
/// left out).
fn density(values: impl Iterator<Item = f64>, range: &Range<f64>) -> Vec<f64> {
    let width = (range.end - range.start) / BINS as f64;
    let mut counts = vec![0usize; BINS];
    let mut n = 0usize;
    for v in values {
        n += 1;
        let bin = ((v - range.start) / width).floor();
        if (0.0..BINS as f64).contains(&bin) {
            counts[bin as usize] += 1;
        }
    }
    counts
        .iter()
        .map(|&k| k as f64 / (n.max(1) as f64 * width))
        .collect()
}

/// The step outline of histogram `heights` over `range`, from zero back to zero.
fn outline(heights: &[f64], range: &Range<f64>) -> Vec<(f64, f64)> {
    let width = (range.end - range.start) / heights.len() as f64;
    let edge = |i: usize| range.start + i as f64 * width;
    let mut points = vec![(edge(0), 0.0)];
    for (i, &h) in heights.iter().enumerate() {
        points.push((edge(i), h));
        points.push((edge(i + 1), h));
    }
    points.push((edge(heights.len()), 0.0));
    points
}

impl Figure for PairPlot<'_> {
    fn size(&self) -> (u32, u32) {
        let side = self
            .panel()
            .saturating_mul(u32::try_from(self.draws.dim).unwrap_or(u32::MAX));
        (
            side.saturating_add(LEGEND_WIDTH),
            side.saturating_add(TITLE_HEIGHT),
        )
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let title = match self.exact {
            Some(_) => format!("{}: post-warm-up draws and exact posterior", self.title),
            None => format!("{}: post-warm-up draws", self.title),
        };
        let root = root.titled(&title, (FONT, TITLE_SIZE))?;
        let (width, _) = root.dim_in_pixel();
        let (grid, key) = root.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
        let exact_key = [("exact posterior", exact_line())];
        legend(
            &key,
            self.draws,
            if self.exact.is_some() {
                &exact_key
            } else {
                &[]
            },
        )?;
        let dim = self.draws.dim;
        for (k, panel) in grid.split_evenly((dim, dim)).iter().enumerate() {
            let (row, col) = (k / dim, k % dim);
            if row == col {
                self.marginal(panel, row)?;
            } else if row > col {
                self.scatter(panel, (row, col))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn density_integrates_to_the_share_inside_the_range() {
        let range = 0.0..4.0;
        let d = density([0.5, 1.5, 1.6, 3.9, 9.0].into_iter(), &range);
        let width = 4.0 / BINS as f64;
        let mass: f64 = d.iter().map(|h| h * width).sum();
        assert!((mass - 0.8).abs() < 1e-12, "{mass}");
    }

    #[test]
    fn outline_steps_over_every_bin_from_and_to_zero() {
        let points = outline(&[1.0, 2.0], &(0.0..2.0));
        assert_eq!(
            points,
            [
                (0.0, 0.0),
                (0.0, 1.0),
                (1.0, 1.0),
                (1.0, 2.0),
                (2.0, 2.0),
                (2.0, 0.0)
            ]
        );
    }
}
