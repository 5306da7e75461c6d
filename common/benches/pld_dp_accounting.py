"""Times dp-accounting's PLD accountant on the questions `pld.rs` benchmarks: epsilon at
delta = 1e-5 after 10 000 compositions of a Poisson-subsampled Gaussian, add/remove
neighbours, at q = 0.01, s = 1 and at q = 0.001, s = 5; the latter also at the interval
1e-5, where dp-accounting is as close to the exact epsilon as our accountant (its default
1e-4 is 2.2 % above it there). Developer-side only: `pip install dp-accounting`, then
`python common/benches/pld_dp_accounting.py`."""
import statistics
import time
from importlib.metadata import version

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant


def epsilon(noise_multiplier, sampling_rate, interval=1e-4):
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier)),
        10_000)
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    accountant.compose(event)
    return accountant.get_epsilon(1e-5)


print(f"dp-accounting {version('dp-accounting')}, 20 calls each:")
for s, q, interval in [(1.0, 0.01, 1e-4), (5.0, 0.001, 1e-4), (5.0, 0.001, 1e-5)]:
    times = []
    for _ in range(20):
        start = time.perf_counter()
        eps = epsilon(s, q, interval)
        times.append(time.perf_counter() - start)
    print(f"  q = {q}, s = {s}, interval {interval}: epsilon = {eps!r}, "
          f"best {min(times) * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms")
