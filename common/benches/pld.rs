//! Time to ε for 10 000 compositions of a Poisson-subsampled Gaussian (q = 0.01, s = 1) at
//! δ = 1e-5 with the numerical PLD accountant (issue 4). `pld_dp_accounting.py` beside this
//! file times Google's dp-accounting on the same question, for a side-by-side figure.
//!
//! `cargo bench -p fedmcmc-common --bench pld`
use criterion::{Criterion, criterion_group, criterion_main};
use fedmcmc_common::accountant::pld::{Mechanism, PldConfig, PldPair};
use fedmcmc_common::neighbours::Neighbours;

fn epsilon_after_10k() -> f64 {
    let mechanism = Mechanism::PoissonGaussian {
        noise_multiplier: 1.0,
        sampling_rate: 0.01,
    };
    PldPair::from_mechanism(&mechanism, Neighbours::AddRemove, PldConfig::default())
        .and_then(|p| p.self_compose(10_000))
        .and_then(|p| p.epsilon(1e-5))
        .expect("a valid composition")
}

fn bench(c: &mut Criterion) {
    println!(
        "epsilon after 10 000 compositions at delta = 1e-5: {}",
        epsilon_after_10k()
    );
    let mut group = c.benchmark_group("pld");
    group.sample_size(10);
    group.bench_function("poisson_gaussian_10k_compositions", |b| {
        b.iter(epsilon_after_10k)
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
