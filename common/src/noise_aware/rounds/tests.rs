use super::*;
use crate::models::{Family, GlmSpec, ModelSpec};

const TRUTH: [f64; 3] = [0.3, -0.2, 0.1];
const NOISE: f64 = 2.0;

fn curvature() -> Vec<Vec<f64>> {
    vec![
        vec![4e4, 1e3, 0.0],
        vec![1e3, 3e4, -2e3],
        vec![0.0, -2e3, 2e4],
    ]
}

/// The released summary of the exactly quadratic log-likelihood with curvature `a` and
/// mode `TRUTH` at `c`: g(c) = A(θ* − c).
fn exact(a: &[Vec<f64>], c: &[f64]) -> Vec<f64> {
    let g: Vec<f64> = (0..3)
        .map(|i| (0..3).map(|j| a[i][j] * (TRUTH[j] - c[j])).sum())
        .collect();
    join_summary(&g, a)
}

/// Walks the default logistic schedule, releasing `answer(k, centre)` for release k,
/// its curvature block weighted as the query asks, with noise variance [`NOISE`] (and
/// no noise drawn).
fn walk(answer: impl Fn(u32, &[f64]) -> Vec<f64>) -> (Rounds, Final) {
    let model = ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3))
        .build()
        .unwrap();
    let schedule = Schedule::default_for(model.as_ref()).unwrap();
    let mut rounds = Rounds::new(model, schedule);
    let mut k = 0;
    while let Some((centre, _, weight)) = rounds.next() {
        let mut value = answer(k, centre);
        for a in &mut value[3..] {
            *a *= weight;
        }
        rounds.record(&value, NOISE);
        k += 1;
    }
    let fin = rounds.finish().unwrap();
    (rounds, fin)
}

/// The first release is unweighted; a pilot whose approximation leaves θ spread about
/// the next centre weighs the next release's curvature by that spread, and the weighted
/// curvature is read back to A with Â's noise variance the release's over κ².
#[test]
fn a_weighted_curvature_is_read_back_with_its_smaller_noise() {
    let model = ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3))
        .build()
        .unwrap();
    let schedule = Schedule {
        releases: 3,
        min_pilots: 1,
        window: 0.0,
    };
    let mut rounds = Rounds::new(Arc::clone(&model), schedule);
    // A weak curvature: the pilot's approximation stays wide.
    let a: Vec<Vec<f64>> = curvature()
        .iter()
        .map(|row| row.iter().map(|v| v * 1e-4).collect())
        .collect();
    let mut weights = Vec::new();
    while let Some((centre, _, weight)) = rounds.next() {
        let mut value = exact(&a, centre);
        for v in &mut value[3..] {
            *v *= weight;
        }
        rounds.record(&value, NOISE);
        weights.push(weight);
    }
    assert_eq!(weights[0], 1.0, "{weights:?}");
    let kappa = weights[1];
    assert!(kappa > 1.0 && weights[2] == kappa, "{weights:?}");
    let fin = rounds.finish().unwrap().quadratic();
    for (got, want) in fin.a.iter().flatten().zip(a.iter().flatten()) {
        assert!((got - want).abs() <= 1e-9 * want.abs(), "{got} {want}");
    }
    // The two finals average to Â's noise NOISE/(2κ²), and the unweighted Taylor pilot
    // (its curvature the finals', so no change is estimated) is pooled in, its g with the
    // two curvatures' noise its step carries.
    let want = NOISE / (2.0 * kappa * kappa + 1.0);
    assert!((fin.curvature_noise_variance - want).abs() < 1e-12 * want);
    let step: f64 = (rounds.pilots()[0].centre.iter().zip(&fin.centre))
        .map(|(p, c)| (c - p).powi(2))
        .sum();
    assert!(step > 0.0, "the pilot moved the centre");
    let moving = 0.25 * (NOISE + NOISE / (2.0 * kappa * kappa)) * step;
    let want = 1.0 / (2.0 / NOISE + 1.0 / (NOISE + moving));
    assert!((fin.noise_variance - want).abs() < 1e-12 * want);
}

#[test]
fn an_exact_summary_s_releases_pool_about_their_centres_average_whatever_a_s_noise() {
    let model = ModelSpec::Glm(GlmSpec::example(Family::Gaussian, 3))
        .build()
        .unwrap();
    let schedule = Schedule::default_for(model.as_ref()).unwrap();
    assert_eq!(
        (schedule.releases, schedule.min_pilots),
        (EXACT_RELEASES, 1)
    );
    let mut rounds = Rounds::new(model, schedule);
    let a = curvature();
    // Each release's own errors: e_k in ĝ, F_k (symmetric) in Â.
    let error = |k: usize| [0.5, -1.0, 2.0].map(|e| e * (k as f64 + 1.0));
    let curvature_error = |k: usize| [3.0, -2.0, 1.0, 4.0, 0.5, -1.5].map(|f| f * (k as f64 - 1.0));
    let mut made = Vec::new();
    while let Some((centre, _, weight)) = rounds.next() {
        let k = made.len();
        let centre = centre.to_vec();
        let mut value = exact(&a, &centre);
        for (v, e) in value.iter_mut().zip(error(k)) {
            *v += e;
        }
        for (v, f) in value[3..].iter_mut().zip(curvature_error(k)) {
            *v = (*v + f) * weight;
        }
        rounds.record(&value, NOISE);
        made.push((centre, weight));
    }
    assert_eq!(made.len(), EXACT_RELEASES as usize);
    let fin = rounds.finish().unwrap();
    assert_eq!(fin.pooled, rounds.pilots().len());
    assert!(made[0].0 != made[1].0, "the pilot moved the centre");
    // Every release's ĝ has the same noise, so each counts alike: the pooled g is
    // A(θ − c̄) plus the errors' mean, at the centres' mean c̄, with A exact (no Â in it);
    // Â is the average of the releases' weighted by κ².
    let n = made.len() as f64;
    let c_bar: Vec<f64> = (0..3)
        .map(|i| made.iter().map(|(c, _)| c[i]).sum::<f64>() / n)
        .collect();
    let mut want = exact(&a, &c_bar);
    for k in 0..made.len() {
        for (w, e) in want.iter_mut().zip(error(k)) {
            *w += e / n;
        }
    }
    let kappa2: Vec<f64> = made.iter().map(|(_, w)| w * w).collect();
    for (j, w) in want[3..].iter_mut().enumerate() {
        let weighted: f64 = (0..made.len())
            .map(|k| kappa2[k] * curvature_error(k)[j])
            .sum();
        *w += weighted / kappa2.iter().sum::<f64>();
    }
    for (c, w) in fin.centre.iter().zip(&c_bar) {
        assert!((c - w).abs() < 1e-12, "{:?} {c_bar:?}", fin.centre);
    }
    for (got, w) in fin.value.iter().zip(&want) {
        assert!(
            (got - w).abs() < 1e-9 * w.abs().max(1.0),
            "{:?}\n{want:?}",
            fin.value
        );
    }
    assert!((fin.noise_variance - NOISE / n).abs() < 1e-12);
    let curvature_noise = NOISE / kappa2.iter().sum::<f64>();
    assert!((fin.curvature_noise_variance - curvature_noise).abs() < 1e-12);
}

#[test]
fn join_summary_inverts_split_summary() {
    let value = exact(&curvature(), &[0.0; 3]);
    let (g, a) = split_summary(3, &value);
    assert_eq!(
        (g.as_slice(), &a),
        (&[11_800.0, -5_900.0, 2_400.0][..], &curvature())
    );
    assert_eq!(join_summary(&g, &a), value);
}

/// With an exactly quadratic log-likelihood the pilots settle at θ*, and the Taylor
/// pilot's summary moved to the finals' centre is theirs: pooling it changes no value and
/// divides the noise variance by the releases pooled.
#[test]
fn a_taylor_pilot_pools_with_the_finals() {
    let a = curvature();
    let (rounds, fin) = walk(|_, c| exact(&a, c));
    assert_eq!(rounds.pilots().len(), 2, "a global pilot and a settled one");
    assert_eq!(fin.pooled, 1, "the windowed first pilot is never pooled");
    let releases = f64::from(DEFAULT_RELEASES) - 1.0;
    assert!((fin.noise_variance - NOISE / releases).abs() < 1e-12);
    for (got, want) in fin.value.iter().zip(exact(&a, &fin.centre)) {
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{got} {want}"
        );
    }
    for (c, t) in fin.centre.iter().zip(TRUTH) {
        assert!((c - t).abs() < 1e-3, "{:?}", fin.centre);
    }
}

/// A Taylor pilot whose curvature differs from the finals' by Δ on the diagonal enters A's
/// block with weight 1/(u + D), D = mean over A's entries of Δ² less both noises, and g's
/// with 1/(v + (¼(u + u_f) + D/TRAPEZOID)‖s‖²), s its step to the finals' centre.
#[test]
fn a_pilot_whose_curvature_differs_is_weighted_down() {
    let shift = 1e3;
    let (rounds, fin) = walk(|k, c| {
        let mut a = curvature();
        if k == 1 {
            (0..3).for_each(|i| a[i][i] += shift);
        }
        exact(&a, c)
    });
    assert_eq!(fin.pooled, 1);
    let finals = NOISE / (f64::from(DEFAULT_RELEASES) - 2.0);
    let change = 3.0 * shift * shift / 6.0 - NOISE - finals;
    let step: f64 = (rounds.pilots()[1].centre.iter().zip(&fin.centre))
        .map(|(p, c)| (c - p).powi(2))
        .sum();
    assert!(step > 0.0, "the pilot was not at the finals' centre");
    let moving = (0.25 * (NOISE + finals) + change / TRAPEZOID) * step;
    let want_g = 1.0 / (1.0 / finals + 1.0 / (NOISE + moving));
    let want_a = 1.0 / (1.0 / finals + 1.0 / (NOISE + change));
    assert!(
        (fin.noise_variance - want_g).abs() < 1e-12 * want_g,
        "{} {want_g}",
        fin.noise_variance
    );
    assert!(
        (fin.curvature_noise_variance - want_a).abs() < 1e-12 * want_a,
        "{} {want_a}",
        fin.curvature_noise_variance
    );
    // Its curvature moves the pooled diagonal by its weight's share of Δ only.
    let share = (1.0 / (NOISE + change)) * fin.curvature_noise_variance;
    let (_, pooled_a) = split_summary(3, &fin.value);
    for (i, row) in pooled_a.iter().enumerate() {
        let moved = row[i] - curvature()[i][i];
        assert!((moved - share * shift).abs() < 1e-6 * shift, "{moved}");
    }
}
