"""Times dp-accounting's PLD accountant on the question `pld.rs` benchmarks: epsilon at
delta = 1e-5 after 10 000 compositions of a Poisson-subsampled Gaussian (q = 0.01, s = 1),
add/remove neighbours. Developer-side only: `pip install dp-accounting`, then
`python common/benches/pld_dp_accounting.py`."""
import time
from importlib.metadata import version

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant


def epsilon():
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 10_000
    )
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(1e-5)


times = []
for _ in range(5):
    start = time.perf_counter()
    eps = epsilon()
    times.append(time.perf_counter() - start)
print(f"dp-accounting {version('dp-accounting')}: "
      f"epsilon = {eps!r}, best of 5: {min(times):.3f} s, median {sorted(times)[2]:.3f} s")
