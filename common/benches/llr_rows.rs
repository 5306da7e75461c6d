//! Rows per second of the party's hot loop (the clipped log-likelihood-ratio sum) for the
//! thesis's flat banana in d = 2 at n = 100 000: criterion's elements/s are rows/s.
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fedmcmc_common::models::ModelSpec;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn llr_rows(c: &mut Criterion) {
    let n = 100_000;
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let theta = spec.true_theta();
    let data = model.simulate(&theta, n, &mut ChaCha8Rng::seed_from_u64(1));
    let theta_prop = [theta[0] + 0.008, theta[1] - 0.008];

    let mut group = c.benchmark_group("clipped_llr_sum");
    group.throughput(Throughput::Elements(n as u64));
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

criterion_group!(benches, llr_rows);
criterion_main!(benches);
