//! A party's steps in frames: the steps the chains ask while a frame is out go together in
//! the next, so a run of C chains makes one round trip per step (and the party one fsync)
//! instead of C.
use std::time::Duration;

use fedmcmc_party::service::MAX_FRAME_STEPS;
use fedmcmc_proto::MAX_MESSAGE_BYTES;
use fedmcmc_proto::v1 as pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::Client;
use super::retry::{Deadlines, shown};

/// An open step stream: frames go in through `frames`, their replies come back in order.
struct StepStream {
    frames: mpsc::Sender<pb::StepFrame>,
    replies: tonic::Streaming<pb::StepReplies>,
}

/// What a party's frame task is asked: a step, with where its reply goes, or to end the
/// stream (the run is over).
pub(super) enum Framed {
    Step(
        pb::StepRequest,
        oneshot::Sender<Result<pb::StepReply, Status>>,
    ),
    EndStream,
}

/// How long a frame waits for the rest of the chains that stepped together last time: far
/// beyond the microseconds a chain takes between its steps, so it only passes when a chain
/// has ended (the next frame then expects one step fewer).
const LINGER: Duration = Duration::from_millis(2);

/// Sends a party's steps in frames, one frame out at a time, until its
/// [`GrpcParty`](super::GrpcParty) is dropped. Each frame takes every step queued while the
/// last was out, waiting up to [`LINGER`] for as many as the last frame held. A frame that fails (the stream broke, or
/// no reply within a try's deadline) fails each of its steps, whose callers retry, and
/// drops the stream, so a late reply is never read for another frame.
pub(super) async fn frames(
    client: Client,
    deadlines: Deadlines,
    mut queue: mpsc::UnboundedReceiver<Framed>,
) {
    let mut stream: Option<StepStream> = None;
    let mut expected = 1;
    let mut next = queue.recv().await;
    while let Some(first) = next.take() {
        let mut frame = Frame::default();
        frame.take(first, &mut stream);
        while frame.steps.len() < MAX_FRAME_STEPS {
            let more = match queue.try_recv() {
                Ok(more) => Some(more),
                Err(_) if frame.steps.len() >= expected => None,
                Err(_) => tokio::time::timeout(LINGER, queue.recv())
                    .await
                    .ok()
                    .flatten(),
            };
            match more {
                Some(Framed::Step(ref request, _)) if !frame.fits(request) => {
                    next = more;
                    break;
                }
                Some(more) => frame.take(more, &mut stream),
                None => break,
            }
        }
        if !frame.steps.is_empty() {
            expected = frame.steps.len();
            let (requests, replies): (Vec<_>, Vec<_>) = frame.steps.into_iter().unzip();
            let answered = tokio::time::timeout(
                deadlines.attempt,
                send_frame(&client, &mut stream, requests),
            )
            .await
            .unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "no answer within {}",
                    shown(deadlines.attempt)
                )))
            });
            match answered {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(Ok(answer));
                    }
                }
                Err(status) => {
                    stream = None;
                    for reply in replies {
                        let _ = reply.send(Err(status.clone()));
                    }
                }
            }
        }
        if next.is_none() {
            next = queue.recv().await;
        }
    }
}

/// The steps of the frame being gathered, and its encoded size.
#[derive(Default)]
struct Frame {
    steps: Vec<(
        pb::StepRequest,
        oneshot::Sender<Result<pb::StepReply, Status>>,
    )>,
    bytes: usize,
}

impl Frame {
    fn take(&mut self, framed: Framed, stream: &mut Option<StepStream>) {
        match framed {
            Framed::Step(request, reply) => {
                self.bytes += Self::size(&request);
                self.steps.push((request, reply));
            }
            Framed::EndStream => *stream = None,
        }
    }

    /// Whether `request` fits within the party's message limit beside the steps taken (a
    /// step too large for any frame goes alone, and the party refuses it).
    fn fits(&self, request: &pb::StepRequest) -> bool {
        self.bytes + Self::size(request) <= MAX_MESSAGE_BYTES
    }

    /// A request's bytes in a frame: its tag, its length and itself.
    fn size(request: &pb::StepRequest) -> usize {
        let len = prost::Message::encoded_len(request);
        1 + prost::length_delimiter_len(len) + len
    }
}

/// Sends one frame on the stream (opening it if needed) and waits for its replies, one per
/// step. A failure leaves the caller to drop the stream.
async fn send_frame(
    client: &Client,
    slot: &mut Option<StepStream>,
    steps: Vec<pb::StepRequest>,
) -> Result<Vec<pb::StepReply>, Status> {
    if slot.is_none() {
        let (frames, inbound) = mpsc::channel(1);
        let replies = client
            .clone()
            .step_stream(ReceiverStream::new(inbound))
            .await?
            .into_inner();
        *slot = Some(StepStream { frames, replies });
    }
    let stream = slot.as_mut().expect("stream just opened");
    let asked = steps.len();
    if stream.frames.send(pb::StepFrame { steps }).await.is_err() {
        return Err(Status::unavailable("the step stream is closed"));
    }
    match stream.replies.message().await? {
        Some(r) if r.replies.len() == asked => Ok(r.replies),
        Some(r) => Err(Status::internal(format!(
            "the party answered a frame of {asked} steps with {} replies",
            r.replies.len()
        ))),
        None => Err(Status::unavailable("the party ended the step stream")),
    }
}
