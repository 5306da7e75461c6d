//! Trace and pair plots of the post-warm-up draws, each as PNG and SVG, one colour per
//! chain; in simulations the pair plot overlays an exact posterior sample. They are drawn
//! in Rust (plotters) so that a run needs no plotting software beside it, with the text in
//! DejaVu Sans carried by the `dejavu` crate: a fresh machine has no system fonts.
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::sampler::ChainTrace;

mod pair;
mod trace;

/// The font family every plot's text uses (registered from the `dejavu` crate's bytes).
const FONT: &str = "sans-serif";

/// Chain colours, cycled beyond ten chains (the usual ten-colour qualitative palette).
const CHAIN_COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn chain_colour(chain: usize) -> RGBColor {
    CHAIN_COLOURS[chain % CHAIN_COLOURS.len()]
}

/// Width of the key beside every figure, where it covers no draws.
const LEGEND_WIDTH: u32 = 170;
/// Text sizes, even: plotters places each glyph at half the size above its baseline, and an
/// odd size rounds short glyphs (the decimal point) off the line.
const TITLE_SIZE: u32 = 20;
const TITLE_HEIGHT: u32 = 40;
const AXIS_SIZE: u32 = 14;
const TICK_SIZE: u32 = 12;

/// The key: each chain's colour, then `extra` entries (the exact posterior).
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    draws: &Draws,
    extra: &[(&str, ShapeStyle)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let chains = draws
        .chains
        .iter()
        .map(|(c, _)| (format!("chain {}", c + 1), chain_colour(*c).stroke_width(2)));
    let extra = extra
        .iter()
        .map(|(label, style)| (label.to_string(), *style));
    let text = TextStyle::from((FONT, TICK_SIZE + 2)).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (label, style)) in chains.chain(extra).enumerate() {
        let y = 20 + 24 * i32::try_from(i).unwrap_or(i32::MAX / 48);
        area.draw(&PathElement::new([(12, y), (40, y)], style))?;
        area.draw(&Text::new(label, (48, y), text.clone()))?;
    }
    Ok(())
}

/// A figure drawn the same way on any backend, so PNG and SVG come from one drawing.
trait Figure {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>;
}

/// Post-warm-up draws by chain and parameter: `chains[c][j]` holds chain `c`'s draws of
/// θ_{j+1}. Chains without post-warm-up draws (stopped during warm-up) are left out.
struct Draws {
    chains: Vec<(usize, Vec<Vec<f64>>)>,
    dim: usize,
}

impl Draws {
    fn new(traces: &[ChainTrace]) -> Self {
        let chains = traces
            .iter()
            .enumerate()
            .filter(|(_, t)| t.draws() > 0)
            .map(|(c, t)| (c, (0..t.dim).map(|j| t.parameter(j)).collect()))
            .collect();
        Draws {
            chains,
            dim: traces.first().map_or(0, |t| t.dim),
        }
    }

    /// Every chain's draws of parameter `j`.
    fn parameter(&self, j: usize) -> impl Iterator<Item = f64> + '_ {
        self.chains
            .iter()
            .flat_map(move |(_, p)| p[j].iter().copied())
    }
}

/// `values`' span with 5% to spare on each side (±0.5 around a single value); finite values
/// only.
fn padded_range(values: impl IntoIterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return -1.0..1.0;
    }
    let pad = if hi > lo { 0.05 * (hi - lo) } else { 0.5 };
    lo - pad..hi + pad
}

/// Indices of at most `max` of `len` items, evenly spaced from the first: a plot with
/// hundreds of thousands of points is slow to draw and, as SVG, large to keep.
fn thinned(len: usize, max: usize) -> impl Iterator<Item = usize> {
    (0..len).step_by(len.div_ceil(max.max(1)).max(1))
}

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    anyhow::ensure!(ok, "the DejaVu Sans font did not load");
    Ok(())
}

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    figure: &impl Figure,
) -> anyhow::Result<()> {
    let drawn = root
        .fill(&WHITE)
        .and_then(|()| figure.draw(&root))
        .and_then(|()| root.present());
    drawn.map_err(|e| anyhow::anyhow!("{e}"))
}

/// Draws `figure` into an RGB buffer and writes it to `path` as PNG.
fn write_png(figure: &impl Figure, path: &Path) -> anyhow::Result<()> {
    let (width, height) = figure.size();
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    render(
        BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area(),
        figure,
    )?;
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Best);
    encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&rgb)?;
    writer.finish()?;
    Ok(())
}

/// Writes `stem.png` and `stem.svg` into `dir`.
fn save(figure: &impl Figure, dir: &Path, stem: &str) -> anyhow::Result<[PathBuf; 2]> {
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    write_png(figure, &png).map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", png.display()))?;
    render(
        SVGBackend::new(&svg, figure.size()).into_drawing_area(),
        figure,
    )
    .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", svg.display()))?;
    Ok([png, svg])
}

/// Writes `trace.{png,svg}` and `pair.{png,svg}` into `dir`, titled `title`, with `exact`
/// (draws from the exact posterior, when known) overlaid on the pair plot. Returns the
/// files written: none when no chain has a post-warm-up draw.
pub fn write(
    dir: &Path,
    title: &str,
    traces: &[ChainTrace],
    exact: Option<&[Vec<f64>]>,
) -> anyhow::Result<Vec<PathBuf>> {
    let draws = Draws::new(traces);
    if draws.chains.is_empty() || draws.dim == 0 {
        return Ok(Vec::new());
    }
    register_font()?;
    let trace = trace::TracePlot::new(&draws, title);
    let pair = pair::PairPlot::new(&draws, exact, title);
    let mut files = save(&trace, dir, "trace")?.to_vec();
    files.extend(save(&pair, dir, "pair")?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(chain: u32, warmup: u64, theta: Vec<f64>) -> ChainTrace {
        let steps = theta.len() / 2;
        ChainTrace {
            chain,
            seed: 1,
            dim: 2,
            warmup,
            theta,
            accept_stat: vec![0.5; steps],
            accepted: vec![true; steps],
            noise_variance: vec![1.0; steps],
            scale: vec![0.1; steps],
        }
    }

    #[test]
    fn ranges_pad_and_ignore_non_finite_values() {
        assert_eq!(padded_range([0.0, 10.0, f64::NAN]), -0.5..10.5);
        assert_eq!(padded_range([2.0]), 1.5..2.5);
        assert_eq!(padded_range([]), -1.0..1.0);
    }

    #[test]
    fn thinning_keeps_at_most_max_evenly_spaced() {
        assert_eq!(thinned(10, 4).collect::<Vec<_>>(), [0, 3, 6, 9]);
        assert_eq!(thinned(3, 10).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(thinned(0, 10).count(), 0);
    }

    #[test]
    fn draws_keep_post_warmup_steps_of_chains_that_have_any() {
        let traces = [
            trace(0, 1, vec![9.0, 9.0, 1.0, 2.0, 3.0, 4.0]),
            trace(1, 3, vec![9.0, 9.0, 9.0, 9.0, 9.0, 9.0]),
        ];
        let draws = Draws::new(&traces);
        assert_eq!(draws.chains.len(), 1);
        assert_eq!(draws.chains[0], (0, vec![vec![1.0, 3.0], vec![2.0, 4.0]]));
        assert_eq!(draws.parameter(1).collect::<Vec<_>>(), [2.0, 4.0]);
    }

    #[test]
    fn writes_png_and_svg_of_both_plots() {
        let wave = |phase: f64| -> Vec<f64> {
            (0..400)
                .flat_map(|i| {
                    let t = f64::from(i) / 20.0 + phase;
                    [t.sin(), t.cos() * 2.0]
                })
                .collect()
        };
        let traces = [trace(0, 100, wave(0.0)), trace(1, 100, wave(1.0))];
        let exact: Vec<Vec<f64>> = (0..50).map(|i| vec![f64::from(i) / 50.0, 0.0]).collect();
        let dir = tempfile::tempdir().unwrap();
        let files = write(dir.path(), "test, penalty", &traces, Some(&exact)).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["trace.png", "trace.svg", "pair.png", "pair.svg"]);
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            if f.extension().unwrap() == "png" {
                assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
            } else {
                let text = String::from_utf8(bytes).unwrap();
                assert!(text.contains("<svg") && text.contains("theta.2"), "{text}");
                // Both chains' colours are drawn.
                for c in &CHAIN_COLOURS[..2] {
                    let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
                    assert!(text.contains(&hex), "no {hex} in {}", f.display());
                }
            }
        }
        // Nothing to plot: no files, no error.
        let warm = [trace(0, 400, wave(0.0))];
        assert!(write(dir.path(), "t", &warm, None).unwrap().is_empty());
    }
}
