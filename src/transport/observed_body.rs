//! The one body wrapper of the tower layers: a request or response body passed through as it
//! is, with something beside it that sees each frame go by (to count bytes, messages, a call's
//! status) and is dropped with the body (to give back what the body held, or to count a call
//! its client abandoned).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;

/// What rides along a body: told of each frame; dropped when the body is.
pub trait Observer: Send + 'static {
    /// A frame the body yields, before its reader gets it.
    fn frame(&mut self, _frame: &Frame<Bytes>) {}
}

pin_project_lite::pin_project! {
    /// `inner` with `observer` beside it.
    pub struct Observed<O> {
        #[pin]
        inner: Body,
        observer: O,
    }
}

/// `body` with `observer` beside it, as a body again.
pub fn observed<O: Observer>(body: Body, observer: O) -> Body {
    Body::new(Observed { inner: body, observer })
}

impl<O: Observer> HttpBody for Observed<O> {
    type Data = Bytes;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            this.observer.frame(frame);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
