//! A per-caller pace for Describe, the one call a caller can repeat for nothing: eight
//! clients looping on it kept both cores of a 2-core party busy and a Step's median latency
//! went from 0.6 ms to 2.6 ms (issue 23). Calls beyond the pace wait their turn instead of
//! being answered at once, so a looping caller is slowed to the pace rather than spinning on
//! refusals; a caller whose queue would wait longer than [`MAX_WAIT`] is refused.
//!
//! The pace is the generic cell-rate algorithm: each caller has a theoretical arrival time
//! that every admitted call pushes one interval on, and a call may start once that time is
//! within a burst of now.
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Describe calls per second per caller, sustained, unless `[limits]` says otherwise.
pub const PER_SECOND: u32 = 20;
/// Calls a caller may make at once before the pace applies, unless `[limits]` says otherwise.
pub const BURST: u32 = 20;
/// The longest a call waits for its turn; beyond it the call is refused.
pub const MAX_WAIT: Duration = Duration::from_secs(2);
/// Callers remembered at most; beyond it, callers whose pace has lapsed are forgotten.
const MAX_CALLERS: usize = 4096;

/// Who is calling: the TLS client certificate when there is one (callers behind one address
/// are told apart), else the address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Caller {
    Certificate(u64),
    Address(IpAddr),
    Unknown,
}

impl Caller {
    pub fn of<T>(request: &tonic::Request<T>, hasher: &impl BuildHasher) -> Caller {
        if let Some(certs) = request.peer_certs()
            && let Some(leaf) = certs.first()
        {
            return Caller::Certificate(hasher.hash_one(leaf.as_ref()));
        }
        match request.remote_addr() {
            Some(addr) => Caller::Address(addr.ip()),
            None => Caller::Unknown,
        }
    }
}

/// The callers' theoretical arrival times.
pub struct Throttle {
    per_second: u32,
    interval: Duration,
    tolerance: Duration,
    next: Mutex<HashMap<Caller, Instant>>,
}

impl Throttle {
    /// `per_second` and `burst` at least 1 (`[limits]` is checked when read).
    pub fn new(per_second: u32, burst: u32) -> Self {
        let interval = Duration::from_secs_f64(1.0 / f64::from(per_second.max(1)));
        Throttle {
            per_second,
            interval,
            tolerance: interval * burst.saturating_sub(1),
            next: Mutex::new(HashMap::new()),
        }
    }

    /// The sustained pace, calls per second.
    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// How long `caller` must wait before its call starts, or `None` if that is longer than
    /// [`MAX_WAIT`] (the call is refused and does not count).
    pub fn admit(&self, caller: Caller, now: Instant) -> Option<Duration> {
        let mut next = self.next.lock().expect("throttle lock");
        if next.len() >= MAX_CALLERS {
            next.retain(|_, t| *t > now);
        }
        let arrival = next.get(&caller).copied().unwrap_or(now).max(now);
        let start = (arrival.checked_sub(self.tolerance).unwrap_or(now)).max(now);
        let wait = start - now;
        if wait > MAX_WAIT {
            return None;
        }
        next.insert(caller, arrival + self.interval);
        Some(wait)
    }

    /// Waits for `caller`'s turn; `false` if the caller is refused.
    pub async fn turn(&self, caller: Caller) -> bool {
        match self.admit(caller, Instant::now()) {
            Some(wait) if wait.is_zero() => true,
            Some(wait) => {
                tokio::time::sleep(wait).await;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(i: u8) -> Caller {
        Caller::Address(IpAddr::from([127, 0, 0, i]))
    }

    /// A burst starts at once, then calls are spaced one interval apart, and a caller whose
    /// queue is longer than the longest wait is refused without being counted.
    #[test]
    fn a_caller_is_paced_after_its_burst() {
        let throttle = Throttle::new(10, 3);
        let now = Instant::now();
        let waits: Vec<Option<Duration>> =
            (0..25).map(|_| throttle.admit(caller(1), now)).collect();
        for w in &waits[..3] {
            assert_eq!(*w, Some(Duration::ZERO));
        }
        for (k, w) in waits[3..23].iter().enumerate() {
            let expected = Duration::from_millis(100 * (k as u64 + 1));
            let got = w.expect("within the longest wait");
            assert!(
                got.abs_diff(expected) < Duration::from_micros(10),
                "{k}: {got:?}"
            );
        }
        assert_eq!(waits[23], None);
        assert_eq!(waits[24], None);
        // After the queue drains, the pace holds again from there.
        let later = now + Duration::from_secs(3);
        assert_eq!(throttle.admit(caller(1), later), Some(Duration::ZERO));
    }

    /// One caller's queue does not delay another's.
    #[test]
    fn callers_are_paced_apart() {
        let throttle = Throttle::new(10, 1);
        let now = Instant::now();
        for _ in 0..10 {
            throttle.admit(caller(1), now);
        }
        assert_eq!(throttle.admit(caller(2), now), Some(Duration::ZERO));
        assert!(throttle.admit(caller(1), now).unwrap() >= Duration::from_millis(900));
    }
}
