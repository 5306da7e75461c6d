//! Requests refused whatever the budget: a Describe flood past its pace, malformed θ, unknown
//! runs, unauthenticated callers, oversize messages and bad plans.
use fedmcmc_proto::v1 as pb;
use tonic::Code;

use crate::harness::{PROP, TH, fresh, llr, open, plan, tau};

/// Describe is paced per caller (20 a second after a burst of 20; waits over 2 s are refused):
/// of a flood of 200, the burst and 2 s of the pace are answered (60 if all arrive at one
/// instant: 20 at once and 40 spaced 50 ms apart; one more per 50 ms of spread) and the rest
/// refused as RESOURCE_EXHAUSTED with a sentence, while the same caller's Step is answered.
#[tokio::test]
async fn a_describe_flood_is_paced_and_steps_go_on() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 4, tau(1.0)))
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..200 {
        clients.push(party.client().await); // other connections from the same address
    }
    let flood: Vec<_> = clients
        .into_iter()
        .map(|mut c| tokio::spawn(async move { c.describe(pb::DescribeRequest {}).await }))
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    llr(&mut c, &grant.run_id, 0, 0, vec![0.0, 3.0], vec![0.1, 3.0])
        .await
        .unwrap();
    let (mut answered, mut refused) = (0, 0);
    for call in flood {
        match call.await.unwrap() {
            Ok(_) => answered += 1,
            Err(e) => {
                assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                assert!(
                    e.message()
                        .starts_with("Describe is paced at 20 calls per second per caller"),
                    "{}",
                    e.message()
                );
                refused += 1;
            }
        }
    }
    // At least the burst and 2 s of the pace; at most that and 5 s of spread (a slow machine).
    assert!((60..=160).contains(&answered), "{answered} answered");
    assert_eq!(answered + refused, 200);
    party.stop().await;
}

#[tokio::test]
async fn malformed_theta_is_invalid_and_costs_nothing() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    for (theta, prop) in [
        (vec![f64::NAN, 3.0], PROP.to_vec()),
        (TH.to_vec(), vec![0.0, f64::INFINITY]),
        (TH.to_vec(), vec![f64::NEG_INFINITY, 3.0]),
        (vec![0.0, 3.0, 1.0], vec![0.0, 3.0, 1.0]),
        (vec![0.0], PROP.to_vec()),
        (vec![], vec![]),
        (vec![-1e300, 3.0], vec![1e300, 3.0]),
    ] {
        let err = llr(&mut c, &grant.run_id, 0, 0, theta.clone(), prop.clone())
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{theta:?} {prop:?}: {}",
            err.message()
        );
    }
    let err = llr(&mut c, &grant.run_id, 7, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "chain out of range");
    // None of that was charged: step 0 is still fresh.
    let ok = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert!(!ok.replayed);
    party.stop().await;
}

#[tokio::test]
async fn unknown_runs_unauthenticated_callers_oversize_messages_and_bad_plans_are_refused() {
    let (_dir, party, mut c) = fresh().await;
    let err = llr(&mut c, "0123456789abcdef", 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .close_run(pb::CloseRunRequest {
            run_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    for token in [None, Some("wrong-token-0123456789abcdef")] {
        let mut anon = party.client_with(token).await;
        let err = anon.describe(pb::DescribeRequest {}).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
        let err = open(&mut anon, &party.fingerprint, plan(1, 1, tau(1.0)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
    }

    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    let huge = vec![0.5; 100_000];
    let err = llr(&mut c, &grant.run_id, 0, 0, huge.clone(), huge)
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::ResourceExhausted,
        "oversize: {}",
        err.message()
    );
    assert!(
        !llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
            .await
            .unwrap()
            .replayed
    );

    // Plans: wrong model, unsupported variant, no noise choice, nonsense numbers.
    let err = open(&mut c, "not-the-model", plan(1, 1, tau(1.0)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let mut unserved = plan(1, 1, tau(1.0));
    unserved.variant = pb::Variant::SufficientStatistics as i32;
    assert_eq!(
        open(&mut c, &party.fingerprint, unserved)
            .await
            .unwrap_err()
            .code(),
        Code::Unimplemented
    );
    let mut hmc = plan(1, 1, tau(1.0));
    hmc.variant = pb::Variant::Hmc as i32;
    let err = open(&mut c, &party.fingerprint, hmc).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("leapfrog"), "{}", err.message());
    let mut none = plan(1, 1, tau(1.0));
    none.noise = None;
    assert_eq!(
        open(&mut c, &party.fingerprint, none)
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let mut unknown = plan(1, 1, tau(1.0));
    unknown.variant = 99;
    let err = open(&mut c, &party.fingerprint, unknown).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    assert!(err.message().contains("99"), "{}", err.message());
    // τ that the accountant cannot take: a sentence about τ, not the accountant's internals.
    for t in [1e-300, 5e-324, 1e308] {
        let err = open(&mut c, &party.fingerprint, plan(1, 1, tau(t)))
            .await
            .unwrap_err();
        assert!(
            matches!(err.code(), Code::InvalidArgument | Code::ResourceExhausted),
            "τ = {t}: {err:?}"
        );
        assert!(
            err.message().starts_with("tau = "),
            "τ = {t}: {}",
            err.message()
        );
    }
    for bad in [
        plan(0, 1, tau(1.0)),
        plan(1, 0, tau(1.0)),
        plan(1, 1, tau(f64::NAN)),
        plan(1, 1, tau(-1.0)),
    ] {
        assert_eq!(
            open(&mut c, &party.fingerprint, bad)
                .await
                .unwrap_err()
                .code(),
            Code::InvalidArgument
        );
    }
    // A run cannot release more than it planned.
    let small = open(&mut c, &party.fingerprint, plan(1, 1, tau(0.5)))
        .await
        .unwrap();
    llr(&mut c, &small.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let err = llr(&mut c, &small.run_id, 0, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    party.stop().await;
}
