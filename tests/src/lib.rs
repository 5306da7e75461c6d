//! Harness for whole-system tests: the real `party` and `coordinator` binaries as separate
//! processes. `cargo test --workspace` builds them (both packages have integration tests).
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Path of a workspace binary next to this test executable (`target/<profile>/<name>`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace` (or `cargo build --bins`) first",
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
        let mut child = Command::new(bin("party"))
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
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
