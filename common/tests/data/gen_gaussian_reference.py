#!/usr/bin/env python3
"""Reference values of the tight Gaussian-PLD delta (Räisä 2020, Thm 3.2) for tests/accountant.rs.

    delta(eps; mu) = 1/2 [erfc((eps - mu)/(2 sqrt mu)) - e^eps erfc((eps + mu)/(2 sqrt mu))]

evaluated in mpmath at 80 significant digits and cross-checked at 130 (the bracket cancels
by up to ~10 digits for the tiny-mu rows) for inputs that are
exact binary64 numbers, so the Rust side compares against the true value of the formula at the
very same inputs. Rows: a (mu, eps) grid, plus for each mu the eps at which delta reaches
1e-6 ... 1e-1000 (the deepest rows underflow f64 and are checked through ln delta).

Run:  pip install mpmath && python3 gen_gaussian_reference.py > gaussian_reference.csv
CI does not run this; the CSV is committed.
"""
import sys

import mpmath
from mpmath import mp, mpf

MUS = [1e-8, 1e-6, 1e-4, 3e-4, 5e-4, 1e-3, 3e-3, 0.01, 0.0123, 0.03, 0.1, 0.3, 1.0, 2.5, 10.0,
       30.0, 100.0, 300.0, 1000.0]
EPSILONS = [0.01, 0.03, 0.1, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 20.0, 30.0, 50.0]
DELTA_TARGETS = ["1e-6", "1e-10", "1e-20", "1e-50", "1e-100", "1e-200", "1e-280", "1e-300",
                 "1e-305", "1e-320", "1e-400", "1e-1000"]


def delta(mu, eps):
    mu, eps = mpf(mu), mpf(eps)
    r = 2 * mpmath.sqrt(mu)
    return (mpmath.erfc((eps - mu) / r) - mpmath.exp(eps) * mpmath.erfc((eps + mu) / r)) / 2


def checked_delta(mu, eps):
    with mpmath.workdps(130):
        hi = delta(mu, eps)
    with mpmath.workdps(80):
        lo = delta(mu, eps)
        assert lo > 0 and abs(lo / hi - 1) < mpf("1e-50"), (mu, eps, lo, hi)
        return lo


def eps_for(mu, target):
    """A binary64 eps near where delta(eps; mu) = target (solved on ln delta)."""
    with mpmath.workdps(60):
        ln_t = mpmath.log(mpf(target))
        x = mpmath.sqrt(-ln_t)
        start = mpf(mu) + 2 * mpmath.sqrt(mu) * x
        eps = mpmath.findroot(lambda e: mpmath.log(delta(mu, e)) - ln_t, start)
        return float(eps)


def main():
    mp.dps = 60
    out = sys.stdout
    out.write("# Tight Gaussian-PLD delta from gen_gaussian_reference.py (mpmath, 80 digits, >= 50 correct).\n")
    out.write("mu,epsilon,delta,ln_delta\n")
    rows = [(mu, eps) for mu in MUS for eps in EPSILONS]
    rows += [(mu, eps_for(mu, t)) for mu in MUS for t in DELTA_TARGETS]
    for mu, eps in rows:
        d = checked_delta(mu, eps)
        with mpmath.workdps(60):
            out.write(f"{mu!r},{eps!r},{mpmath.nstr(d, 25)},{mpmath.nstr(mpmath.log(d), 25)}\n")


if __name__ == "__main__":
    main()
