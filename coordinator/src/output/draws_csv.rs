//! Draws in the Stan CSV layout, one file per chain, so that `cmdstanpy.from_csv`,
//! `arviz.from_cmdstan` and, through cmdstanpy, `arviz.from_cmdstanpy` read them without
//! CmdStan: `#` comment lines with the configuration and seeds, one header row, the
//! adaptation block, one row per post-warm-up draw, then a closing comment block.
//!
//! What cmdstanpy (1.3) insists on, and why each piece is here:
//! - `model`, `method = sample`, `algorithm`, `num_samples`, `num_warmup`, `save_warmup`
//!   and `thin` as `key = value` comments: `from_csv` builds its fit from them, and reads
//!   nothing else when `method` is not `sample`.
//! - a header whose first column is `lp__`: that is how it finds the header line. We cannot
//!   compute the log density (it needs every party's data, which the coordinator never
//!   sees), so `lp__` is written as 0 and the file says so in a comment.
//! - `# Adaptation terminated` then `# Step size = …` right after the header: it counts the
//!   saved warm-up draws up to that block and reads each chain's step size from it.
//! - a comment block after the draws (two lines at least): it counts the draws up to it.
//!
//! Our own sampler columns stay: `accept_stat__`, `stepsize__`, `accepted__`, `noise_var__`.
//! With fewer than seven `__` columns cmdstanpy asks for no NUTS metric or tree depth.
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::sampler::ChainTrace;

/// Sampler columns written before the parameters, each with what it holds.
pub const SAMPLER_COLUMNS: [(&str, &str); 5] = [
    (
        "lp__",
        "not computed, written as 0: the log density needs every party's data, which the coordinator never sees",
    ),
    (
        "accept_stat__",
        "acceptance probability of the step's penalised (or Barker) test",
    ),
    (
        "stepsize__",
        "random-walk sd (hmc: leapfrog step size) of the step",
    ),
    ("accepted__", "1 if the step's proposal was accepted"),
    (
        "noise_var__",
        "sum over parties of the step's noise variance",
    ),
];

/// What a chain's file says before its draws: Stan's configuration lines, ours, the
/// column meanings and the header row.
pub struct Header<'a> {
    pub model: &'a str,
    /// The variant's name, as Stan's `algorithm`.
    pub algorithm: &'a str,
    /// `key = value` lines: configuration, seeds, grants.
    pub comments: &'a [(String, String)],
    pub chain: u32,
    pub seed: u64,
    pub dim: usize,
    pub warmup: u64,
    /// Post-warm-up draws the file will hold.
    pub draws: u64,
}

impl Header<'_> {
    /// For a chain of `trace` holding all its draws.
    pub fn of<'a>(
        trace: &ChainTrace,
        model: &'a str,
        algorithm: &'a str,
        comments: &'a [(String, String)],
    ) -> Header<'a> {
        Header {
            model,
            algorithm,
            comments,
            chain: trace.chain,
            seed: trace.seed,
            dim: trace.dim,
            warmup: trace.warmup,
            draws: trace.draws() as u64,
        }
    }

    fn text(&self) -> String {
        let mut out = String::from("# fedmcmc draws in the Stan CSV layout (post-warm-up only)\n");
        let stan = [
            ("model", self.model.to_string()),
            ("method", "sample".to_string()),
            ("algorithm", self.algorithm.to_string()),
            ("num_samples", self.draws.to_string()),
            ("num_warmup", self.warmup.to_string()),
            ("save_warmup", "0".to_string()),
            ("thin", "1".to_string()),
        ];
        for (k, v) in stan
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .chain(self.comments.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            out += &format!("# {k} = {v}\n");
        }
        out += &format!("# chain_id = {}\n", self.chain + 1);
        out += &format!("# chain_seed = {}\n", self.seed);
        for (name, meaning) in SAMPLER_COLUMNS {
            out += &format!("# column {name}: {meaning}\n");
        }
        let mut header: Vec<String> = SAMPLER_COLUMNS.iter().map(|(s, _)| s.to_string()).collect();
        header.extend((1..=self.dim).map(|j| format!("theta.{j}")));
        out + &header.join(",") + "\n"
    }
}

/// `x` to the last digit (it reads back as the same double), in exponent form when very
/// small or large: plain decimals would spell out every zero of, say, an acceptance
/// probability of 1e-60.
fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e15).contains(&x.abs()) {
        x.to_string()
    } else {
        format!("{x:e}")
    }
}

/// The lines step `i` of `trace` adds to its file: nothing in warm-up; the adaptation block
/// before the first draw; then one row per draw.
fn lines_of_step(trace: &ChainTrace, i: usize) -> String {
    if (i as u64) < trace.warmup {
        return String::new();
    }
    let mut out = String::new();
    if i as u64 == trace.warmup {
        out += "# Adaptation terminated\n";
        out += &format!("# Step size = {}\n", number(trace.scale[i]));
    }
    out += &format!(
        "0,{},{},{},{}",
        number(trace.accept_stat[i]),
        number(trace.scale[i]),
        u8::from(trace.accepted[i]),
        number(trace.noise_variance[i])
    );
    for &v in trace.draw(i) {
        out += &format!(",{}", number(v));
    }
    out + "\n"
}

/// Writes one whole chain of `trace` under `header` (its draws, then the closing block),
/// through a temporary file renamed into place: a reader, or a run killed meanwhile, sees
/// the old file or the new one, never half of either.
pub fn write_chain(path: &Path, trace: &ChainTrace, header: &Header) -> std::io::Result<()> {
    let mut text = header.text();
    for i in trace.kept() {
        text += &lines_of_step(trace, i);
    }
    text += &format!("#\n# {} draws written\n", trace.draws());
    let partial = path.with_extension("csv.partial");
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(text.as_bytes())?;
    file.sync_data()?;
    std::fs::rename(&partial, path)
}

/// A chain's file written as the chain goes, one write per draw, so that a coordinator killed
/// mid-run leaves every draw made so far on disk. A resumed run's chain retraces its steps
/// (`federation/recorded.rs`): the file it finds is kept, each retraced line is checked
/// against the one already there, and only new lines are added.
pub struct DrawFile {
    path: PathBuf,
    file: std::fs::File,
    /// Lines after the header already in the file, and how many of them the chain has
    /// retraced.
    found: Vec<String>,
    retraced: usize,
}

impl DrawFile {
    /// Starts the file at `path` with `header`, or takes up the one there, which must start
    /// with the same header; a last line cut short (by a kill) is dropped.
    pub fn open(path: &Path, header: &Header) -> anyhow::Result<Self> {
        let header = header.text();
        let shown = path.display();
        let found = match std::fs::read_to_string(path) {
            Ok(text) => {
                let Some(rest) = text.strip_prefix(&header) else {
                    anyhow::bail!(
                        "{shown} was written by another run (its header differs from this run's)"
                    );
                };
                let complete = rest.rfind('\n').map_or(0, |end| end + 1);
                let file = std::fs::OpenOptions::new().write(true).open(path)?;
                file.set_len((header.len() + complete) as u64)?;
                rest[..complete].lines().map(str::to_string).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::write(path, &header)
                    .map_err(|e| anyhow::anyhow!("cannot write {shown}: {e}"))?;
                Vec::new()
            }
            Err(e) => anyhow::bail!("cannot read {shown}: {e}"),
        };
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| anyhow::anyhow!("cannot write {shown}: {e}"))?;
        Ok(DrawFile {
            path: path.to_path_buf(),
            file,
            found,
            retraced: 0,
        })
    }

    /// Adds the lines of the chain's latest step: checked against the file's where the file
    /// has them already, appended where it does not.
    pub fn record(&mut self, trace: &ChainTrace) -> anyhow::Result<()> {
        let Some(i) = trace.steps().checked_sub(1) else {
            return Ok(());
        };
        let lines = lines_of_step(trace, i);
        let mut new = String::new();
        for line in lines.lines() {
            match self.found.get(self.retraced) {
                Some(old) if old == line => self.retraced += 1,
                Some(old) => anyhow::bail!(
                    "{}: the resumed chain's step {} reads {line:?}, not {old:?} as written before: the run cannot be retraced",
                    self.path.display(),
                    i + 1
                ),
                None => {
                    new += line;
                    new.push('\n');
                }
            }
        }
        if !new.is_empty() {
            self.file
                .write_all(new.as_bytes())
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.path.display()))?;
        }
        Ok(())
    }
}

/// One chain's file read back (`coordinator summarise`): its `key = value` lines and its
/// draws as a trace. The file holds no warm-up draws, so the trace's warm-up is 0 and
/// `warmup` says what the chain had.
pub struct ReadChain {
    pub comments: Vec<(String, String)>,
    pub trace: ChainTrace,
    /// The file's `num_warmup`.
    pub warmup: u64,
    /// The file's `num_samples`: the draws the chain was to make.
    pub planned_draws: u64,
    /// True when the closing block is there: the whole chain was written.
    pub closed: bool,
}

impl ReadChain {
    /// The value of the `# key = value` line `key`, if any.
    pub fn comment(&self, key: &str) -> Option<&str> {
        comment(&self.comments, key)
    }
}

fn comment<'a>(comments: &'a [(String, String)], key: &str) -> Option<&'a str> {
    comments
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Reads a chain's file as [`write_chain`] or [`DrawFile`] wrote it. A last line cut short by
/// a kill (no newline) is dropped; anything else that does not parse is an error naming the
/// file and line.
pub fn read_chain(path: &Path) -> anyhow::Result<ReadChain> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {shown}: {e}"))?;
    let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    let mut comments = Vec::new();
    let mut header: Option<usize> = None;
    let mut closed = false;
    let mut rows: Vec<Vec<f64>> = Vec::new();
    for (number, line) in complete.lines().enumerate() {
        let at = || format!("{shown}, line {}", number + 1);
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.trim();
            if header.is_none() {
                if let Some((k, v)) = comment.split_once(" = ") {
                    comments.push((k.to_string(), v.to_string()));
                }
            } else if comment.ends_with("draws written") {
                closed = true;
            }
            continue;
        }
        let Some(dim) = header else {
            let columns: Vec<&str> = line.split(',').collect();
            let sampler = SAMPLER_COLUMNS.map(|(name, _)| name);
            let expected: Vec<String> = sampler
                .iter()
                .map(|s| s.to_string())
                .chain((1..).map(|j| format!("theta.{j}")))
                .take(columns.len())
                .collect();
            if columns.len() <= sampler.len() || columns != expected {
                anyhow::bail!(
                    "{}: the header is not fedmcmc's ({} then theta.1 …): {line:?}",
                    at(),
                    sampler.join(",")
                );
            }
            header = Some(columns.len() - sampler.len());
            continue;
        };
        let values = line
            .split(',')
            .map(str::parse::<f64>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("{}: {e}: {line:?}", at()))?;
        if values.len() != SAMPLER_COLUMNS.len() + dim || !matches!(values[3], 0.0 | 1.0) {
            anyhow::bail!(
                "{}: expected {} numbers with accepted__ 0 or 1: {line:?}",
                at(),
                SAMPLER_COLUMNS.len() + dim
            );
        }
        rows.push(values);
    }
    let Some(dim) = header else {
        anyhow::bail!("{shown} has no header row: no draws were written");
    };
    let number = |key: &str| -> anyhow::Result<u64> {
        let value = comment(&comments, key)
            .ok_or_else(|| anyhow::anyhow!("{shown} has no `# {key} = …` line"))?;
        value
            .parse()
            .map_err(|e| anyhow::anyhow!("{shown}: `{key} = {value}`: {e}"))
    };
    let trace = ChainTrace {
        chain: u32::try_from(number("chain_id")?.saturating_sub(1))?,
        seed: number("chain_seed")?,
        dim,
        warmup: 0,
        theta: rows
            .iter()
            .flat_map(|r| r[SAMPLER_COLUMNS.len()..].to_vec())
            .collect(),
        accept_stat: rows.iter().map(|r| r[1]).collect(),
        accepted: rows.iter().map(|r| r[3] == 1.0).collect(),
        noise_variance: rows.iter().map(|r| r[4]).collect(),
        scale: rows.iter().map(|r| r[2]).collect(),
    };
    Ok(ReadChain {
        warmup: number("num_warmup")?,
        planned_draws: number("num_samples")?,
        comments,
        trace,
        closed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_back_exactly_and_stay_short() {
        for x in [
            0.0,
            0.5,
            -2.25,
            1e-4,
            5.688797381375679e-62,
            1e300,
            f64::MIN_POSITIVE,
        ] {
            let s = number(x);
            assert_eq!(s.parse::<f64>().unwrap(), x, "{s}");
            assert!(s.len() <= 24, "{s}");
        }
        assert_eq!(number(5.688797381375679e-62), "5.688797381375679e-62");
        assert_eq!(number(0.039915419457560476), "0.039915419457560476");
    }

    #[test]
    fn writes_stan_config_header_adaptation_and_post_warmup_rows() {
        let trace = ChainTrace {
            chain: 1,
            seed: 42,
            dim: 2,
            warmup: 1,
            theta: vec![0.0, 1.0, 0.5, 1.5, 0.25, 1.25],
            accept_stat: vec![1.0, 0.5, 0.25],
            accepted: vec![true, false, true],
            noise_variance: vec![2.0, 2.0, 2.0],
            scale: vec![0.1, 0.2, 0.2],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chain.csv");
        let comments = [("variant".into(), "DP penalty".into())];
        write_chain(
            &path,
            &trace,
            &Header::of(&trace, "banana", "penalty", &comments),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let header = lines.iter().position(|l| !l.starts_with('#')).unwrap();
        assert_eq!(
            lines[header],
            "lp__,accept_stat__,stepsize__,accepted__,noise_var__,theta.1,theta.2"
        );
        assert_eq!(
            lines[header + 1..header + 3],
            ["# Adaptation terminated", "# Step size = 0.2"]
        );
        assert_eq!(
            lines[header + 3..header + 5],
            ["0,0.5,0.2,0,2,0.5,1.5", "0,0.25,0.2,1,2,0.25,1.25"]
        );
        assert!(lines[header + 5..].iter().all(|l| l.starts_with('#')));
        assert!(lines.len() >= header + 7, "two closing comment lines");
        for line in [
            "# model = banana",
            "# method = sample",
            "# algorithm = penalty",
            "# num_samples = 2",
            "# num_warmup = 1",
            "# save_warmup = 0",
            "# thin = 1",
            "# variant = DP penalty",
            "# chain_id = 2",
        ] {
            assert!(lines[..header].contains(&line), "no {line:?} in\n{text}");
        }
        assert!(text.contains("# column lp__: not computed, written as 0"));
    }

    /// A chain of `steps` steps (warm-up 2) whose θ is (step, −step).
    fn trace(steps: usize) -> ChainTrace {
        let mut t = ChainTrace {
            chain: 0,
            seed: 7,
            dim: 2,
            warmup: 2,
            theta: Vec::new(),
            accept_stat: Vec::new(),
            accepted: Vec::new(),
            noise_variance: Vec::new(),
            scale: Vec::new(),
        };
        for i in 0..steps {
            t.theta.extend([i as f64, -(i as f64)]);
            t.accept_stat.push(0.5);
            t.accepted.push(i % 2 == 0);
            t.noise_variance.push(1.5);
            t.scale.push(0.1);
        }
        t
    }

    #[test]
    fn a_chain_reads_back_as_written_and_a_cut_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chain-1.csv");
        let t = trace(7);
        let comments = vec![("parameters".to_string(), "a,b".to_string())];
        let header = Header::of(&t, "banana", "penalty", &comments);
        write_chain(&path, &t, &header).unwrap();
        let read = read_chain(&path).unwrap();
        assert!(read.closed);
        assert_eq!((read.warmup, read.planned_draws), (2, 5));
        assert_eq!(read.comment("parameters"), Some("a,b"));
        assert_eq!(
            (read.trace.chain, read.trace.seed, read.trace.dim),
            (0, 7, 2)
        );
        assert_eq!(read.trace.theta, t.theta[4..]);
        assert_eq!(read.trace.accepted, t.accepted[2..]);
        assert_eq!(read.trace.scale, t.scale[2..]);

        // A chain killed mid-write: no closing block, a last line cut short.
        let mut file = DrawFile::open(&path.with_file_name("chain-2.csv"), &header).unwrap();
        feed(&mut file, &t, 0, 5).unwrap();
        drop(file);
        let cut = path.with_file_name("chain-2.csv");
        let mut text = std::fs::read_to_string(&cut).unwrap();
        text += "0,0.5,0.1,1,1.5,5";
        std::fs::write(&cut, &text).unwrap();
        let read = read_chain(&cut).unwrap();
        assert!(!read.closed);
        assert_eq!(read.trace.steps(), 3);

        // A damaged line within the file is an error that names it.
        std::fs::write(
            &cut,
            text.replace("0,0.5,0.1,1,1.5,2,-2", "0,0.5,x,1,1.5,2,-2"),
        )
        .unwrap();
        let err = read_chain(&cut).err().unwrap().to_string();
        assert!(
            err.contains("chain-2.csv, line") && err.contains("invalid float"),
            "{err}"
        );
    }

    /// Feeds steps `from..to` of `full` to `file`, as the sampler does after each step.
    fn feed(file: &mut DrawFile, full: &ChainTrace, from: usize, to: usize) -> anyhow::Result<()> {
        for n in from + 1..=to {
            let mut t = full.clone();
            t.theta.truncate(n * 2);
            t.accept_stat.truncate(n);
            t.accepted.truncate(n);
            t.noise_variance.truncate(n);
            t.scale.truncate(n);
            file.record(&t)?;
        }
        Ok(())
    }

    #[test]
    fn a_file_written_as_the_chain_goes_is_taken_up_checked_and_finished_like_a_whole_one() {
        let full = trace(10);
        let comments = [("variant".into(), "DP penalty".into())];
        let header = Header::of(&full, "banana", "penalty", &comments);
        let dir = tempfile::tempdir().unwrap();
        let (streamed, whole) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
        let mut file = DrawFile::open(&streamed, &header).unwrap();
        feed(&mut file, &full, 0, 6).unwrap();
        drop(file);
        let before = std::fs::read_to_string(&streamed).unwrap();
        // A kill in the middle of a line leaves it cut short.
        std::fs::write(&streamed, format!("{before}0,0.5,0.1,1")).unwrap();

        // The resumed chain retraces steps 0..6, then goes on.
        let mut file = DrawFile::open(&streamed, &header).unwrap();
        feed(&mut file, &full, 0, 10).unwrap();
        drop(file);
        let after = std::fs::read_to_string(&streamed).unwrap();
        assert!(
            after.starts_with(&before),
            "the draws written before are unchanged"
        );
        write_chain(&whole, &full, &header).unwrap();
        let whole = std::fs::read_to_string(&whole).unwrap();
        assert_eq!(whole, format!("{after}#\n# 8 draws written\n"));

        // A chain that retraces differently, or a file of another run, is refused.
        let mut other = full.clone();
        other.theta[8] = 99.0;
        let mut file = DrawFile::open(&streamed, &header).unwrap();
        let err = feed(&mut file, &other, 0, 10).unwrap_err().to_string();
        assert!(err.contains("cannot be retraced"), "{err}");
        let comments = [("variant".into(), "DP Barker".into())];
        let header = Header::of(&full, "banana", "barker", &comments);
        let err = DrawFile::open(&streamed, &header)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("written by another run"), "{err}");
    }
}
