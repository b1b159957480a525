//! The service every connection runs: the router, behind two bounds on request bodies that the
//! handlers (which read bodies with `http::body::read_limited`) need not know about.
//!
//! - **In-flight bytes**: one byte budget for the whole node (`--max-inflight-bytes`, counted in
//!   KiB). A request with a `Content-Length` takes that much (at most the largest body any route
//!   accepts) before its handler runs, and is answered 503 with `Retry-After` at once when the
//!   budget cannot cover it; a chunked body takes from the budget as its bytes arrive and is cut
//!   off (503) when it runs dry. What a request took is given back when its answer is ready:
//!   until then the handler may hold the body's bytes.
//! - **Body time**: the body must arrive within `--body-timeout` of the head; a slower one is cut
//!   off and the request answered 408.
//!
//! A body cut off shows the handler an error (it answers 400, "reading body"); the answer is then
//! replaced by the 408 or 503 that says why. Requests without a body pass straight through.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tower_service::Service;

use super::HttpLimits;
use super::deadline::Deadline;
use crate::http::ApiError;

/// The budget's unit: bytes are counted in whole KiB (rounded up), so that a `u32` of permits
/// covers any budget.
const UNIT: u64 = 1024;
/// The most a declared body takes from the budget: no route reads more (a larger body is
/// answered 413 after at most a bounded drain, which holds nothing).
const MAX_HELD_BYTES: u64 = narad_core::constants::MAX_BATCH_BYTES as u64;
/// The `Retry-After` of an over-budget answer, in seconds.
const RETRY_AFTER_SECS: u32 = 1;

/// The router behind the body bounds; cheap to clone (one per connection).
#[derive(Clone)]
pub(super) struct Bounded {
    router: Router,
    budget: Arc<Semaphore>,
    body_timeout: Duration,
    /// The connection's deadline, told where each request begins and ends.
    deadline: Option<Arc<Deadline>>,
}

/// Why a body was cut off (0: it was not).
const CUT_TIMEOUT: u8 = 1;
const CUT_BUDGET: u8 = 2;

/// What one request took from the budget, and whether its body was cut off; shared between the
/// body (which the handler drops once read) and the answer.
#[derive(Default)]
struct Ledger {
    held: Mutex<Option<OwnedSemaphorePermit>>,
    cut: AtomicU8,
}

impl Bounded {
    pub(super) fn new(router: Router, limits: &HttpLimits) -> Bounded {
        let units = (limits.max_inflight_bytes as u64).div_ceil(UNIT);
        let units = usize::try_from(units).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        Bounded {
            router,
            budget: Arc::new(Semaphore::new(units)),
            body_timeout: limits.body_timeout,
            deadline: None,
        }
    }

    /// Takes `bytes` of the budget for a request that declared its length.
    fn reserve(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let units = u32::try_from(bytes.min(MAX_HELD_BYTES).div_ceil(UNIT)).ok()?;
        self.budget.clone().try_acquire_many_owned(units).ok()
    }
}

impl hyper::service::Service<Request<Incoming>> for Bounded {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let this = self.clone();
        let in_hand = this.deadline.clone().map(InHand::new);
        Box::pin(async move {
            let response = this.respond(request).await;
            drop(in_hand);
            Ok(response)
        })
    }
}

/// One request in hand on its connection's deadline, from its head until its answer is ready or
/// its future is dropped (an HTTP/2 stream reset by the client).
struct InHand(Arc<Deadline>);

impl InHand {
    fn new(deadline: Arc<Deadline>) -> InHand {
        deadline.request_started();
        InHand(deadline)
    }
}

impl Drop for InHand {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

impl Bounded {
    /// This service for one connection, marking its requests' start and end on `deadline`.
    pub(super) fn for_connection(&self, deadline: Arc<Deadline>) -> Bounded {
        Bounded { deadline: Some(deadline), ..self.clone() }
    }

    async fn respond(&self, request: Request<Incoming>) -> Response {
        let mut router = self.router.clone();
        if http_body::Body::is_end_stream(request.body()) {
            let Ok(response) = router.call(request.map(Body::new)).await;
            return response;
        }
        let ledger = Arc::new(Ledger::default());
        let Some(budget) = self.take_declared(&request, &ledger) else {
            return over_budget();
        };
        let sleep = Box::pin(tokio::time::sleep(self.body_timeout));
        let watched = ledger.clone();
        let request = request
            .map(|inner| Body::new(Guarded { inner, sleep, ledger: watched, budget, seen: 0 }));
        let Ok(response) = router.call(request).await;
        let cut = ledger.cut.load(Ordering::Relaxed);
        drop(ledger); // The answer is ready: the handler no longer holds the body's bytes.
        match cut {
            CUT_TIMEOUT => timed_out(),
            CUT_BUDGET => over_budget(),
            _ => response,
        }
    }

    /// For a body of declared length, takes it from the budget into `ledger` (`None` when the
    /// budget cannot cover it); for a chunked one, the budget to take from as it arrives.
    fn take_declared(
        &self,
        request: &Request<Incoming>,
        ledger: &Ledger,
    ) -> Option<Option<Arc<Semaphore>>> {
        match http_body::Body::size_hint(request.body()).exact() {
            Some(bytes) => {
                *lock(&ledger.held) = Some(self.reserve(bytes)?);
                Some(None)
            }
            None => Some(Some(self.budget.clone())),
        }
    }
}

/// A request body under the bounds: a deadline, and for a chunked body the budget it draws on.
struct Guarded {
    inner: Incoming,
    sleep: Pin<Box<Sleep>>,
    ledger: Arc<Ledger>,
    /// The budget to take from as bytes arrive (a body without a declared length).
    budget: Option<Arc<Semaphore>>,
    /// Bytes of a chunked body so far.
    seen: u64,
}

/// Why a body stopped early, as the handler sees it.
#[derive(Debug, thiserror::Error)]
enum Cut {
    #[error("the request body did not arrive in time")]
    TimedOut,
    #[error("too many request bytes in flight on this node")]
    OverBudget,
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                ready!(this.sleep.as_mut().poll(cx));
                this.ledger.cut.store(CUT_TIMEOUT, Ordering::Relaxed);
                return Poll::Ready(Some(Err(Cut::TimedOut)));
            }
        };
        if let (Some(Ok(frame)), Some(budget)) = (&frame, &this.budget) {
            let len = frame.data_ref().map_or(0, |data| data.len() as u64);
            if !take_more(&this.ledger, budget, this.seen, len) {
                this.ledger.cut.store(CUT_BUDGET, Ordering::Relaxed);
                return Poll::Ready(Some(Err(Cut::OverBudget)));
            }
            this.seen += len;
        }
        Poll::Ready(frame.map(|frame| frame.map_err(Cut::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Takes from `budget` what `len` more bytes after `seen` need (whole units); false when it
/// cannot.
fn take_more(ledger: &Ledger, budget: &Arc<Semaphore>, seen: u64, len: u64) -> bool {
    let more = (seen + len).div_ceil(UNIT) - seen.div_ceil(UNIT);
    if more == 0 {
        return true;
    }
    let Ok(more) = u32::try_from(more) else { return false };
    let Ok(permit) = budget.clone().try_acquire_many_owned(more) else { return false };
    let mut held = lock(&ledger.held);
    match held.as_mut() {
        Some(held) => held.merge(permit),
        None => *held = Some(permit),
    }
    true
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// 503: the node holds as many request bytes as it may; retry shortly. The body is left unread,
/// so the connection closes after the answer.
fn over_budget() -> Response {
    let message = "too many request bytes in flight on this node: retry shortly";
    let mut response = closing(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message));
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}

/// 408: the body did not arrive within the body timeout.
fn timed_out() -> Response {
    let message = "the request body did not arrive in time";
    closing(ApiError::new(StatusCode::REQUEST_TIMEOUT, message))
}

fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_takes_whole_units_once() {
        let budget = Arc::new(Semaphore::new(4));
        let ledger = Ledger::default();
        assert!(take_more(&ledger, &budget, 0, 1)); // 1 byte: one unit.
        assert!(take_more(&ledger, &budget, 1, 1023)); // Still within the first unit.
        assert_eq!(budget.available_permits(), 3);
        assert!(take_more(&ledger, &budget, 1024, 3 * 1024)); // Three more.
        assert_eq!(budget.available_permits(), 0);
        assert!(!take_more(&ledger, &budget, 4 * 1024, 1), "the budget is spent");
        drop(ledger);
        assert_eq!(budget.available_permits(), 4, "all given back with the ledger");
    }
}
