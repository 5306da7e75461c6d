"""The package against the real binary: `FEDMCMC_COORDINATOR` names it (the workspace's
system test `tests/tests/python_package.rs` sets it and installs this package with pip).

python -m unittest discover -s coordinator/python/tests
"""

import json
import os
import tempfile
import unittest
from pathlib import Path

import arviz as az
import numpy as np

import fedmcmc


class SimulateIntoArviz(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = Path(cls.tmp.name) / "glm"
        # A small logistic GLM on the summaries route: one release per party, then as many
        # non-private draws as convergence needs.
        cls.fit = fedmcmc.simulate(
            model="logistic-glm",
            variant="summaries",
            rows=3000,
            epsilon=3,
            seed=7,
            out=cls.out,
        )

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_output_directory_is_the_one_asked_for(self):
        self.assertEqual(self.fit.directory, self.out)
        self.assertTrue(self.fit.stdout.rstrip().endswith(f"output directory: {self.out}"))

    def test_coefficients_carry_the_models_names(self):
        names = ["intercept", "feature1", "feature2"]
        self.assertEqual(self.fit.parameter_names, names)
        posterior = self.fit.inference_data.posterior
        self.assertEqual(list(posterior["parameter"].values), names)
        self.assertEqual(posterior["theta"].dims, ("chain", "draw", "parameter"))
        chains = len(self.fit.summary["chains"])
        draws = self.fit.summary["draws_per_chain"]
        self.assertEqual(posterior["theta"].shape, (chains, draws, 3))

    def test_arviz_agrees_with_summary_json(self):
        data = self.fit.inference_data
        rhat = az.rhat(data)["theta"]
        ess = az.ess(data, method="bulk")["theta"]
        for p in self.fit.summary["parameters"]:
            label = p["label"]
            # The same rank-normalised split R̂ and bulk ESS (Vehtari et al. 2021).
            self.assertAlmostEqual(float(rhat.sel(parameter=label)), p["r_hat"], delta=1e-6)
            self.assertAlmostEqual(
                float(ess.sel(parameter=label)), p["ess_bulk"], delta=1e-6 * p["ess_bulk"]
            )
            draws = data.posterior["theta"].sel(parameter=label).values
            self.assertTrue(np.isclose(draws.mean(), p["mean"], rtol=1e-9, atol=1e-12))
            self.assertLessEqual(p["r_hat"], 1.01)

    def test_the_privacy_report_is_each_partys(self):
        privacy = self.fit.privacy
        self.assertEqual([p["name"] for p in privacy], ["party-1", "party-2", "party-3"])
        for p in privacy:
            self.assertGreater(p["epsilon_spent"], 0)
            self.assertLessEqual(p["epsilon_committed"], p["epsilon"] * (1 + 1e-9))
            self.assertEqual(p["rows"], 1000)

    def test_load_reads_the_same_directory(self):
        again = fedmcmc.load(self.out)
        self.assertEqual(again.summary, self.fit.summary)
        self.assertEqual(again.summary, json.loads((self.out / "summary.json").read_text()))
        np.testing.assert_array_equal(
            again.inference_data.posterior["theta"].values,
            self.fit.inference_data.posterior["theta"].values,
        )


class Failures(unittest.TestCase):
    def test_a_refused_job_raises_with_the_coordinators_sentence(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(fedmcmc.CoordinatorError) as refused:
                fedmcmc.simulate(chains=0, out=Path(tmp) / "none")
        self.assertIn("chains", str(refused.exception))
        self.assertNotEqual(refused.exception.returncode, 0)

    def test_a_directory_without_summary_says_how_to_rebuild_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(FileNotFoundError) as missing:
                fedmcmc.load(tmp)
        self.assertIn("coordinator summarise", str(missing.exception))

    def test_a_missing_binary_is_named(self):
        with self.assertRaises(FileNotFoundError) as missing:
            fedmcmc.coordinator("/nonexistent/coordinator")
        self.assertIn("/nonexistent/coordinator", str(missing.exception))

    def test_keyword_arguments_become_flags(self):
        from fedmcmc.coordinator import flags

        self.assertEqual(
            flags({"rows": 6000, "dry_run": True, "insecure": False, "out": None}),
            ["--rows", "6000", "--dry-run"],
        )


if __name__ == "__main__":
    unittest.main()
