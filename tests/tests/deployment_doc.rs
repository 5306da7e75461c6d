//! docs/deployment.md, followed as written: its shell commands are read from the document and
//! run (`sh -c`, with the built `party` and `coordinator` first on the PATH), and its
//! `party.toml` and `run.toml` are the document's, so the guide cannot drift from the product.
//! What a reader supplies is supplied here, and only that: each organisation's rows, the
//! copying of certificates and tokens between machines (over "a channel you trust"), and,
//! because the three parties share this machine, their listen addresses and the addresses
//! the analyst dials (the example's host names do not resolve here).
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use fedmcmc_common::models::ModelSpec;
use fedmcmc_system_tests::bin;
use rand::SeedableRng;

const DOC: &str = include_str!("../../docs/deployment.md");
const PARTIES: [&str; 3] = ["clinic-a", "clinic-b", "lab-c"];

/// A fenced block of the document: its language and text (list indentation removed), and the
/// `##` section it is in.
struct Block {
    lang: String,
    text: String,
    section: String,
}

fn blocks() -> Vec<Block> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut open: Option<(String, usize, String)> = None;
    for line in DOC.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None if trimmed.starts_with("```") => {
                open = Some((trimmed[3..].trim().to_string(), indent, String::new()));
            }
            None => {
                if let Some(title) = line.strip_prefix("## ") {
                    section = title.to_string();
                }
            }
            Some(_) if trimmed.starts_with("```") => {
                let (lang, _, text) = open.take().unwrap();
                out.push(Block {
                    lang,
                    text,
                    section: section.clone(),
                });
            }
            Some((_, indent, text)) => {
                text.push_str(line.get(*indent..).unwrap_or(""));
                text.push('\n');
            }
        }
    }
    out
}

/// The one block of `lang` in a section starting with `section` that contains `needle`.
fn block<'a>(all: &'a [Block], lang: &str, section: &str, needle: &str) -> &'a str {
    let found: Vec<_> = all
        .iter()
        .filter(|b| b.lang == lang && b.section.starts_with(section) && b.text.contains(needle))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {lang} block with {needle:?} in §{section}"
    );
    &found[0].text
}

/// The block's command lines (comments and blank lines dropped).
fn commands(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// `sh -c line` in `dir` with the built binaries first on the PATH.
fn shell(line: &str, dir: &Path) -> Command {
    let bins = bin("coordinator").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("sh");
    c.args(["-c", line]).current_dir(dir).env("PATH", path);
    c
}

/// Runs `line` to its end in `dir`; its stdout. Fails the test, with stderr, if it fails.
fn run(line: &str, dir: &Path) -> String {
    let out = shell(line, dir).output().unwrap();
    assert!(
        out.status.success(),
        "`{line}` in {}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `line` (`party serve …`) in `dir`: the child and the address it listens on.
fn serve(line: &str, dir: &Path) -> (Child, String) {
    let mut child = shell(&format!("exec {line}"), dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("`{line}` in {} said {first:?}", dir.display()))
        .to_string();
    (child, addr)
}

/// Rows of the document's banana model for one organisation, as the SQLite source reads them.
fn write_rows(dir: &Path, seed: u64) {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let data = model.simulate(&spec.true_theta(), 2_000, &mut rng);
    let names = fedmcmc_party::store::column_names(2);
    fedmcmc_party::store::write_sqlite(&dir.join("rows.sqlite"), "rows", &data, &names).unwrap();
}

struct Stop(Vec<Child>);

impl Drop for Stop {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn deployment_md_as_written_runs_a_federation() {
    let all = blocks();
    let root = tempfile::tempdir().unwrap();
    let analyst = root.path().join("analyst");
    std::fs::create_dir(&analyst).unwrap();

    // §1: the certificates, every command of the section in order (issue, renew, revoke).
    let certs: Vec<&str> = all
        .iter()
        .filter(|b| b.lang == "sh" && b.section.starts_with("1."))
        .flat_map(|b| commands(&b.text))
        .collect();
    assert_eq!(certs.len(), 4, "{certs:?}");
    for line in &certs {
        run(line, &analyst);
    }
    let fed_tls = analyst.join("fed-tls");
    assert!(fed_tls.join("crl.pem").is_file());

    // §2: each organisation's directory, token, party.toml and rows; then serve it.
    let setup = block(&all, "sh", "2.", "token");
    let party_toml = block(&all, "toml", "2.", "listen =");
    let sqlite = block(&all, "toml", "2.", "format = \"sqlite\"");
    let start = block(&all, "sh", "2.", "party serve");
    let mut running = Stop(Vec::new());
    let mut addresses = Vec::new();
    for (k, name) in PARTIES.iter().enumerate() {
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        for line in commands(setup) {
            run(line, &dir);
        }
        for file in [
            "ca.pem".to_string(),
            format!("{name}.pem"),
            format!("{name}.key"),
        ] {
            std::fs::copy(fed_tls.join(&file), dir.join("tls").join(&file)).unwrap();
        }
        // The document's file for clinic-a, named for this party and on a free local port;
        // its `[data]` placeholder line replaced by the SQLite source's table.
        let (head, placeholder) = party_toml.trim_end().rsplit_once('\n').unwrap();
        assert!(placeholder.starts_with("[data]"), "{placeholder}");
        let config = format!("{head}\n\n{sqlite}")
            .replace("name = \"clinic-a\"", &format!("name = \"{name}\""))
            .replace("tls/clinic-a.", &format!("tls/{name}."))
            .replace("listen = \"0.0.0.0:50051\"", "listen = \"127.0.0.1:0\"");
        std::fs::write(dir.join("party.toml"), config).unwrap();
        write_rows(&dir, k as u64 + 1);
        let [serve_line, status_line] = commands(start)[..] else {
            panic!("§2 starts a party with `party serve` then `party status`: {start}");
        };
        let (child, addr) = serve(serve_line, &dir);
        running.0.push(child);
        addresses.push(addr);
        let status = run(status_line, &dir);
        assert!(status.contains("runs: 0 closed, 0 open"), "{status}");
        // The token goes to the analyst.
        std::fs::create_dir_all(analyst.join("tokens")).unwrap();
        std::fs::copy(dir.join("token"), analyst.join("tokens").join(name)).unwrap();
    }

    // §3: the analyst's run.toml, dialling the parties where they listen here.
    let mut run_toml = String::new();
    let mut party = None;
    for line in block(&all, "toml", "3.", "[[parties]]").lines() {
        if let Some(name) = line.strip_prefix("name = \"") {
            party = PARTIES
                .iter()
                .position(|p| name.starts_with(&format!("{p}\"")));
        }
        if line.starts_with("address = ") {
            let k = party.expect("a party's name before its address");
            run_toml += &format!("address = \"https://{}\"\n", addresses[k]);
        } else {
            run_toml += line;
            run_toml.push('\n');
        }
    }
    std::fs::write(analyst.join("run.toml"), run_toml).unwrap();
    let runs = block(&all, "sh", "3.", "coordinator run");
    let [dry, real] = commands(runs)[..] else {
        panic!("§3 has a dry run then a run: {runs}");
    };
    let plan = run(dry, &analyst);
    for name in PARTIES {
        assert!(plan.contains(name), "the dry run names {name}: {plan}");
    }
    let stdout = run(real, &analyst);
    let named = stdout
        .trim_end()
        .rsplit_once("output directory: ")
        .map(|(_, d)| d);
    let out = analyst.join(real.split_whitespace().last().unwrap());
    assert_eq!(
        named.map(|d| analyst.join(d)),
        Some(out.clone()),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for (p, name) in summary["parties"].as_array().unwrap().iter().zip(PARTIES) {
        assert_eq!(p["name"], name);
        let (committed, budget) = (p["epsilon_committed"].as_f64(), p["epsilon"].as_f64());
        assert!(committed.unwrap() <= budget.unwrap() * (1.0 + 1e-9), "{p}");
    }
    assert!(out.join("chain-4.csv").is_file() && out.join("trace.png").is_file());
}
