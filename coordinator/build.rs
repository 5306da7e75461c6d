//! The git revision the coordinator was built from, for its outputs (`output::VERSION`):
//! a draws file or summary names the code that made it. `FEDMCMC_REVISION` in the build's
//! environment says it where there is no checkout (a container build); else "unknown".
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FEDMCMC_REVISION");
    let given = std::env::var("FEDMCMC_REVISION")
        .ok()
        .filter(|r| !r.is_empty());
    let revision = given
        .or_else(|| {
            Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=FEDMCMC_REVISION={revision}");
    // A new commit moves the branch's ref (or HEAD itself, when detached).
    for path in ["../.git/HEAD", "../.git/refs/heads", "../.git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
