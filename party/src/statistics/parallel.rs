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
//! A frame of several chains' steps whose rows are each too few to split is split by whole
//! steps instead ([`frame_threads`], [`split_map`]): each thread reads all the rows, so the
//! threads share the cache rather than divide the memory traffic. Measured the same way (a
//! frame of 4 ratios, one run): the banana 0.30× at 2.5·10⁴ rows a step, 0.63× at 10⁵,
//! 1.38× at 2.5·10⁵ and 1.17× at 3.3·10⁵ (a frame of 10⁶–1.3·10⁶ rows), 2.7× at 10⁶; the
//! logistic GLM 1.7–2.0× from 2.5·10⁴. The frame's rows against [`MIN_ROWS`] decide.
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
    cores().min(rows / (MIN_ROWS / 2)).max(1)
}

/// Threads to compute a frame of `steps` releases on, whole steps to a thread, where together
/// they read `frame_rows` of a party's `rows`: where each step's rows are too few to split
/// ([`threads_for`] is 1) but the frame's reach [`MIN_ROWS`], the cores available, at most
/// one a step, each given at least half of [`MIN_ROWS`]; else 1 (a big party's steps each
/// split their own rows, and a small frame is not worth a thread's start).
pub fn frame_threads(rows: usize, frame_rows: usize, steps: usize) -> usize {
    if threads_for(rows) > 1 || frame_rows < MIN_ROWS {
        return 1;
    }
    cores().min(steps).min(frame_rows / (MIN_ROWS / 2)).max(1)
}

/// The cores this process may use. Read once: on Linux it reads the process's cgroup
/// files, which a step need not repeat.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get))
}

/// `f` of each item, in order, the items cut into `threads` near-equal runs each mapped on
/// its own thread; with one thread, on this one.
pub fn split_map<T: Send, U: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let count = items.len();
    let threads = threads.min(count);
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let mut items = items.into_iter();
    let runs: Vec<Vec<T>> = (0..threads)
        .map(|t| {
            items
                .by_ref()
                .take((t + 1) * count / threads - t * count / threads)
                .collect()
        })
        .collect();
    let f = &f;
    std::thread::scope(|scope| {
        let mut runs = runs.into_iter();
        let first = runs.next().expect("at least two runs");
        let running: Vec<_> = runs
            .map(|run| scope.spawn(move || run.into_iter().map(f).collect::<Vec<U>>()))
            .collect();
        let mut mapped: Vec<U> = first.into_iter().map(f).collect();
        for handle in running {
            mapped.extend(handle.join().expect("a computing thread panicked"));
        }
        mapped
    })
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
    fn the_split_map_is_the_map_in_order() {
        for count in 0..7 {
            let items: Vec<usize> = (0..count).collect();
            for threads in 1..=4 {
                let mapped = split_map(items.clone(), threads, |i| 10 * i);
                let expected: Vec<usize> = (0..count).map(|i| 10 * i).collect();
                assert_eq!(mapped, expected, "{count} items, {threads} threads");
            }
        }
    }

    #[test]
    fn a_frame_is_split_only_where_its_steps_are_not() {
        assert_eq!(frame_threads(1000, MIN_ROWS - 1, 4), 1);
        assert_eq!(frame_threads(MIN_ROWS, 4 * MIN_ROWS, 4), 1);
        assert_eq!(frame_threads(MIN_ROWS / 2, MIN_ROWS, 1), 1);
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(frame_threads(MIN_ROWS / 2, 2 * MIN_ROWS, 4), cores.min(4));
    }

    #[test]
    fn small_parties_stay_on_one_thread() {
        assert_eq!(threads_for(0), 1);
        assert_eq!(threads_for(MIN_ROWS - 1), 1);
        assert!(threads_for(MIN_ROWS) >= 1);
        assert!(threads_for(10_000_000) <= std::thread::available_parallelism().unwrap().get());
    }
}
