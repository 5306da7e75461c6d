//! Retries of idempotent calls to a party: a deadline per try and a bound on all of a
//! call's tries ([`Deadlines`]), with backoff between tries; what counts as transient.
use std::future::Future;
use std::time::{Duration, Instant};

use tonic::{Code, Status};

use crate::federation::{CallError, CallErrorKind};

/// How long the coordinator waits for a party: per try of a call, and per call in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// One try of a call, from sending it to its answer, connecting included when the try
    /// must connect.
    pub attempt: Duration,
    /// One call: all its tries and the waits between them. The longest a party that stops
    /// answering holds a call, and so the job.
    pub call: Duration,
}

/// The deadlines a party gets unless told otherwise.
///
/// 20 s a try: far beyond the work of any call a party answers (a step is at most one pass
/// over its rows), so only a party that has stopped answering, or a connection that has
/// died, meets it. OpenRun, tried once when it may
/// have reached the party, gets the whole 60 s for that try.
///
/// 60 s a call: a party killed and started again (its process, its rows read) is back within
/// it, and is retried meanwhile at waits doubling from 100 ms up to [`MAX_BACKOFF`], while a
/// party that accepts the connection but never answers holds one call for 3 tries of 20 s.
/// A job whose party freezes mid-run thus ends within two such calls, about 2 minutes: the
/// step it did not answer, then its CloseRun (the other parties' runs are closed at once,
/// each under the same bound). Against a run's lease (10 minutes by default) 60 s is short:
/// a retried step still finds its run open.
pub const DEADLINES: Deadlines = Deadlines {
    attempt: Duration::from_secs(20),
    call: Duration::from_secs(60),
};

impl Default for Deadlines {
    fn default() -> Self {
        DEADLINES
    }
}

/// The longest wait between two tries of a call; the waits double from 100 ms up to it.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A duration as a sentence gives it: "20 s", "19.7 s", "300 ms".
pub(super) fn shown(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The tries of one call, under its [`Deadlines`].
pub(super) struct Tries {
    deadlines: Deadlines,
    start: Instant,
    attempt: u32,
}

impl Tries {
    pub(super) fn new(deadlines: Deadlines) -> Self {
        Tries {
            deadlines,
            start: Instant::now(),
            attempt: 1,
        }
    }

    /// Runs one try under its deadline: the try's own, or what is left of the call's.
    pub(super) async fn run<T>(
        &self,
        tried: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let left = self.deadlines.call.saturating_sub(self.start.elapsed());
        let limit = self.deadlines.attempt.min(left);
        tokio::time::timeout(limit, tried)
            .await
            .unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "no answer within {}",
                    shown(limit)
                )))
            })
    }

    /// After a try failed with `error`, which a retry may cure: waits before the next try and
    /// returns true, or returns false at once when the wait and a fair try (a quarter of a
    /// try's deadline) no longer fit in the call's bound.
    pub(super) async fn wait(&mut self, what: &str, error: &Status) -> bool {
        let wait = MAX_BACKOFF.min(Duration::from_millis(50 << self.attempt.min(7)));
        if self.start.elapsed() + wait + self.deadlines.attempt / 4 > self.deadlines.call {
            return false;
        }
        tracing::warn!(call = what, attempt = self.attempt, error = %error, "party call failed, resending the same call");
        tokio::time::sleep(wait).await;
        self.attempt += 1;
        true
    }

    /// The call's failure after its last try failed with `last`: one that ends the call for
    /// want of time (the party did not answer, or could not be reached, within the bound)
    /// says so and how often it was tried; any other is the party's own answer.
    pub(super) fn failed(&self, what: &str, last: Status, retried: bool) -> CallError {
        if !transient(&last) || !(retried || last.code() == Code::DeadlineExceeded) {
            return last.into();
        }
        let attempts = match self.attempt {
            1 => "1 attempt".to_string(),
            n => format!("{n} attempts"),
        };
        CallError {
            kind: CallErrorKind::Unavailable,
            message: format!(
                "did not answer {what} within {} ({attempts}; the last: {} ({:?}))",
                shown(self.deadlines.call),
                last.message(),
                last.code()
            ),
        }
    }
}

/// A failure a retry may cure: the party unreachable or restarting (UNAVAILABLE), the
/// deadline passed, or the connection broken mid-call (UNKNOWN, as tonic reports a reset,
/// or CANCELLED, as it reports a call started on a connection that has just closed: seen
/// when a party was killed between two step frames). No party refuses with these codes.
pub(super) fn transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
    )
}

/// Makes one call by tries of `attempt` until one answers, trying again after a failure a
/// retry may cure (one `retry` admits) while the call's bound allows. `what` names the call
/// in warnings and errors.
pub(super) async fn retried<T, F>(
    what: &str,
    retry: fn(&Status) -> bool,
    deadlines: Deadlines,
    mut attempt: impl FnMut() -> F,
) -> Result<T, CallError>
where
    F: Future<Output = Result<T, Status>>,
{
    let mut tries = Tries::new(deadlines);
    loop {
        match tries.run(attempt()).await {
            Ok(answer) => return Ok(answer),
            Err(s) if transient(&s) && retry(&s) => {
                if !tries.wait(what, &s).await {
                    return Err(tries.failed(what, s, true));
                }
            }
            Err(s) => return Err(tries.failed(what, s, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Deadlines short enough for a test: tries of 200 ms, calls of 1 s.
    const QUICK: Deadlines = Deadlines {
        attempt: Duration::from_millis(200),
        call: Duration::from_secs(1),
    };

    /// Runs `retried` on `answer`, returning its result, its tries and how long it took.
    async fn tried<F: Future<Output = Result<(), Status>>>(
        retry: fn(&Status) -> bool,
        answer: impl Fn() -> F,
    ) -> (Result<(), CallError>, u32, Duration) {
        let tries = AtomicU32::new(0);
        let start = Instant::now();
        let result = retried("Step 17 of chain 0", retry, QUICK, || {
            tries.fetch_add(1, Ordering::SeqCst);
            answer()
        })
        .await;
        (result, tries.into_inner(), start.elapsed())
    }

    #[test]
    fn the_default_bounds_are_a_minute_of_twenty_second_tries() {
        assert_eq!(Deadlines::default(), DEADLINES);
        assert_eq!(DEADLINES.call, 3 * DEADLINES.attempt);
        assert_eq!(shown(DEADLINES.call), "60 s");
        assert_eq!(shown(Duration::from_millis(19_700)), "19.7 s");
        assert_eq!(shown(Duration::from_millis(300)), "300 ms");
    }

    #[tokio::test]
    async fn a_call_never_answered_ends_within_its_bound_naming_the_call() {
        let (result, tries, took) = tried(transient, std::future::pending).await;
        let e = result.unwrap_err();
        assert_eq!(e.kind, CallErrorKind::Unavailable);
        assert!(
            e.message.starts_with(&format!(
                "did not answer Step 17 of chain 0 within 1 s ({tries} attempts; the last: no answer within"
            )),
            "{}",
            e.message
        );
        assert!(tries >= 2, "{tries} tries");
        assert!(took <= QUICK.call + Duration::from_millis(300), "{took:?}");
    }

    #[tokio::test]
    async fn an_unreachable_party_is_tried_until_the_bound_then_named() {
        let (result, tries, took) = tried(transient, || async {
            Err(Status::unavailable("connection refused"))
        })
        .await;
        let e = result.unwrap_err();
        assert_eq!(e.kind, CallErrorKind::Unavailable);
        assert!(
            e.message.ends_with(&format!(
                "within 1 s ({tries} attempts; the last: connection refused (Unavailable))"
            )),
            "{}",
            e.message
        );
        // Waits of 100, 200, 400 ms fit in 1 s with a fair try after each.
        assert!(tries >= 3, "{tries} tries");
        assert!(took >= Duration::from_millis(500), "{took:?}");
        assert!(took <= QUICK.call + Duration::from_millis(300), "{took:?}");
    }

    #[tokio::test]
    async fn a_refusal_is_not_tried_again_and_keeps_its_words() {
        let (result, tries, _) = tried(transient, || async {
            Err(Status::failed_precondition("run r1 is closed"))
        })
        .await;
        let e = result.unwrap_err();
        assert_eq!(tries, 1);
        assert_eq!(e.kind, CallErrorKind::Refused);
        assert_eq!(e.message, "run r1 is closed (FailedPrecondition)");
    }

    #[tokio::test]
    async fn a_call_that_may_have_arrived_is_tried_once_and_a_silent_one_named() {
        // OpenRun's rule: only an unreached party is tried again.
        let unreached = |s: &Status| s.code() == Code::Unavailable;
        let (result, tries, _) = tried(unreached, || async {
            Err(Status::unknown("connection reset"))
        })
        .await;
        assert_eq!(tries, 1);
        assert_eq!(result.unwrap_err().message, "connection reset (Unknown)");
        let (result, tries, took) = tried(unreached, std::future::pending).await;
        assert_eq!(tries, 1);
        assert!(took < QUICK.call, "{took:?}");
        assert!(
            result
                .unwrap_err()
                .message
                .contains("within 1 s (1 attempt; the last: no answer within 200 ms"),
        );
    }
}
