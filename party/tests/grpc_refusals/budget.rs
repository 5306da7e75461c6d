//! The privacy budget: over-budget runs refused with what is left, reservations freed at
//! close, spending remembered across a restart, and an abandoned run closed by its lease.
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_proto::v1 as pb;
use tonic::Code;

use crate::harness::{
    PROP, Running, TH, calibrate, committed, fresh, llr, open, party_dir, plan, releases_at_close,
    tau,
};

#[tokio::test]
async fn over_budget_open_run_is_refused_with_what_is_left() {
    let (_dir, party, mut c) = fresh().await;
    // τ = 0.01 with n = 2000 gives s ≈ 0.447: a million releases cannot fit ε = 1.
    let err = open(&mut c, &party.fingerprint, plan(1, 1_000_000, tau(0.01)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("budget") && err.message().contains("at most"),
        "{}",
        err.message()
    );
    // Reservations of open runs count: once one open run has reserved everything, nothing
    // more is admitted.
    let first = open(&mut c, &party.fingerprint, plan(1, 10, calibrate()))
        .await
        .unwrap();
    assert!(
        (committed(&mut c).await - 1.0).abs() < 1e-6,
        "calibration takes all that is left"
    );
    let err = open(&mut c, &party.fingerprint, plan(1, 1, calibrate()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    // Closing after 2 of 10 releases frees the rest of the reservation.
    for step in 0..2 {
        llr(&mut c, &first.run_id, 0, step, TH.to_vec(), PROP.to_vec())
            .await
            .unwrap();
    }
    assert_eq!(releases_at_close(&mut c, &first.run_id).await, 2);
    assert!(committed(&mut c).await < 1.0);
    assert!(
        open(&mut c, &party.fingerprint, plan(1, 1, calibrate()))
            .await
            .is_ok()
    );
    party.stop().await;
}

#[tokio::test]
async fn a_restarted_party_remembers_what_it_spent_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let config = party_dir(dir.path(), 1.0, 1e-6);
    let party = Running::start(&config).await;
    let mut c = party.client().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 100, calibrate()))
        .await
        .unwrap();
    let answer = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let before = committed(&mut c).await;
    drop(c);
    party.stop().await;

    let party = Running::start(&config).await;
    let mut c = party.client().await;
    assert_eq!(committed(&mut c).await, before);
    let err = open(&mut c, &party.fingerprint, plan(1, 1, calibrate()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    let again = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert_eq!(again.value, answer.value);
    assert!(again.replayed);
    let err = llr(&mut c, &grant.run_id, 0, 0, vec![0.0, 3.5], PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let next = llr(&mut c, &grant.run_id, 0, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert!(!next.replayed);
    party.stop().await;
}

/// A coordinator that vanishes leaves its run open: the lease keeper closes it once it has
/// been idle for the lease, charging the one release made, and a late step is told so.
#[tokio::test]
async fn the_lease_keeper_closes_an_abandoned_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = party_dir(dir.path(), 1.0, 1e-6);
    config.limits.lease_seconds = 1;
    let party = Running::start(&config).await;
    let mut c = party.client().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 20, tau(0.5)))
        .await
        .unwrap();
    assert_eq!(grant.lease_seconds, 1);
    llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    // Wait for the keeper (it checks four times per lease); the bound only stops a hang.
    let mut d = c
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    for _ in 0..300 {
        if d.open_runs == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        d = c
            .describe(pb::DescribeRequest {})
            .await
            .unwrap()
            .into_inner();
    }
    assert_eq!(d.open_runs, 0, "the idle run was not closed");
    let one = fedmcmc_party::budget::Budget::new(config.budget)
        .unwrap()
        .epsilon_of(
            &fedmcmc_common::accountant::Composition::new(
                vec![fedmcmc_common::accountant::Release {
                    mechanism: fedmcmc_common::accountant::MechanismKind::Gaussian,
                    noise_multiplier: grant.noise_multiplier,
                    count: 1.0,
                }],
                Neighbours::Substitute,
            )
            .unwrap(),
        );
    assert!(
        (d.epsilon_committed / one - 1.0).abs() < 1e-12,
        "{} vs {one}",
        d.epsilon_committed
    );
    let err = llr(&mut c, &grant.run_id, 0, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("was closed after 1 s idle"),
        "{}",
        err.message()
    );
    party.stop().await;
}
