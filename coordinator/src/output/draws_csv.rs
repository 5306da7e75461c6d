//! Draws in CmdStan's CSV layout, one file per chain, so ArviZ (`from_cmdstan`) and Stan
//! tooling can read them: `#` comment lines with the configuration and seeds, one header
//! row, then one row per post-warm-up draw.
//!
//! There is no `lp__` column: the log density needs every party's data, which the
//! coordinator never sees.
use std::io::Write;
use std::path::Path;

use crate::sampler::ChainTrace;

/// Sampler columns written before the parameters.
pub const SAMPLER_COLUMNS: [&str; 4] = ["accept_stat__", "stepsize__", "accepted__", "noise_var__"];

/// Writes one chain. `comments` are `key = value` lines for the header (configuration, seeds).
pub fn write_chain(
    path: &Path,
    trace: &ChainTrace,
    comments: &[(String, String)],
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (k, v) in comments {
        writeln!(out, "# {k} = {v}")?;
    }
    writeln!(out, "# chain_id = {}", trace.chain + 1)?;
    writeln!(out, "# chain_seed = {}", trace.seed)?;
    writeln!(out, "# num_warmup = {}", trace.warmup)?;
    writeln!(out, "# num_samples = {}", trace.draws())?;
    let mut header: Vec<String> = SAMPLER_COLUMNS.iter().map(|s| s.to_string()).collect();
    header.extend((1..=trace.dim).map(|j| format!("theta.{j}")));
    writeln!(out, "{}", header.join(","))?;
    let kept = trace.kept();
    if let Some(&scale) = trace.scale.get(kept.start) {
        writeln!(out, "# Adaptation terminated")?;
        writeln!(out, "# Step size = {scale}")?;
    }
    for i in kept {
        write!(
            out,
            "{},{},{},{}",
            trace.accept_stat[i],
            trace.scale[i],
            u8::from(trace.accepted[i]),
            trace.noise_variance[i]
        )?;
        for v in trace.draw(i) {
            write!(out, ",{v}")?;
        }
        writeln!(out)?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_comments_header_and_post_warmup_rows() {
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
        write_chain(&path, &trace, &[("model".into(), "banana".into())]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines[0],
            "accept_stat__,stepsize__,accepted__,noise_var__,theta.1,theta.2"
        );
        assert_eq!(lines[1], "0.5,0.2,0,2,0.5,1.5");
        assert_eq!(lines[2], "0.25,0.2,1,2,0.25,1.25");
        assert_eq!(lines.len(), 3);
        assert!(text.contains("# model = banana") && text.contains("# chain_id = 2"));
    }
}
