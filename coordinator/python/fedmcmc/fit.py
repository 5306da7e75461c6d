"""Reading an output directory: the chains' Stan CSV files into ArviZ, and summary.json."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import arviz as az


@dataclass
class Fit:
    """One job's outputs."""

    directory: Path
    #: summary.json as written: parameters with R̂ and ESS, chains, parties, the sampler.
    summary: dict
    #: The posterior draws (dimension `parameter`, named as the model names its
    #: coefficients) and the sampler's columns in `sample_stats`.
    inference_data: az.InferenceData
    #: What the coordinator printed, when this package ran it.
    stdout: str = field(default="", repr=False)

    @property
    def parameter_names(self):
        return [p.get("label", p["name"]) for p in self.summary["parameters"]]

    @property
    def privacy(self):
        """Per party: rows, releases, noise, and ε spent by this job (initialiser and run),
        committed in all, and the party's budget at its δ."""
        return self.summary["parties"]


def load(directory, stdout=""):
    """Reads `directory` (written by `coordinator simulate` or `run`)."""
    directory = Path(directory)
    summary_path = directory / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(
            f"{summary_path} is missing: `coordinator summarise {directory}` rebuilds it from the draws"
        )
    summary = json.loads(summary_path.read_text())
    files = sorted(directory.glob("chain-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        raise FileNotFoundError(f"no chain-*.csv in {directory}")
    names = [p.get("label", p["name"]) for p in summary["parameters"]]
    data = az.from_cmdstan(
        posterior=[str(f) for f in files],
        coords={"parameter": names},
        dims={"theta": ["parameter"]},
    )
    return Fit(directory=directory, summary=summary, inference_data=data, stdout=stdout)
