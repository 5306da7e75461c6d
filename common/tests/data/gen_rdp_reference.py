#!/usr/bin/env python3
"""Reference values for the RDP accountant (common/src/accountant/rdp) for tests/rdp.rs.

From Google's dp-accounting (PyPI `dp-accounting`, its `dp_accounting.rdp` module):
  * per mechanism, the RDP curve of one release on the accountant's grid of orders
    (`RdpAccountant(orders=ORDERS)` composed with one event): Gaussian, Poisson-subsampled
    Gaussian (add/remove), Gaussian on a fixed batch drawn without replacement (replace-one);
  * per case (a composition of such releases), epsilon and its optimal order at delta
    (`get_epsilon_and_optimal_order`, the improved conversion of Canonne-Kamath-Steinke 2020
    Prop 12) and delta and its order at epsilon (`get_delta_and_optimal_order`), plus
    Mironov's conversion min_a [rdp(a) + ln(1/delta)/(a-1)] on dp-accounting's curve.

Independently, in mpmath at 50 digits:
  * the Poisson-subsampled Gaussian at integer orders by the exact binomial expansion
    (Mironov, Talwar, Zhang 2019);
  * the without-replacement bound of Wang-Balle-Kasiviswanathan 2019 Thm 9 as quoted in
    Räisä 2020, Thm 3.5 (dp-accounting tightens it by their Thm 27, so the Rust curve must be
    at or below it);
  * the DP Barker bound of Räisä 2020, Thm 3.3 (not in dp-accounting) at its integer orders
    2 < a < b/5 on the grid, and epsilon at delta for compositions of it under both
    conversions, minimised over those orders.

Run (CI does not; the JSON is committed):
    pip install dp-accounting mpmath
    python3 gen_rdp_reference.py > rdp_reference.json
"""
import importlib.metadata
import json
import math
import sys

import mpmath
from mpmath import mp, mpf

from dp_accounting import dp_event
from dp_accounting import privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant as rdp

mp.dps = 50
NeighborRel = privacy_accountant.NeighboringRelation

# The Rust grid: dp-accounting's default fractional orders, every integer 11..=256, 512, 1024.
ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 257)) + [512, 1024]
INTEGER_CHECK_MAX = 64  # mpmath curves are stored at integer orders 2..=64 of the grid

MECHANISMS = {
    "g0.5": ("gaussian", dict(noise_multiplier=0.5)),
    "g1": ("gaussian", dict(noise_multiplier=1.0)),
    "g2": ("gaussian", dict(noise_multiplier=2.0)),
    "g5": ("gaussian", dict(noise_multiplier=5.0)),
    "g20": ("gaussian", dict(noise_multiplier=20.0)),
    "p1_0.01": ("poisson", dict(noise_multiplier=1.0, sampling_rate=0.01)),
    "p0.8_0.001": ("poisson", dict(noise_multiplier=0.8, sampling_rate=0.001)),
    "p2_0.05": ("poisson", dict(noise_multiplier=2.0, sampling_rate=0.05)),
    "p1.1_0.1": ("poisson", dict(noise_multiplier=1.1, sampling_rate=0.1)),
    "p4_0.3": ("poisson", dict(noise_multiplier=4.0, sampling_rate=0.3)),
    "p0.6_0.02": ("poisson", dict(noise_multiplier=0.6, sampling_rate=0.02)),
    "p1.5_0.5": ("poisson", dict(noise_multiplier=1.5, sampling_rate=0.5)),
    "w1_100_10000": ("batch", dict(noise_multiplier=1.0, batch=100, population=10000)),
    "w2_50_1000": ("batch", dict(noise_multiplier=2.0, batch=50, population=1000)),
    "w0.8_256_60000": ("batch", dict(noise_multiplier=0.8, batch=256, population=60000)),
    "w3_500_1000": ("batch", dict(noise_multiplier=3.0, batch=500, population=1000)),
    "w1.2_10_100000": ("batch", dict(noise_multiplier=1.2, batch=10, population=100000)),
}

# (releases [(mechanism, count)], delta); delta is also queried at 0.8 x the epsilon found.
CASES = [
    ([("g1", 1)], 1e-5),
    ([("g0.5", 1)], 1e-6),
    ([("g2", 10)], 1e-5),
    ([("g5", 100)], 1e-5),
    ([("g20", 500)], 1e-8),
    ([("p1_0.01", 10000)], 1e-5),
    ([("p1_0.01", 1)], 1e-5),
    ([("p0.8_0.001", 100000)], 1e-6),
    ([("p2_0.05", 2000)], 1e-5),
    ([("p1.1_0.1", 100)], 1e-5),
    ([("p4_0.3", 300)], 1e-7),
    ([("p0.6_0.02", 500)], 1e-5),
    ([("p1.5_0.5", 5)], 1e-5),
    ([("w1_100_10000", 1000)], 1e-5),
    ([("w1_100_10000", 1)], 1e-5),
    ([("w2_50_1000", 300)], 1e-5),
    ([("w0.8_256_60000", 20000)], 1e-6),
    ([("w3_500_1000", 20)], 1e-5),
    ([("w1.2_10_100000", 1000000)], 1e-5),
    ([("g1", 2), ("p1_0.01", 1000)], 1e-5),
    ([("g5", 10), ("p2_0.05", 500), ("p0.8_0.001", 1000)], 1e-6),
    ([("g2", 2), ("w2_50_1000", 100)], 1e-5),
    ([("w1_100_10000", 500), ("w3_500_1000", 5), ("g20", 100)], 1e-5),
]

# DP Barker (Räisä 2020, Thm 3.3): (name, batch, population); cases (name, iterations, delta).
BARKER = [("b100_10000", 100, 10000), ("b500_100000", 500, 100000),
          ("b1000_1000000", 1000, 1000000), ("b40_4000", 40, 4000)]
BARKER_CASES = [("b100_10000", 1000, 1e-5), ("b500_100000", 10000, 1e-5),
                ("b1000_1000000", 100000, 1e-6), ("b40_4000", 100, 1e-5),
                ("b100_10000", 1, 1e-5)]


def event(kind, p):
    g = dp_event.GaussianDpEvent(p["noise_multiplier"])
    if kind == "gaussian":
        return g
    if kind == "poisson":
        return dp_event.PoissonSampledDpEvent(p["sampling_rate"], g)
    return dp_event.SampledWithoutReplacementDpEvent(p["population"], p["batch"], g)


def relation(kinds):
    return NeighborRel.REPLACE_ONE if "batch" in kinds else NeighborRel.ADD_OR_REMOVE_ONE


def finite(x):
    x = float(x)
    return x if math.isfinite(x) else None


def curve(releases):
    kinds = {MECHANISMS[m][0] for m, _ in releases}
    acc = rdp.RdpAccountant(orders=ORDERS, neighboring_relation=relation(kinds))
    acc.compose(dp_event.ComposedDpEvent(
        [dp_event.SelfComposedDpEvent(event(*MECHANISMS[m]), c) for m, c in releases]))
    return acc


def mironov(orders, values, delta):
    eps = [r - math.log(delta) / (a - 1) for a, r in zip(orders, values)]
    i = min(range(len(eps)), key=lambda k: (eps[k], k))
    return eps[i], orders[i]


def binom(a, j):
    return mpmath.binomial(a, j)


def poisson_exact(q, s, a):
    """ln A_a / (a-1), A_a = sum_i C(a,i) (1-q)^(a-i) q^i exp((i^2-i)/(2 s^2))."""
    q, s = mpf(q), mpf(s)
    total = mpmath.fsum(binom(a, i) * (1 - q) ** (a - i) * q ** i
                        * mpmath.exp(mpf(i * i - i) / (2 * s * s)) for i in range(a + 1))
    return mpmath.log(total) / (a - 1)


def wbk_thm9(q, base, a):
    """WBK19 Thm 9 with eps(inf) = inf (Räisä 2020, Thm 3.3/3.5) for integer a >= 2."""
    q = mpf(q)
    e2 = base(2)
    total = 1 + q ** 2 * binom(a, 2) * min(4 * (mpmath.exp(e2) - 1), 2 * mpmath.exp(e2))
    total += 2 * mpmath.fsum(q ** j * binom(a, j) * mpmath.exp((j - 1) * base(j))
                             for j in range(3, a + 1))
    return mpmath.log(total) / (a - 1)


def barker_base(b):
    b = mpf(b)
    return lambda a: (5 / (2 * b) + mpmath.log(2 * b / (b - 5 * a)) / (2 * (a - 1))
                      + 2 * a / (b - 5 * a))


def barker_orders(b):
    return [a for a in ORDERS if float(a).is_integer() and 2 < a and 5 * a < b]


def improved_epsilon(a, r, delta):
    a, r, delta = mpf(a), mpf(r), mpf(delta)
    if delta ** 2 + mpmath.expm1(-r) > 0:
        return mpf(0)
    return r + mpmath.log1p(-1 / a) - mpmath.log(delta * a) / (a - 1)


def main():
    out = {
        "generator": "common/tests/data/gen_rdp_reference.py",
        "dp_accounting": importlib.metadata.version("dp-accounting"),
        "numpy": importlib.metadata.version("numpy"),
        "scipy": importlib.metadata.version("scipy"),
        "mpmath": importlib.metadata.version("mpmath"),
        "orders": ORDERS,
        "mechanisms": [],
        "cases": [],
        "barker": [],
        "barker_cases": [],
    }
    int_orders = [a for a in ORDERS if float(a).is_integer() and 2 <= a <= INTEGER_CHECK_MAX]
    for name, (kind, p) in MECHANISMS.items():
        m = {"name": name, "kind": kind, **p,
             "rdp": [finite(x) for x in curve([(name, 1)]).rdp]}
        s = p["noise_multiplier"]
        if kind == "poisson":
            m["exact_integer_orders"] = [
                [a, float(poisson_exact(p["sampling_rate"], s, int(a)))] for a in int_orders]
        if kind == "batch":
            q = mpf(p["batch"]) / p["population"]
            base = lambda j, s=s: mpf(j) / (2 * mpf(s) ** 2)
            m["thm9_integer_orders"] = [
                [a, float(wbk_thm9(q, base, int(a)))] for a in int_orders]
        out["mechanisms"].append(m)
    for releases, delta in CASES:
        acc = curve(releases)
        eps, order = acc.get_epsilon_and_optimal_order(delta)
        epsilon = 0.8 * float(eps)
        d, d_order = acc.get_delta_and_optimal_order(epsilon)
        m_eps, m_order = mironov(ORDERS, acc.rdp, delta)
        out["cases"].append({
            "releases": [[m, c] for m, c in releases],
            "delta": delta, "epsilon": float(eps), "order": float(order),
            "epsilon_mironov": float(m_eps), "order_mironov": float(m_order),
            "epsilon_query": epsilon, "delta_at_epsilon": float(d),
            "delta_order": float(d_order),
        })
    for name, b, n in BARKER:
        base = barker_base(b)
        q = mpf(b) / n
        out["barker"].append({
            "name": name, "batch": b, "population": n,
            "rdp": [[a, float(wbk_thm9(q, base, int(a)))] for a in barker_orders(b)],
        })
    for name, k, delta in BARKER_CASES:
        _, b, n = next(x for x in BARKER if x[0] == name)
        base = barker_base(b)
        q = mpf(b) / n
        curve_k = [(a, k * wbk_thm9(q, base, int(a))) for a in barker_orders(b)]
        mir = min((r - mpmath.log(delta) / (a - 1), a) for a, r in curve_k)
        imp = min((improved_epsilon(a, r, delta), a) for a, r in curve_k)
        out["barker_cases"].append({
            "barker": name, "iterations": k, "delta": delta,
            "epsilon_mironov": float(mir[0]), "order_mironov": float(mir[1]),
            "epsilon": float(max(imp[0], 0)), "order": float(imp[1]),
        })
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
