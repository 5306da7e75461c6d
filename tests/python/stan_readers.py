"""Reads a `coordinator simulate` output directory with cmdstanpy and ArviZ, as an analyst
would, and checks that every reader sees the same draws as the CSVs and summary.json.

Usage: python stan_readers.py OUT_DIR
Exits non-zero, naming the check, when a reader refuses the files or disagrees.
"""

import glob
import json
import os
import sys

import arviz as az
import cmdstanpy
import numpy as np

SAMPLER_COLUMNS = ["lp__", "accept_stat__", "stepsize__", "accepted__", "noise_var__"]


def main(out):
    files = sorted(glob.glob(os.path.join(out, "chain-*.csv")))
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    chains = len(summary["chains"])
    dim = len(summary["parameters"])
    draws = summary["draws_per_chain"]
    assert len(files) == chains, f"{len(files)} CSV files for {chains} chains"

    # The draws as written: (chain, draw, dim).
    theta = np.stack([read_theta(f, dim) for f in files])
    assert theta.shape == (chains, draws, dim), theta.shape

    # cmdstanpy, from the directory and from the list of files; no CmdStan is needed.
    fit = cmdstanpy.from_csv(out)
    assert isinstance(fit, cmdstanpy.CmdStanMCMC), f"from_csv(dir) returned {fit!r}"
    assert fit.chains == chains, fit.chains
    fit = cmdstanpy.from_csv(files)
    assert isinstance(fit, cmdstanpy.CmdStanMCMC), f"from_csv(files) returned {fit!r}"
    assert fit.num_draws_sampling == draws, fit.num_draws_sampling
    assert list(fit.column_names[:5]) == SAMPLER_COLUMNS, fit.column_names
    assert np.array_equal(fit.draws(concat_chains=False)[:, :, 5:], theta.transpose(1, 0, 2))
    assert np.array_equal(fit.stan_variable("theta"), theta.reshape(-1, dim))
    assert sorted(fit.method_variables()) == sorted(SAMPLER_COLUMNS)
    assert np.all(fit.method_variables()["lp__"] == 0), "lp__ is written as 0"
    assert np.all(np.isin(fit.method_variables()["accepted__"], [0, 1]))
    for c, chain in enumerate(summary["chains"]):
        assert fit.step_size[c] == chain["final_scale"], (fit.step_size, chain)
    means = fit.stan_variable("theta").mean(axis=0)
    for j, p in enumerate(summary["parameters"]):
        assert np.isclose(means[j], p["mean"], rtol=1e-9, atol=1e-12), (means[j], p)

    # ArviZ, from cmdstanpy's fit and from the files.
    for name, data in [
        ("from_cmdstanpy", az.from_cmdstanpy(fit)),
        ("from_cmdstan", az.from_cmdstan(files)),
    ]:
        posterior = data.posterior["theta"].values
        assert np.array_equal(posterior, theta), f"{name}: posterior differs"
        stats = data.sample_stats
        for stat in ["lp", "acceptance_rate", "step_size", "accepted", "noise_var"]:
            assert stat in stats, f"{name}: no {stat} in sample_stats: {list(stats)}"
            assert stats[stat].shape == (chains, draws), (name, stat, stats[stat].shape)
        rhat = az.rhat(data)["theta"].values
        assert rhat.shape == (dim,) and np.all(np.isfinite(rhat)), (name, rhat)

    print(
        f"cmdstanpy {cmdstanpy.__version__} and arviz {az.__version__} read "
        f"{chains} chains × {draws} draws of {dim} parameters"
    )


def read_theta(path, dim):
    """The parameter columns of one CSV, by name."""
    with open(path) as f:
        rows = [line.strip().split(",") for line in f if not line.startswith("#")]
    header, values = rows[0], np.array(rows[1:], dtype=float)
    cols = [header.index(f"theta.{j + 1}") for j in range(dim)]
    return values[:, cols]


if __name__ == "__main__":
    main(sys.argv[1])
