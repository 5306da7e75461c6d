//! Rows per second of the party's hot loops, the clipped log-likelihood-ratio sum and the
//! clipped gradient sum, for the thesis's flat banana in d = 2 at n = 100 000 (the same data
//! for both), and at d = 10: criterion's elements/s are rows/s.
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Model, ModelSpec, clipped_grad_sum_by_rows};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const N: usize = 100_000;

/// The flat banana, its true θ and N rows simulated there.
fn setup() -> (Arc<dyn Model>, Vec<f64>, Columns) {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let theta = spec.true_theta();
    let data = model.simulate(&theta, N, &mut ChaCha8Rng::seed_from_u64(1));
    (model, theta, data)
}

fn llr_rows(c: &mut Criterion) {
    let (model, theta, data) = setup();
    let theta_prop = [theta[0] + 0.008, theta[1] - 0.008];

    let mut group = c.benchmark_group("clipped_llr_sum");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("flat_banana_d2_n100000", |b| {
        b.iter(|| {
            model.clipped_llr_sum(
                black_box(&data),
                black_box(&theta),
                black_box(&theta_prop),
                2.0,
            )
        })
    });
    group.finish();
}

/// The model's override against the trait's row-by-row default, at a bound that clips 2% of
/// the rows and at one that clips 75% (the override's square roots and divisions run only
/// for the clipped rows).
fn grad_rows(c: &mut Criterion) {
    let (model, theta, data) = setup();
    let mut out = [0.0; 2];

    let mut group = c.benchmark_group("clipped_grad_sum");
    group.throughput(Throughput::Elements(N as u64));
    for bound in [1.5, 0.3] {
        let id = format!("flat_banana_d2_n100000_bound{bound}");
        group.bench_function(format!("{id}/override"), |b| {
            b.iter(|| model.clipped_grad_sum(black_box(&data), black_box(&theta), bound, &mut out))
        });
        group.bench_function(format!("{id}/by_rows"), |b| {
            b.iter(|| {
                clipped_grad_sum_by_rows(
                    &*model,
                    black_box(&data),
                    black_box(&theta),
                    bound,
                    &mut out,
                )
            })
        });
    }
    group.finish();
}

/// The gradient past the register kernels' dimensions: a 10-d Gaussian (identity covariance,
/// so A is diagonal) at n = 100 000, the model's override (the blocked kernel) against the
/// row-by-row default, at a bound that clips about half the rows.
/// `cargo bench -p fedmcmc-common --bench llr_rows -- clipped_grad_sum_d10`.
fn grad_rows_d10(c: &mut Criterion) {
    let identity = (0..10)
        .map(|i| (0..10).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    let spec = ModelSpec::gaussian(identity, 1000.0);
    let model = spec.build().unwrap();
    let theta = spec.true_theta();
    let data = model.simulate(&theta, N, &mut ChaCha8Rng::seed_from_u64(1));
    let mut out = [0.0; 10];
    let mut group = c.benchmark_group("clipped_grad_sum_d10");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("gaussian_d10_n100000/override", |b| {
        b.iter(|| model.clipped_grad_sum(black_box(&data), black_box(&theta), 3.0, &mut out))
    });
    group.bench_function("gaussian_d10_n100000/by_rows", |b| {
        b.iter(|| {
            clipped_grad_sum_by_rows(&*model, black_box(&data), black_box(&theta), 3.0, &mut out)
        })
    });
    group.finish();
}

/// One party's ratio per step at d = 10 (the thesis's flat banana, n = 200 000 over three
/// parties, so 66 667 rows here), for a random-walk step (every coordinate moves) and for
/// one-component steps: θ1 (which the banana's shear carries into column 2), θ2 and θ7
/// (one column each). OCU's mean cost per step is the mean over the ten coordinates, all but
/// θ1 like θ7's. `cargo bench -p fedmcmc-common --bench llr_rows -- proposal_d10`.
fn proposal_d10(c: &mut Criterion) {
    let n = 200_000 / 3;
    let spec = ModelSpec::flat_banana(10);
    let model = spec.build().unwrap();
    let theta = spec.true_theta();
    let data = model.simulate(&theta, n, &mut ChaCha8Rng::seed_from_u64(1));
    let step = |coordinates: &[usize]| {
        let mut prop = theta.clone();
        for &j in coordinates {
            prop[j] += 0.0015;
        }
        prop
    };
    let mut group = c.benchmark_group("proposal_d10");
    group.throughput(Throughput::Elements(n as u64));
    for (name, prop) in [
        ("rw", step(&(0..10).collect::<Vec<_>>())),
        ("ocu_theta1", step(&[0])),
        ("ocu_theta2", step(&[1])),
        ("ocu_theta7", step(&[6])),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                model.clipped_llr_sum(black_box(&data), black_box(&theta), black_box(&prop), 2.0)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, llr_rows, grad_rows, grad_rows_d10, proposal_d10);
criterion_main!(benches);
