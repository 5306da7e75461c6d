//! Replays and order: a replayed step gets its stored answer and is charged once, steps out
//! of order are refused, and the step stream answers frame by frame, chain by chain.
use fedmcmc_proto::v1 as pb;
use tonic::Code;

use crate::harness::{
    PROP, TH, fresh, llr, one_per_frame, open, plan, releases_at_close, replies_of, step_request,
    tau,
};

#[tokio::test]
async fn replayed_step_returns_the_stored_answer_and_is_charged_once() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(2, 5, tau(0.5)))
        .await
        .unwrap();
    let first = llr(&mut c, &grant.run_id, 1, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let again = llr(&mut c, &grant.run_id, 1, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    assert_eq!(first.value, again.value);
    assert_eq!(first.noise_variance, again.noise_variance);
    assert!(!first.replayed && again.replayed);
    // A reused step with a new θ is refused, whichever entry differs.
    let err = llr(
        &mut c,
        &grant.run_id,
        1,
        0,
        vec![0.0, 3.0],
        vec![0.01, 2.98],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("already answered"),
        "{}",
        err.message()
    );
    // Out of order: skipping ahead, or going back past the last step.
    let err = llr(&mut c, &grant.run_id, 1, 2, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    llr(&mut c, &grant.run_id, 1, 1, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap();
    let err = llr(&mut c, &grant.run_id, 1, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    // Charged once per step: two releases in all.
    assert_eq!(releases_at_close(&mut c, &grant.run_id).await, 2);
    // A closed run answers nothing new.
    let err = llr(&mut c, &grant.run_id, 0, 0, TH.to_vec(), PROP.to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    party.stop().await;
}

#[tokio::test]
async fn the_step_stream_answers_in_order_and_refusals_do_not_end_it() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(1, 5, tau(0.5)))
        .await
        .unwrap();
    let req =
        |step: u64, theta: Vec<f64>| step_request(&grant.run_id, 0, step, theta, PROP.to_vec());
    let requests = vec![
        req(0, TH.to_vec()),
        req(1, vec![f64::NAN, 3.0]),
        req(0, TH.to_vec()),
        req(1, TH.to_vec()),
        req(3, TH.to_vec()),
    ];
    let replies = c
        .step_stream(one_per_frame(requests))
        .await
        .unwrap()
        .into_inner();
    let got: Vec<_> = replies_of(replies).await.into_iter().flatten().collect();
    use pb::step_reply::Result as R;
    assert_eq!(got.len(), 5);
    let first = match &got[0] {
        R::Contribution(c) => c.clone(),
        other => panic!("{other:?}"),
    };
    assert!(matches!(&got[1], R::Refusal(r) if r.code == Code::InvalidArgument as i32));
    assert!(matches!(&got[2], R::Contribution(c) if c.replayed && c.value == first.value));
    assert!(matches!(&got[3], R::Contribution(c) if !c.replayed));
    assert!(matches!(&got[4], R::Refusal(r) if r.code == Code::FailedPrecondition as i32));

    // An oversize message ends a stream with RESOURCE_EXHAUSTED, as it fails a unary call.
    let huge = vec![0.5; 100_000];
    let oversize = step_request(&grant.run_id, 0, 2, huge.clone(), huge);
    let mut replies = c
        .step_stream(one_per_frame(vec![oversize]))
        .await
        .unwrap()
        .into_inner();
    let err = replies.message().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{}", err.message());

    let mut anon = party.client_with(None).await;
    let err = anon
        .step_stream(one_per_frame(vec![req(2, TH.to_vec())]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    party.stop().await;
}

/// One frame carries every chain's step: each is answered as alone, in the frame's order,
/// whatever the order of its chains; a chain asked twice in a frame gets its steps in turn
/// (the second a replay of the first); a refusal fails only its own step; a frame of more
/// than the party's limit is refused step by step; every release is in the ledger once.
#[tokio::test]
async fn a_frame_answers_every_chain_as_alone() {
    let (_dir, party, mut c) = fresh().await;
    let grant = open(&mut c, &party.fingerprint, plan(4, 5, tau(0.5)))
        .await
        .unwrap();
    let req = |chain: u32, step: u64, theta: Vec<f64>| {
        step_request(&grant.run_id, chain, step, theta, PROP.to_vec())
    };
    let frames = vec![
        pb::StepFrame {
            steps: vec![
                req(2, 0, TH.to_vec()),
                req(0, 0, TH.to_vec()),
                req(3, 0, vec![f64::NAN, 3.0]),
                req(1, 0, TH.to_vec()),
                req(0, 0, TH.to_vec()),
                req(9, 0, TH.to_vec()),
                step_request("0123456789abcdef", 0, 0, TH.to_vec(), PROP.to_vec()),
            ],
        },
        pb::StepFrame {
            steps: (0..4).map(|chain| req(chain, 1, TH.to_vec())).collect(),
        },
        pb::StepFrame {
            // Small enough to pass the message size limit: refused for the count alone.
            steps: (0..1025)
                .map(|_| step_request(&grant.run_id, 0, 2, vec![], vec![]))
                .collect(),
        },
    ];
    let replies = c
        .step_stream(futures::stream::iter(frames))
        .await
        .unwrap()
        .into_inner();
    let got = replies_of(replies).await;
    use pb::step_reply::Result as R;
    let value = |r: &R| match r {
        R::Contribution(c) => (c.value.clone(), c.replayed),
        R::Refusal(r) => panic!("refused: {r:?}"),
    };
    let code = |r: &R| match r {
        R::Refusal(r) => Code::from(r.code),
        R::Contribution(c) => panic!("answered: {c:?}"),
    };
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [7, 4, 1025]);
    let (first, replayed) = value(&got[0][1]);
    assert!(!replayed);
    assert_eq!(
        value(&got[0][4]),
        (first, true),
        "the same step again: its stored answer"
    );
    assert!(!value(&got[0][0]).1 && !value(&got[0][3]).1);
    assert_eq!(code(&got[0][2]), Code::InvalidArgument);
    assert_eq!(code(&got[0][5]), Code::InvalidArgument, "chain 9 of 4");
    assert_eq!(code(&got[0][6]), Code::NotFound);
    // Chain 3's step 0 was refused, so its step 1 is out of order; the others go on.
    assert_eq!(code(&got[1][3]), Code::FailedPrecondition);
    for r in &got[1][..3] {
        assert!(!value(r).1);
    }
    assert!(got[2].iter().all(|r| code(r) == Code::ResourceExhausted));
    assert_eq!(releases_at_close(&mut c, &grant.run_id).await, 6);
    party.stop().await;
}
