//! The metrics port: `/health` says serving, and `/metrics` counts releases, replays,
//! refusals by code and step times, and gives the ledger's ε.
use fedmcmc_proto::v1 as pb;
use tonic::Code;

use crate::harness::{PROP, ROWS, TH, fresh, llr, one_per_frame, open, plan, step_request, tau};

/// The value of the metric line that starts with `series` (name and labels).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// The metrics port says the party is serving and counts what the calls did: releases,
/// replays, refusals by code (interceptors', handlers' and in-stream ones alike), step
/// times, and the ledger's ε as Describe gives it.
#[tokio::test]
async fn metrics_count_releases_and_refusals_by_code_and_health_says_serving() {
    let (_dir, party, mut c) = fresh().await;
    assert_eq!(
        party.http_get("/health").await,
        (200, "SERVING\n".to_string())
    );
    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    for step in 0..3 {
        llr(&mut c, &grant.run_id, 0, step, TH.to_vec(), PROP.to_vec())
            .await
            .unwrap();
    }
    // A replay, two bad θ, an unknown run, and an unauthenticated caller.
    llr(&mut c, &grant.run_id, 0, 2, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    for theta in [vec![f64::NAN, 3.0], vec![0.0]] {
        llr(&mut c, &grant.run_id, 0, 3, theta, PROP.to_vec())
            .await
            .unwrap_err();
    }
    llr(&mut c, "0123456789abcdef", 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    let mut anon = party.client_with(None).await;
    anon.describe(pb::DescribeRequest {}).await.unwrap_err();
    // One refusal inside a stream (a step out of the run's range).
    let late = step_request(&grant.run_id, 0, 99, TH.to_vec(), PROP.to_vec());
    let mut replies = c
        .step_stream(one_per_frame(vec![late]))
        .await
        .unwrap()
        .into_inner();
    let reply = replies.message().await.unwrap().unwrap().replies.remove(0);
    let Some(pb::step_reply::Result::Refusal(refusal)) = reply.result else {
        panic!("step 99 of 5 was answered");
    };
    assert_eq!(Code::from(refusal.code), Code::FailedPrecondition);

    let (code, text) = party.http_get("/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(metric(&text, "fedmcmc_party_releases_total"), 3.0);
    assert_eq!(metric(&text, "fedmcmc_party_replays_total"), 1.0);
    let refused = |code: &str| {
        metric(
            &text,
            &format!("fedmcmc_party_refusals_total{{code=\"{code}\"}}"),
        )
    };
    assert_eq!(refused("InvalidArgument"), 2.0, "{text}");
    assert_eq!(refused("NotFound"), 1.0);
    assert_eq!(refused("Unauthenticated"), 1.0);
    assert_eq!(
        refused("FailedPrecondition"),
        1.0,
        "the refusal in the stream"
    );
    // Every step, answered or refused, was timed: 3 + 1 + 2 + 1 + 1.
    assert_eq!(metric(&text, "fedmcmc_party_step_seconds_count"), 8.0);
    let d = c
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        metric(&text, "fedmcmc_party_epsilon_committed"),
        d.epsilon_committed
    );
    assert_eq!(metric(&text, "fedmcmc_party_epsilon_budget"), 1.0);
    assert_eq!(metric(&text, "fedmcmc_party_open_runs"), 1.0);
    assert_eq!(metric(&text, "fedmcmc_party_rows"), ROWS as f64);
    assert_eq!(party.http_get("/nowhere").await.0, 404);
    party.stop().await;
}
