//! Fits the DP Barker correction distribution V_corr for one noise variance C by a linear
//! program, and writes it as JSON (the files under `common/data/vcorr/`).
//!
//! ```sh
//! cargo run --release -p fedmcmc-common --example fit_vcorr -- --c 2 --out common/data/vcorr/c2.json
//! ```
//!
//! Heikkilä et al. 2019 (and Räisä 2020, Alg. 3) approximate V_corr by a Gaussian mixture with
//! N(0, C) + V_corr ≈ Logistic(0, 1). Here the means are fixed on the symmetric grid
//! m_j = j·Δ, |m_j| ≤ M, with one common small sd s, so the convolved CDF
//! F(x) = Σ_j w_j Φ((x − m_j)/√(s² + C)) is linear in the weights, and the weights with the
//! smallest sup_x |F(x) − L(x)| (L the logistic CDF), subject to w ≥ 0 and Σw = 1, solve the LP
//!
//! minimise t subject to −t ≤ F_w(x_i) − L(x_i) ≤ t at every fit point x_i.
//!
//! The weights are forced symmetric, w(m) = w(−m): the logistic is symmetric and then so is
//! F, F − L is odd, and fitting at x_i > 0 suffices, with half the unknowns. The constraints
//! are written for the upper tails 1 − F and 1 − L (equal to F − L up to sign, since both
//! masses are 1), whose coefficients are exact where the logistic tail is small.
//! `--match-variance` adds Σ w (m² + s²) = π²/3 − C, so that N(0, C) + V_corr also has the
//! logistic's variance. The reported error is the library's sup-norm bound over the whole
//! line ([`CorrectionFit::sup_error`]), not the LP's objective on its own points.
use std::process::ExitCode;

use fedmcmc_common::barker::{CorrectionFit, LOGISTIC_VARIANCE, logistic_cdf, normal_sf};
use microlp::{ComparisonOp, OptimizationDirection, Problem};

/// LP weights below this are the solver's zero (its feasibility tolerance is 1e-7 absolute).
const ZERO_WEIGHT: f64 = 1e-9;

/// Coefficients below this are set to 0: they move F by less than 1e-13, and keeping them
/// would spread each column over more orders of magnitude than the simplex handles well.
const TINY_COEFF: f64 = 1e-13;

struct Options {
    c: f64,
    spacing: f64,
    max_mean: f64,
    sd: f64,
    fit_step: f64,
    fit_to: f64,
    match_variance: bool,
    out: Option<String>,
}

fn usage() -> String {
    "usage: fit_vcorr --c C [--spacing 0.25] [--max-mean 12] [--sd 0.05] [--fit-step 0.02] \
     [--fit-to 20] [--match-variance] [--out FILE]"
        .to_owned()
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        c: f64::NAN,
        spacing: 0.25,
        max_mean: 12.0,
        sd: 0.05,
        fit_step: 0.02,
        fit_to: 20.0,
        match_variance: false,
        out: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--match-variance" {
            o.match_variance = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {}", usage()))?;
        let number = || {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("{flag} needs a finite number, got {value}"))
        };
        match flag.as_str() {
            "--c" => o.c = number()?,
            "--spacing" => o.spacing = number()?,
            "--max-mean" => o.max_mean = number()?,
            "--sd" => o.sd = number()?,
            "--fit-step" => o.fit_step = number()?,
            "--fit-to" => o.fit_to = number()?,
            "--out" => o.out = Some(value.clone()),
            _ => return Err(format!("unknown flag {flag}; {}", usage())),
        }
    }
    if !(o.c > 0.0 && o.c < LOGISTIC_VARIANCE) {
        return Err(format!(
            "--c must be in (0, π²/3 ≈ 3.29), got {}; {}",
            o.c,
            usage()
        ));
    }
    if !(o.spacing > 0.0 && o.max_mean >= 0.0 && o.sd > 0.0 && o.fit_step > 0.0 && o.fit_to > 0.0) {
        return Err("--spacing, --sd, --fit-step and --fit-to must be positive".to_owned());
    }
    Ok(o)
}

/// Solves the LP and returns the fitted mixture, components in ascending mean.
fn fit(o: &Options) -> Result<(CorrectionFit, f64), String> {
    let sigma = (o.sd * o.sd + o.c).sqrt();
    let pairs = (o.max_mean / o.spacing).floor() as usize;
    let means: Vec<f64> = (0..=pairs).map(|j| j as f64 * o.spacing).collect();
    // Column j: 1 − F restricted to the component pair at ±m_j (just m_0 = 0 for j = 0), per
    // unit of the weight each member of the pair carries.
    let tail = |j: usize, x: f64| {
        let upper = normal_sf((x - means[j]) / sigma);
        if j == 0 {
            upper
        } else {
            upper + normal_sf((x + means[j]) / sigma)
        }
    };
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let t = lp.add_var(1.0, (0.0, f64::INFINITY));
    let w: Vec<_> = (0..means.len())
        .map(|_| lp.add_var(0.0, (0.0, 1.0)))
        .collect();
    let mass = |j: usize| if j == 0 { 1.0 } else { 2.0 };
    let total: Vec<_> = w.iter().enumerate().map(|(j, &v)| (v, mass(j))).collect();
    lp.add_constraint(total.as_slice(), ComparisonOp::Eq, 1.0);
    if o.match_variance {
        let second: Vec<_> = w
            .iter()
            .enumerate()
            .map(|(j, &v)| (v, mass(j) * (means[j] * means[j] + o.sd * o.sd)))
            .collect();
        lp.add_constraint(second.as_slice(), ComparisonOp::Eq, LOGISTIC_VARIANCE - o.c);
    }
    let points = (o.fit_to / o.fit_step).round() as usize;
    for i in 1..=points {
        let x = i as f64 * o.fit_step;
        let target = logistic_cdf(-x);
        let mut row: Vec<_> = w
            .iter()
            .enumerate()
            .map(|(j, &v)| (v, tail(j, x)))
            .filter(|(_, a)| *a >= TINY_COEFF)
            .collect();
        row.push((t, -1.0));
        lp.add_constraint(row.as_slice(), ComparisonOp::Le, target);
        row.last_mut().expect("t was pushed").1 = 1.0;
        lp.add_constraint(row.as_slice(), ComparisonOp::Ge, target);
    }
    let solution = lp
        .solve()
        .map_err(|e| format!("the LP failed: {e}"))?
        .into_solution()
        .map_err(|e| format!("the LP was interrupted: {e:?}"))?;
    let lp_objective = solution.var_value(t);
    let mut comps: Vec<(f64, f64)> = Vec::new();
    for (j, &v) in w.iter().enumerate() {
        let wj = solution.var_value(v);
        if wj > ZERO_WEIGHT {
            comps.push((wj, means[j]));
            if j > 0 {
                comps.push((wj, -means[j]));
            }
        }
    }
    comps.sort_by(|a, b| a.1.total_cmp(&b.1));
    let total: f64 = comps.iter().map(|(w, _)| w).sum();
    let fit = CorrectionFit {
        c: o.c,
        weights: comps.iter().map(|(w, _)| w / total).collect(),
        means: comps.iter().map(|(_, m)| *m).collect(),
        sds: vec![o.sd; comps.len()],
        sup_error: f64::NAN,
        command: String::new(),
    };
    Ok((fit, lp_objective))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let (mut fit, lp_objective) = match fit(&o) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let err = fit.sup_error();
    fit.sup_error = err.bound;
    fit.command = format!(
        "cargo run --release -p fedmcmc-common --example fit_vcorr -- {}",
        args.join(" ")
    );
    eprintln!(
        "C = {}: {} components, LP objective {:.3e}, sup-norm error {:.3e} (grid max {:.3e} at x = {:.3}, \
         between points {:.1e}, tails {:.1e}), Var(V_corr) = {:.6} (π²/3 − C = {:.6})",
        o.c,
        fit.weights.len(),
        lp_objective,
        err.bound,
        err.grid_max,
        err.argmax,
        err.between_points,
        err.tails,
        fit.variance(),
        LOGISTIC_VARIANCE - o.c
    );
    let json = serde_json::to_string_pretty(&fit).expect("a fit serialises") + "\n";
    match &o.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, json) {
                eprintln!("cannot write {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
        None => print!("{json}"),
    }
    ExitCode::SUCCESS
}
