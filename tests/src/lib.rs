//! Harness for whole-system tests: the real `party` and `coordinator` binaries as separate
//! processes. `cargo test --workspace` builds them (both packages have integration tests).
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use fedmcmc_party::config::PartyConfig;
use fedmcmc_proto::v1::party_client::PartyClient;
use fedmcmc_proto::v1::{DescribeRequest, DescribeResponse};
use tonic::transport::{ClientTlsConfig, Endpoint};

/// Runs a command to its end: (success, stdout, stderr).
pub fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().expect("run command");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `coordinator simulate` of 3 parties with 2000 banana rows each and 2 chains into `out`,
/// plus `extra` flags. Its party directories serve as the federation of later tests.
pub fn simulate(out: &Path, extra: &[&str]) -> (bool, String, String) {
    run(Command::new(bin("coordinator"))
        .args([
            "simulate",
            "--rows",
            "6000",
            "--parties",
            "3",
            "--chains",
            "2",
            "--seed",
            "3",
        ])
        .args(extra)
        .arg("--out")
        .arg(out))
}

/// Rewrites a simulated party's config to listen on any free port.
pub fn any_port(config: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("listen") {
                "listen = \"127.0.0.1:0\"".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(config, text).unwrap();
}

/// A federation of `party serve` processes on free ports, made by a [`simulate`] into
/// `dir/sim` (100 iterations at τ = 0.5, so each durable ledger already holds a run) with
/// each party's budget ε = `epsilon`. Returns the simulation's directory, the parties and
/// their config files.
pub fn simulated_federation(
    dir: &Path,
    epsilon: &str,
) -> (PathBuf, Vec<PartyProcess>, Vec<PathBuf>) {
    let sim = dir.join("sim");
    let (ok, _, stderr) = simulate(
        &sim,
        &["--iterations", "100", "--tau", "0.5", "--epsilon", epsilon],
    );
    assert!(ok, "{stderr}");
    let configs: Vec<_> = (1..=3)
        .map(|i| sim.join(format!("parties/party-{i}/party.toml")))
        .collect();
    configs.iter().for_each(|c| any_port(c));
    let parties = configs.iter().map(|c| PartyProcess::start(c)).collect();
    (sim, parties, configs)
}

/// Writes `dir/run.toml`: 2 chains of `iterations` at τ = 0.5 (`warmup` of them warm-up, by
/// default half) over the banana model of [`simulate`], against `parties` with the
/// simulation's tokens.
pub fn write_run_config(
    dir: &Path,
    sim: &Path,
    parties: &[PartyProcess],
    iterations: u64,
    warmup: Option<u64>,
) -> PathBuf {
    let mut toml = String::from(
        "[model]\nkind = \"banana\"\na = 20.0\nlik_var = [20.0, 2.5]\nprior_var = 1000.0\n\n",
    );
    toml += &format!(
        "[sampler]\nchains = 2\ntau = 0.5\niterations = {iterations}\nclip = 2.0\nproposal_sd = 0.008\nseed = 5\ninit = [0.0, 3.0]\n"
    );
    if let Some(w) = warmup {
        toml += &format!("warmup = {w}\n");
    }
    // Mutual TLS with the simulation's CA and coordinator certificate.
    let tls = sim.join("tls");
    toml += &format!(
        "\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n\n",
        tls.join("ca.pem").display(),
        tls.join("coordinator.pem").display(),
        tls.join("coordinator.key").display()
    );
    for (i, p) in parties.iter().enumerate() {
        toml += &format!(
            "[[parties]]\nname = \"party-{}\"\naddress = \"https://{}\"\ntoken_file = \"{}\"\n\n",
            i + 1,
            p.addr,
            sim.join(format!("parties/party-{}/token", i + 1)).display()
        );
    }
    let path = dir.join("run.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// A Describe call to the party at `addr` over `tls` (plaintext if `None`) with `token`: the
/// answer, or why there is none (a refused handshake or a status), as text.
pub fn describe(
    addr: SocketAddr,
    tls: Option<ClientTlsConfig>,
    token: &str,
) -> Result<DescribeResponse, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}")).unwrap();
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls).map_err(|e| format!("{e:?}"))?;
        }
        let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
        let mut request = tonic::Request::new(DescribeRequest {});
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", token.trim()).parse().unwrap(),
        );
        PartyClient::new(channel)
            .describe(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    })
}

/// [`describe`] of a simulated party (its `config`) as the simulation's node `client`, with
/// the party's token, over mutual TLS under the simulation's CA (`<sim>/tls`).
pub fn describe_as(
    addr: SocketAddr,
    config: &PartyConfig,
    client: &str,
) -> Result<DescribeResponse, String> {
    let ca = config.tls.as_ref().expect("a simulated party serves TLS");
    let sim_tls = ca.ca.parent().unwrap().join("../../../tls");
    let tls = fedmcmc_party::tls::files_for(&sim_tls, client)
        .client(&config.name)
        .unwrap();
    let token = std::fs::read_to_string(&config.auth_token_file).unwrap();
    describe(addr, Some(tls), &token)
}

/// Starts `coordinator run --config CONFIG --out OUT` with its stdout and stderr piped (read
/// them with `wait_with_output`).
pub fn start_run(config: &Path, out: &Path) -> Child {
    Command::new(bin("coordinator"))
        .args(["run", "--config"])
        .arg(config)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start coordinator run")
}

/// Path of a workspace binary next to this test executable (`target/<profile>/<name>`).
pub fn bin(name: &str) -> PathBuf {
    built(Path::new(name), "cargo build --bins")
}

/// Path of a workspace example (`target/<profile>/examples/<name>`).
pub fn example(name: &str) -> PathBuf {
    built(&Path::new("examples").join(name), "cargo build --examples")
}

/// `relative` under `target/<profile>/`, which must exist (`build` makes it).
fn built(relative: &Path, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let path = dir.join(relative);
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace` (or `{build}`) first",
        path.display()
    );
    path
}

/// A running `party serve`; killed when dropped.
pub struct PartyProcess {
    pub child: Child,
    pub addr: SocketAddr,
}

impl PartyProcess {
    /// Starts `party serve --config CONFIG` and waits for its "listening on ADDR" line.
    pub fn start(config: &Path) -> PartyProcess {
        Self::start_program(&bin("party"), config)
    }

    /// [`PartyProcess::start`] with another program of the party's command line (a party
    /// with its own model, `fedmcmc_party::cli`).
    pub fn start_program(program: &Path, config: &Path) -> PartyProcess {
        Self::spawn(program, config, Stdio::null())
    }

    /// [`PartyProcess::start`] with the party's log (its stderr) written to `log`.
    pub fn start_logged(config: &Path, log: &Path) -> PartyProcess {
        let file = std::fs::File::create(log).expect("create the party's log");
        Self::spawn(&bin("party"), config, Stdio::from(file))
    }

    fn spawn(program: &Path, config: &Path, stderr: Stdio) -> PartyProcess {
        let mut child = Command::new(program)
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start party");
        let stdout = child.stdout.take().expect("party stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read party stdout");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from party: {line:?}"))
            .parse()
            .expect("socket address");
        PartyProcess { child, addr }
    }

    /// SIGKILL: no graceful shutdown, as in a crash.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PartyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python to read the draws with and install the package into: `FEDMCMC_PYTHON` when
/// set (CI sets it to a venv with `.ci/python-requirements.txt`: a missing package then fails
/// the test), else `python3` if it has cmdstanpy, ArviZ, setuptools and wheel; `None`, saying
/// why, when there is none.
pub fn stan_python() -> Option<String> {
    if let Ok(python) = std::env::var("FEDMCMC_PYTHON") {
        return Some(python);
    }
    let has_both = Command::new("python3")
        .args(["-c", "import cmdstanpy, arviz, setuptools, wheel"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_both {
        println!(
            "skipped: no python3 with cmdstanpy, arviz, setuptools and wheel (set FEDMCMC_PYTHON to one; .ci/run makes .ci/venv)"
        );
    }
    has_both.then(|| "python3".to_string())
}
