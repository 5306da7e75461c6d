//! A big party's full-data sums on every core: the rows are cut into contiguous windows
//! (`Columns::rows`, no copy), each summed on its own thread, and the partial sums added.
//! A clipped sum over rows is a sum, so the split changes nothing but the order of the
//! floating-point additions; the bound, the noise and the charge are the release's as
//! before.
//!
//! Measured on 2 cores (`benches/row_threads.rs`, two threads against one, three runs):
//! where a row costs an exp and a log (a logistic GLM with 5 coefficients) two threads are
//! 1.4–2.0× from 2·10⁵ rows to 10⁷; where it costs a few flops (the 2-d banana) the loop is
//! bound by memory, and two threads are 0.3–0.8× below 10⁶ rows (a thread's start costs
//! about as much as the sum), 1.0–2.0× at 10⁶ and, at 10⁷, 0.8–0.9× for the ratio and
//! 1.3–2.2× for the gradient. [`MIN_ROWS`] is where neither loses much and the dearer
//! models gain.
//!
//! Measured and not kept: a frame of several chains' steps, each too few rows to split,
//! computed whole steps to a thread once the frame's rows reached [`MIN_ROWS`]. Alone on 2
//! cores a frame of 4 ratios ran 1.2–1.4× at 2.5–3.3·10⁵ rows a step (the banana) and
//! 1.7–2.0× from 2.5·10⁴ (the logistic GLM), but where a process serves several parties on
//! few cores (`simulate`, the iterations bench at 10⁶ rows, 4 chains over gRPC on 2 cores)
//! the extra threads contend with the other parties' frames: the median of 24 timings
//! (4 runs each, alternating; in-memory and durable ledgers) was 2 040 it/s split against
//! 2 670 unsplit, and 2 100 over the 2 runs in which a frame took only the cores no other
//! frame was computing on.
use std::num::NonZeroUsize;
use std::sync::OnceLock;

use fedmcmc_common::data::Columns;

/// Rows from which the sums are split among the machine's cores.
pub const MIN_ROWS: usize = 1_000_000;

/// Threads to sum `rows` rows with: 1 below [`MIN_ROWS`], else the cores available, each
/// window holding at least half of [`MIN_ROWS`].
pub fn threads_for(rows: usize) -> usize {
    if rows < MIN_ROWS {
        return 1;
    }
    // Read once: on Linux it reads the process's cgroup files, which a step need not repeat.
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores =
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get));
    cores.min(rows / (MIN_ROWS / 2)).max(1)
}

/// `sum` over `threads` near-equal windows of `rows`, combined with `add` in window order;
/// with one thread, `sum(rows)` on this one.
pub fn split_sum<T: Send>(
    rows: &Columns,
    threads: usize,
    sum: impl Fn(&Columns) -> T + Sync,
    add: impl Fn(T, T) -> T,
) -> T {
    if threads <= 1 {
        return sum(rows);
    }
    let n = rows.n();
    let windows: Vec<Columns> = (0..threads)
        .map(|t| rows.rows(t * n / threads..(t + 1) * n / threads))
        .collect();
    let sum = &sum;
    std::thread::scope(|scope| {
        let mut running: Vec<_> = windows[1..]
            .iter()
            .map(|w| scope.spawn(move || sum(w)))
            .collect();
        let first = sum(&windows[0]);
        running
            .drain(..)
            .map(|h| h.join().expect("a summing thread panicked"))
            .fold(first, add)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_sum_is_the_sum() {
        let n = 1001;
        let data = Columns::from_columns(vec![(0..n).map(f64::from).collect()]).unwrap();
        let total = |c: &Columns| c.col(0).iter().sum::<f64>();
        for threads in 1..=5 {
            let split = split_sum(&data, threads, total, |a, b| a + b);
            assert_eq!(split, f64::from(n * (n - 1) / 2), "{threads} threads");
        }
    }

    #[test]
    fn small_parties_stay_on_one_thread() {
        assert_eq!(threads_for(0), 1);
        assert_eq!(threads_for(MIN_ROWS - 1), 1);
        assert!(threads_for(MIN_ROWS) >= 1);
        assert!(threads_for(10_000_000) <= std::thread::available_parallelism().unwrap().get());
    }
}
