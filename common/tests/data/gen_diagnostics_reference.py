"""Generate reference values for `fedmcmc_common::diagnostics` from ArviZ.

Writes `diagnostics_reference.json` beside this script: a few fixed chain sets (from a fixed
numpy seed) together with ArviZ's rank-normalised split R-hat, bulk-ESS and tail-ESS, and the
pooled mean, sd (ddof = 1) and numpy-default (linear, R type 7) quantiles. The Rust test reads
the committed JSON, so CI needs no Python. Regenerate with

    python -m venv venv && venv/bin/pip install arviz numpy
    venv/bin/python common/tests/data/gen_diagnostics_reference.py
"""

import json
import pathlib

import arviz as az
import numpy as np

SEED = 20240531
N_CHAINS = 4
N_DRAWS = 1000


def ar1(rng, phi, n_chains, n_draws):
    """AR(1) chains with unit stationary variance, started in stationarity."""
    x = np.empty((n_chains, n_draws))
    x[:, 0] = rng.standard_normal(n_chains)
    innovation_sd = np.sqrt(1.0 - phi**2)
    for t in range(1, n_draws):
        x[:, t] = phi * x[:, t - 1] + innovation_sd * rng.standard_normal(n_chains)
    return x


def chain_sets(rng):
    shape = (N_CHAINS, N_DRAWS)
    return {
        "iid_normal": rng.standard_normal(shape),
        "ar1_phi_0.9": ar1(rng, 0.9, N_CHAINS, N_DRAWS),
        # Antithetic chains: ESS above the draw count, and the tau_hat floor 1/log10(S) binds.
        "ar1_phi_-0.7": ar1(rng, -0.7, N_CHAINS, N_DRAWS),
        # Chains centred at 0, 0.5, 1, 1.5: R-hat well above 1.
        "shifted_means": rng.standard_normal(shape) + 0.5 * np.arange(N_CHAINS)[:, None],
        # Student-t with 1.5 degrees of freedom: infinite variance, where rank
        # normalisation matters.
        "student_t_df1.5": rng.standard_t(1.5, size=shape),
        # Odd length (the middle draw is dropped when splitting) and many ties (average ranks).
        "odd_length_ties": np.round(ar1(rng, 0.5, 3, 301) * 2.0) / 2.0,
    }


def reference(draws):
    pooled = draws.ravel()
    q5, q50, q95 = np.quantile(pooled, [0.05, 0.5, 0.95])
    return {
        "rhat": float(az.rhat(draws, method="rank")),
        "ess_bulk": float(az.ess(draws, method="bulk")),
        "ess_tail": float(az.ess(draws, method="tail")),
        "mean": float(np.mean(pooled)),
        "sd": float(np.std(pooled, ddof=1)),
        "q5": float(q5),
        "q50": float(q50),
        "q95": float(q95),
    }


def main():
    rng = np.random.default_rng(SEED)
    cases = [
        {"name": name, "chains": draws.tolist(), **reference(draws)}
        for name, draws in chain_sets(rng).items()
    ]
    out = {
        "generator": "gen_diagnostics_reference.py",
        "arviz_version": az.__version__,
        "numpy_version": np.__version__,
        "seed": SEED,
        "cases": cases,
    }
    path = pathlib.Path(__file__).with_name("diagnostics_reference.json")
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
