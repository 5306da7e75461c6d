//! Operating a party: one process per ledger (a second `party serve` on a ledger in use stops
//! at once, naming it, however the path reaches the file, and the first keeps serving), and
//! token files readable by their owner only; `party status` beside a serving party; a hangup
//! shuts down gracefully, its ledger's stop marked clean (a kill's is not); health and
//! metrics on their own port, and JSON logs.
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use fedmcmc_system_tests::{PartyProcess, bin};

/// A party directory with a few CSV rows whose config names `ledger` (relative to `dir`); its
/// token file is readable by everyone.
fn party_dir(dir: &Path, ledger: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("rows.csv"), "x1,x2\n0.1,3.0\n0.2,2.9\n-0.1,3.1\n").unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "a-token-of-enough-length\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(
        dir.join("party.toml"),
        format!(
            "name = \"p\"\nlisten = \"127.0.0.1:0\"\nledger = \"{ledger}\"\nauth_token_file = \"token\"\ninsecure = true\n\
             [budget]\nepsilon = 1.0\ndelta = 1e-6\n\
             [data]\nformat = \"csv\"\npath = \"rows.csv\"\n\
             [model]\nkind = \"banana\"\na = 20.0\nlik_var = [20.0, 2.5]\nprior_var = 1000.0\n"
        ),
    )
    .unwrap();
}

/// Runs `party serve` to completion (it is expected to stop at once): success and stderr.
fn serve_to_end(config: &Path) -> (bool, String) {
    let out = Command::new(bin("party"))
        .args(["serve", "--config"])
        .arg(config)
        .output()
        .expect("run party");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_second_party_on_a_ledger_in_use_is_refused_and_the_first_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let first_dir = dir.path().join("first");
    party_dir(&first_dir, "ledger.sqlite");
    let ledger = first_dir.join("ledger.sqlite");
    let mut first = PartyProcess::start(&first_dir.join("party.toml"));

    // The same party.toml again, and another directory reaching the ledger by a symlink.
    let other_dir = dir.path().join("other");
    party_dir(&other_dir, "linked.sqlite");
    std::os::unix::fs::symlink(&ledger, other_dir.join("linked.sqlite")).unwrap();
    for (config, named) in [
        (first_dir.join("party.toml"), ledger.clone()),
        (
            other_dir.join("party.toml"),
            other_dir.join("linked.sqlite"),
        ),
    ] {
        let (ok, stderr) = serve_to_end(&config);
        assert!(!ok, "a second party started on {}", named.display());
        assert!(
            stderr.contains(&format!(
                "ledger {} is in use by another process; a ledger belongs to one party at a time",
                named.display()
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains("the token file is readable by group or others"),
            "{stderr}"
        );
    }

    assert!(
        first.child.try_wait().unwrap().is_none(),
        "the first party stopped"
    );
    TcpStream::connect(first.addr).expect("the first party still accepts connections");

    // Once the owner is gone, the ledger can be served again.
    first.kill();
    let second = PartyProcess::start(&other_dir.join("party.toml"));
    TcpStream::connect(second.addr).expect("the second party serves");
}

/// `coordinator simulate` writes each party's token readable by its owner only.
#[test]
fn simulated_parties_tokens_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let status = Command::new(bin("coordinator"))
        .args([
            "simulate",
            "--rows",
            "600",
            "--parties",
            "2",
            "--chains",
            "1",
        ])
        .args(["--iterations", "20", "--epsilon", "50", "--out"])
        .arg(&out)
        .output()
        .expect("run coordinator")
        .status;
    assert!(status.success());
    for i in 1..=2 {
        let token = out.join(format!("parties/party-{i}/token"));
        let mode = std::fs::metadata(&token).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", token.display());
    }
}

/// `party status` while the party serves (its ledger locked): the ε committed it prints is
/// what the serving party's Describe says, and it counts the simulation's closed runs (the
/// private initialiser's and the sampling run).
#[test]
fn status_reads_the_ledger_of_a_serving_party() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, parties, configs) = fedmcmc_system_tests::simulated_federation(dir.path(), "6");
    let config = fedmcmc_party::config::PartyConfig::load(&configs[0]).unwrap();
    let described = fedmcmc_system_tests::describe_as(parties[0].addr, &config, "coordinator")
        .unwrap()
        .epsilon_committed;
    let (ok, stdout, stderr) = fedmcmc_system_tests::run(
        Command::new(bin("party"))
            .args(["status", "--config"])
            .arg(&configs[0]),
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains("runs: 2 closed, 0 open"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "committed: ε = {described:.4} with the open runs' reservations; ε = {described:.4} by closed runs alone"
        )),
        "Describe says {described}: {stdout}"
    );
}

/// `party serve` on the party directory `dir` (its token made owner-only), with `env`, its
/// stdout and stderr piped; the child and its stdout's reader, after the "listening on" line.
fn serve_piped(
    dir: &Path,
    env: &[(&str, &str)],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::BufRead;
    use std::process::Stdio;
    std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut party = Command::new(bin("party"))
        .args(["serve", "--config"])
        .arg(dir.join("party.toml"))
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(party.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("listening on "), "{line}");
    (party, stdout)
}

/// Sends `signal` to `party` and waits for it: its exit status and stderr.
fn stop(mut party: std::process::Child, signal: i32) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    assert_eq!(unsafe { libc::kill(party.id() as i32, signal) }, 0);
    let status = party.wait().unwrap();
    let mut stderr = String::new();
    party
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

/// A party whose terminal closes (SIGHUP) shuts down as on SIGTERM, saying so in its log,
/// instead of dying without a line.
#[test]
fn a_hangup_shuts_a_party_down_gracefully_with_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    party_dir(dir.path(), "ledger.sqlite");
    let (party, _) = serve_piped(dir.path(), &[]);
    let (status, stderr) = stop(party, libc::SIGHUP);
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        stderr.contains("shutting down") && stderr.contains("SIGHUP"),
        "{stderr}"
    );
}

/// `GET path` over plain HTTP/1.1 at `addr`: the whole response.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut socket = TcpStream::connect(addr).unwrap();
    write!(
        socket,
        "GET {path} HTTP/1.1\r\nHost: party\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    response
}

/// With `metrics_listen`, `party serve` says where on its second stdout line and serves
/// `/health` and `/metrics` there; with `FEDMCMC_LOG_FORMAT=json` every log line is a JSON
/// object.
#[test]
fn a_party_serves_health_and_metrics_on_its_own_port_and_logs_json_when_asked() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    party_dir(dir.path(), "ledger.sqlite");
    let config = dir.path().join("party.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("metrics_listen = \"127.0.0.1:0\"\n{text}")).unwrap();
    let (party, mut stdout) = serve_piped(dir.path(), &[("FEDMCMC_LOG_FORMAT", "json")]);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("second line: {line:?}"))
        .to_string();
    let health = http_get(&addr, "/health");
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("\r\n\r\nSERVING\n"),
        "{health}"
    );
    let metrics = http_get(&addr, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("application/openmetrics-text"),
        "{metrics}"
    );
    assert!(metrics.contains("\nfedmcmc_party_rows 3\n"), "{metrics}");
    assert!(
        metrics.contains("\nfedmcmc_party_epsilon_budget 1.0\n"),
        "{metrics}"
    );
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    let (status, stderr) = stop(party, libc::SIGTERM);
    assert!(status.success(), "{status:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.len() >= 2, "{stderr}");
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{l}");
    }
}

/// Releases are not fsync'd one by one, so a ledger's stop must be marked clean for its open
/// runs to survive a reboot: a graceful stop (SIGTERM) marks it, after the fsync that covers
/// every release; a killed party (SIGKILL, as a machine crash leaves it) does not, and its
/// ledger's next start on another boot would close its open runs at their whole plan.
#[test]
fn a_graceful_stop_marks_the_ledger_clean_and_a_kill_does_not() {
    let dir = tempfile::tempdir().unwrap();
    party_dir(dir.path(), "ledger.sqlite");
    let clean = || -> i64 {
        let ledger = rusqlite::Connection::open(dir.path().join("ledger.sqlite")).unwrap();
        ledger
            .query_row("SELECT clean FROM boot", [], |r| r.get(0))
            .unwrap()
    };
    for (signal, expected) in [(libc::SIGTERM, 1), (libc::SIGKILL, 0), (libc::SIGTERM, 1)] {
        let (party, _) = serve_piped(dir.path(), &[]);
        assert_eq!(clean(), 0, "a serving party's stop is not clean yet");
        let (_, stderr) = stop(party, signal);
        assert_eq!(clean(), expected, "after signal {signal}: {stderr}");
    }
}
