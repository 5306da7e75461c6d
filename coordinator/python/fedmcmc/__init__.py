"""Run the fedmcmc coordinator from Python and read what it writes into ArviZ.

A thin wrapper over the `coordinator` binary (as cmdstanpy is to CmdStan): `simulate` and
`run` call it, `load` reads an output directory.
"""

from .coordinator import CoordinatorError, coordinator, run, simulate
from .fit import Fit, load

__all__ = ["CoordinatorError", "Fit", "coordinator", "load", "run", "simulate"]
