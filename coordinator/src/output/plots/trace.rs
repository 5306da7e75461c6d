//! The trace plot: one panel per parameter, each chain's post-warm-up draws against the draw
//! number, so that chains stuck apart or drifting show at a glance.
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{
    AXIS_SIZE, Draws, FONT, Figure, LEGEND_WIDTH, TICK_SIZE, TITLE_HEIGHT, TITLE_SIZE,
    chain_colour, legend, padded_range, thinned,
};

const PLOT_WIDTH: u32 = 760;
const PANEL_HEIGHT: u32 = 200;
/// Most points of one chain's line (evenly thinned beyond that): fewer than the panel has
/// pixels across, so thinning hides little.
const MAX_POINTS: usize = 600;

pub(super) struct TracePlot<'a> {
    draws: &'a Draws,
    title: &'a str,
}

impl<'a> TracePlot<'a> {
    pub(super) fn new(draws: &'a Draws, title: &'a str) -> Self {
        TracePlot { draws, title }
    }
}

impl Figure for TracePlot<'_> {
    fn size(&self) -> (u32, u32) {
        let panels = u32::try_from(self.draws.dim).unwrap_or(u32::MAX);
        (
            PLOT_WIDTH + LEGEND_WIDTH,
            TITLE_HEIGHT.saturating_add(PANEL_HEIGHT.saturating_mul(panels)),
        )
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let root = root.titled(
            &format!("{}: post-warm-up draws", self.title),
            (FONT, TITLE_SIZE),
        )?;
        let (plots, key) = root.split_horizontally(PLOT_WIDTH);
        legend(&key, self.draws, &[])?;
        let dim = self.draws.dim;
        let longest = self
            .draws
            .chains
            .iter()
            .map(|(_, p)| p[0].len())
            .max()
            .unwrap_or(0);
        let whole = |x: &f64| format!("{x:.0}");
        for (j, panel) in plots.split_evenly((dim, 1)).iter().enumerate() {
            let last = j + 1 == dim;
            let mut chart = ChartBuilder::on(panel)
                .margin(8)
                .x_label_area_size(if last { 40 } else { 25 })
                .y_label_area_size(70)
                .build_cartesian_2d(
                    0.0..longest as f64 + 1.0,
                    padded_range(self.draws.parameter(j)),
                )?;
            let mut mesh = chart.configure_mesh();
            mesh.disable_mesh()
                .x_label_formatter(&whole)
                .y_desc(format!("theta.{}", j + 1))
                .label_style((FONT, TICK_SIZE))
                .axis_desc_style((FONT, AXIS_SIZE));
            if last {
                mesh.x_desc("post-warm-up draw");
            }
            mesh.draw()?;
            for (c, params) in &self.draws.chains {
                let values = &params[j];
                let line = thinned(values.len(), MAX_POINTS).map(|i| ((i + 1) as f64, values[i]));
                chart.draw_series(LineSeries::new(line, chain_colour(*c).stroke_width(1)))?;
            }
        }
        Ok(())
    }
}
