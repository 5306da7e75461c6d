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
use std::path::Path;

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

/// The `key = value` lines Stan's readers need, for a chain of `trace`.
fn stan_config(model: &str, algorithm: &str, trace: &ChainTrace) -> [(&'static str, String); 7] {
    [
        ("model", model.to_string()),
        ("method", "sample".to_string()),
        ("algorithm", algorithm.to_string()),
        ("num_samples", trace.draws().to_string()),
        ("num_warmup", trace.warmup.to_string()),
        ("save_warmup", "0".to_string()),
        ("thin", "1".to_string()),
    ]
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

/// Writes one chain of `model`, sampled by `algorithm` (the variant's name). `comments` are
/// `key = value` lines for the header (configuration, seeds, grants).
pub fn write_chain(
    path: &Path,
    trace: &ChainTrace,
    model: &str,
    algorithm: &str,
    comments: &[(String, String)],
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        out,
        "# fedmcmc draws in the Stan CSV layout (post-warm-up only)"
    )?;
    for (k, v) in stan_config(model, algorithm, trace) {
        writeln!(out, "# {k} = {v}")?;
    }
    for (k, v) in comments {
        writeln!(out, "# {k} = {v}")?;
    }
    writeln!(out, "# chain_id = {}", trace.chain + 1)?;
    writeln!(out, "# chain_seed = {}", trace.seed)?;
    for (name, meaning) in SAMPLER_COLUMNS {
        writeln!(out, "# column {name}: {meaning}")?;
    }
    let mut header: Vec<String> = SAMPLER_COLUMNS.iter().map(|(s, _)| s.to_string()).collect();
    header.extend((1..=trace.dim).map(|j| format!("theta.{j}")));
    writeln!(out, "{}", header.join(","))?;
    let kept = trace.kept();
    if let Some(&scale) = trace.scale.get(kept.start) {
        writeln!(out, "# Adaptation terminated")?;
        writeln!(out, "# Step size = {}", number(scale))?;
    }
    let draws = kept.len();
    for i in kept {
        write!(
            out,
            "0,{},{},{},{}",
            number(trace.accept_stat[i]),
            number(trace.scale[i]),
            u8::from(trace.accepted[i]),
            number(trace.noise_variance[i])
        )?;
        for &v in trace.draw(i) {
            write!(out, ",{}", number(v))?;
        }
        writeln!(out)?;
    }
    writeln!(out, "#")?;
    writeln!(out, "# {draws} draws written")?;
    out.flush()
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
        write_chain(&path, &trace, "banana", "penalty", &comments).unwrap();
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
}
