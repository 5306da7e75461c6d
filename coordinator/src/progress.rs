//! Progress of the chains: bars on a terminal, plain log lines otherwise.
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::sampler::{ChainTrace, Progress};

/// One bar per chain on a terminal.
pub struct Bars {
    bars: Vec<ProgressBar>,
}

/// A log line per chain at every tenth of the way.
pub struct LogLines {
    iterations: u64,
    last_decile: Mutex<Vec<u64>>,
}

/// Bars when stderr is a terminal, log lines otherwise.
pub fn for_terminal(chains: u32, iterations: u64) -> Arc<dyn Progress> {
    if std::io::stderr().is_terminal() {
        let multi = MultiProgress::new();
        let style = ProgressStyle::with_template(
            "chain {prefix}: [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> ");
        let bars = (0..chains)
            .map(|c| {
                let bar = multi.add(ProgressBar::new(iterations));
                bar.set_style(style.clone());
                bar.set_prefix(format!("{}", c + 1));
                bar
            })
            .collect();
        Arc::new(Bars { bars })
    } else {
        Arc::new(LogLines {
            iterations,
            last_decile: Mutex::new(vec![0; chains as usize]),
        })
    }
}

impl Progress for Bars {
    fn step(&self, trace: &ChainTrace) -> anyhow::Result<()> {
        let bar = &self.bars[trace.chain as usize];
        let done = trace.steps() as u64;
        bar.set_position(done);
        if done == bar.length().unwrap_or(0) {
            bar.finish();
        }
        Ok(())
    }
}

impl Progress for LogLines {
    fn step(&self, trace: &ChainTrace) -> anyhow::Result<()> {
        let done = trace.steps() as u64;
        let decile = done * 10 / self.iterations.max(1);
        let mut last = self.last_decile.lock().expect("progress lock");
        if decile > last[trace.chain as usize] {
            last[trace.chain as usize] = decile;
            tracing::info!(
                chain = trace.chain + 1,
                "{done}/{} iterations",
                self.iterations
            );
        }
        Ok(())
    }
}
