#!/usr/bin/env python3
"""Reference epsilons for batches drawn without replacement, for tests/pld.rs.

dp-accounting has no PLD for fixed-size batches, so this script builds the dominating pairs
that fedmcmc_common::accountant::pld states for them out of dp-accounting's parts (its
Gaussian privacy losses, Connect-the-Dots discretisation and FFT composition) and records
epsilon at delta. Noise multiplier s = noise std / the L2 sensitivity under the relation,
gamma = batch / population; pld defaults (log mass bound -50, tail 1e-15), on the grid of
gen_pld_reference.reference_interval (1e-4 unless one release's loss is narrow).

  add-remove:  from_gaussian_mechanism(s, sensitivity=2, ADD_OR_REMOVE_ONE,
               sampling_prob=gamma): the added row displaces a batch member, so the sum
               moves by twice the add/remove sensitivity; both orders, worse one reported.
  substitute:  the symmetrised pair of Dong, Roth & Su (2022) Thm 4.2: for eps >= 0 its
               hockey stick is max(remove, add) of the Poisson pair (sensitivity 1,
               sampling_prob=gamma); for eps < 0, 1 - e^eps + e^eps * delta(-eps).
               Discretised on the symmetric loss range by
               create_pmf_pessimistic_connect_dots_fixed_gap, then self-composed.

Run:  pip install dp-accounting && python3 gen_pld_batch_reference.py > pld_batch_reference.csv
CI does not run this; the CSV is committed.
"""
import importlib.metadata
import math
import sys

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld import privacy_loss_mechanism as plm
from gen_pld_reference import directions, reference_interval

LOG_MASS = -50.0
TAIL = 1e-15

# (neighbours, s, batch, population, count, delta)
CASES = [
    ("substitute", 1.0, 100, 10000, 1, 1e-5),
    ("substitute", 1.0, 100, 10000, 100, 1e-5),
    ("substitute", 1.0, 100, 10000, 1000, 1e-5),
    ("substitute", 2.0, 1000, 10000, 100, 1e-5),
    ("substitute", 0.8, 500, 10000, 200, 1e-6),
    ("substitute", 1.0, 5000, 10000, 10, 1e-5),
    ("substitute", 3.0, 2000, 10000, 300, 1e-5),
    ("substitute", 1.5, 10, 10000, 2000, 1e-7),
    ("add-remove", 2.0, 100, 10000, 1000, 1e-5),
    ("add-remove", 1.0, 1000, 10000, 50, 1e-5),
    ("add-remove", 4.0, 2000, 10000, 300, 1e-6),
    ("add-remove", 2.0, 5000, 10000, 5, 1e-5),
]


def gaussian_loss(s, gamma, adjacency, sensitivity):
    return plm.GaussianPrivacyLoss(
        s, sensitivity=sensitivity, log_mass_truncation_bound=LOG_MASS,
        sampling_prob=gamma, adjacency_type=adjacency)


def symmetrised_pmf(s, gamma, interval):
    remove = gaussian_loss(s, gamma, plm.AdjacencyType.REMOVE, 1.0)
    add = gaussian_loss(s, gamma, plm.AdjacencyType.ADD, 1.0)
    top = max(remove.connect_dots_bounds().epsilon_upper,
              add.connect_dots_bounds().epsilon_upper, 0.0)
    upper = math.ceil(top / interval)
    eps = np.arange(-upper, upper + 1) * interval

    def half(e):
        return np.maximum(np.asarray(remove.get_delta_for_epsilon(e)),
                          np.asarray(add.get_delta_for_epsilon(e)))

    deltas = np.where(eps >= 0, half(np.abs(eps)),
                      -np.expm1(eps) + np.exp(eps) * half(np.abs(eps)))
    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(
        interval, -upper, upper, np.clip(deltas, 0.0, 1.0))


def epsilon(neighbours, s, batch, population, count, delta):
    gamma = batch / population
    if neighbours == "add-remove":
        def pair(interval):
            return pld.from_gaussian_mechanism(
                s, sensitivity=2.0, sampling_prob=gamma, value_discretization_interval=interval,
                neighboring_relation=pld.NeighborRel.ADD_OR_REMOVE_ONE)
        interval, _ = reference_interval(lambda d: directions(pair(d)))
        return pair(interval).self_compose(count).get_epsilon_for_delta(delta)
    _, (pmf,) = reference_interval(lambda d: [symmetrised_pmf(s, gamma, d)])
    return pmf.self_compose(count, TAIL).get_epsilon_for_delta(delta)


def main():
    version = importlib.metadata.version("dp-accounting")
    out = sys.stdout
    out.write(f"# epsilon at delta from dp-accounting {version} parts "
              "(gen_pld_batch_reference.py)\n")
    out.write("neighbours,noise_multiplier,batch,population,count,delta,epsilon\n")
    for case in CASES:
        eps = epsilon(*case)
        out.write(",".join(repr(v) if isinstance(v, float) else str(v) for v in case)
                  + f",{eps!r}\n")


if __name__ == "__main__":
    main()
