//! Rows per second of a party's full-data hot loops, the clipped log-likelihood-ratio sum
//! and the clipped gradient sum, on one thread and split over two (`statistics/parallel.rs`),
//! at 10⁵, 10⁶ and 10⁷ rows of the flat 2-d banana (a few flops a row: memory-bound once
//! the rows leave the cache) and of a logistic GLM with 5 coefficients (an exp and a log a
//! row); the median of repeated timings, and the two-thread speed-up, from one run on one
//! machine. It sets `parallel::MIN_ROWS`.
//!
//! `cargo bench -p fedmcmc-party --bench row_threads [-- ROWS…]`
use std::hint::black_box;
use std::time::Instant;

use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Family, GlmSpec, Model, ModelSpec};
use fedmcmc_party::statistics::parallel::split_sum;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Median seconds of `f` over enough repetitions for about a second of timing (at least 5).
fn median_seconds(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    f();
    let once = start.elapsed().as_secs_f64();
    let reps = ((1.0 / once.max(1e-9)) as usize).clamp(5, 200);
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[reps / 2]
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![100_000, 1_000_000, 10_000_000]
    } else {
        sizes
    };
    println!("rows/s (median); speed-up = 2 threads / 1 thread");
    println!(
        "{:>10} {:>9} {:>9} {:>14} {:>14} {:>8}",
        "rows", "model", "loop", "1 thread", "2 threads", "speed-up"
    );
    for &n in &sizes {
        for (label, spec) in [
            ("banana", ModelSpec::flat_banana(2)),
            (
                "logistic",
                ModelSpec::Glm(GlmSpec::example(Family::Logistic, 5)),
            ),
        ] {
            let model = spec.build().unwrap();
            let theta = spec.true_theta();
            let proposed: Vec<f64> = theta.iter().map(|t| t + 0.008).collect();
            let data = model.simulate(&theta, n, &mut ChaCha8Rng::seed_from_u64(1));
            for (name, run) in [
                (
                    "ratio",
                    ratio as fn(&dyn Model, &Columns, &[f64], &[f64], usize),
                ),
                ("gradient", gradient),
            ] {
                let rate = |threads| {
                    n as f64
                        / median_seconds(|| run(model.as_ref(), &data, &theta, &proposed, threads))
                };
                let (one, two) = (rate(1), rate(2));
                println!(
                    "{n:>10} {label:>9} {name:>9} {one:>14.3e} {two:>14.3e} {:>8.2}",
                    two / one
                );
            }
        }
    }
}

fn ratio(model: &dyn Model, data: &Columns, theta: &[f64], proposed: &[f64], threads: usize) {
    black_box(split_sum(
        black_box(data),
        threads,
        |part| model.clipped_llr_sum(part, theta, proposed, 2.0).sum,
        |a, b| a + b,
    ));
}

fn gradient(model: &dyn Model, data: &Columns, theta: &[f64], _: &[f64], threads: usize) {
    black_box(split_sum(
        black_box(data),
        threads,
        |part| {
            let mut out = vec![0.0; model.dim()];
            model.clipped_grad_sum(part, theta, 2.0, &mut out);
            out
        },
        |mut a, b| {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
            a
        },
    ));
}
