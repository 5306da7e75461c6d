//! The Python package (`coordinator/python`): installed with pip from this clone, its own
//! tests run against the real coordinator binary (a simulate run read into
//! `arviz.InferenceData`, named coefficients, R̂ and ESS checked against summary.json).
use std::path::Path;
use std::process::Command;

use fedmcmc_system_tests::{bin, run, stan_python};

#[test]
fn the_python_package_installs_with_pip_and_its_tests_pass() {
    let Some(python) = stan_python() else {
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../coordinator/python");
    let dir = tempfile::tempdir().unwrap();
    // pip builds in the source directory; a copy keeps the clone clean.
    let copy = dir.path().join("src");
    copy_dir(&source, &copy);
    let site = dir.path().join("site");
    let (ok, stdout, stderr) = run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-deps", "--no-build-isolation", "--target"])
        .arg(&site)
        .arg(&copy));
    assert!(ok, "pip install {}: {stdout}{stderr}", copy.display());
    let (ok, stdout, stderr) = run(Command::new(&python)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(copy.join("tests"))
        .current_dir(dir.path())
        .env("PYTHONPATH", &site)
        .env("FEDMCMC_COORDINATOR", bin("coordinator")));
    assert!(ok, "the package's tests failed:\n{stdout}{stderr}");
    println!("{}", stderr.trim_end());
}

/// Copies the package's files (not caches or earlier builds).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "build" || name == "__pycache__" || name.ends_with(".egg-info") {
            continue;
        }
        let target = to.join(&*name);
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
