//! A readable 413: the connection of a request refused before its body was
//! read must not be reset under the client's feet.
//!
//! Two parts. [`early_413`] answers a request whose `Content-Length` is over
//! the body limit at once, with `Connection: close` and without reading the
//! body (so a client waiting on `Expect: 100-continue`, as curl does for big
//! bodies, never sends it). A body without a length that grows past the limit
//! is refused by axum's `DefaultBodyLimit` when it does. Either way hyper then
//! closes a connection whose body is unread, and a plain close with unread
//! bytes in the socket makes the kernel send a reset: a client still writing
//! its body (Python's `requests`, `http.client`) gets a broken pipe, or loses
//! the response it had not read yet. [`LingeringListener`] closes as nginx's
//! "lingering close" does: after hyper shuts the connection down (the
//! response sent, then FIN), the socket is read and the bytes dropped until
//! the client closes or is idle for [`IDLE`] or [`TOTAL`] has passed; only
//! then is it closed.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::error::ApiError;

/// Longest wait for the client's next bytes while draining a closed connection.
pub const IDLE: Duration = Duration::from_secs(5);
/// Longest drain of a closed connection.
pub const TOTAL: Duration = Duration::from_secs(30);

/// The 413 of a body over `limit` bytes (`given`: its length, if known),
/// asking the client to close.
pub fn too_large(limit: usize, given: Option<u64>) -> Response {
    let size = given.map_or(String::new(), |n| format!(" ({n} bytes)"));
    let mut r = ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body{size} is over the server's limit of {limit} bytes (--body-limit)"),
    )
    .code("request_too_large")
    .into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Answers a request whose `Content-Length` is over the limit before its
/// body is read; sets `Connection: close` on any 413.
pub async fn early_413(State(limit): State<usize>, req: Request, next: Next) -> Response {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = length.filter(|&n| n > limit as u64) {
        return too_large(limit, Some(n));
    }
    let mut resp = next.run(req).await;
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// A TCP listener whose connections close lingering (see the module).
pub struct LingeringListener(pub TcpListener);

impl axum::serve::Listener for LingeringListener {
    type Io = Lingering;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Lingering, std::net::SocketAddr) {
        let (s, a) = axum::serve::Listener::accept(&mut self.0).await;
        (Lingering(Some(s)), a)
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.0.local_addr()
    }
}

/// A connection that, when dropped, is drained before it is closed.
pub struct Lingering(Option<TcpStream>);

impl Lingering {
    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match self.0.as_mut() {
            Some(s) => Ok(Pin::new(s)),
            None => Err(io::Error::from(io::ErrorKind::NotConnected)),
        }
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.stream() {
            Ok(s) => s.poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.stream() {
            Ok(s) => s.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream() {
            Ok(s) => s.poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream() {
            Ok(s) => s.poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.stream() {
            Ok(s) => s.poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(mut s) = self.0.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            // FIN first (hyper has usually sent it already): the client reads
            // the response to its end while we drop what it still sends.
            let _ = std::future::poll_fn(|cx| Pin::new(&mut s).poll_shutdown(cx)).await;
            let mut buf = vec![0u8; 64 << 10];
            let drain = async {
                loop {
                    if !matches!(tokio::time::timeout(IDLE, s.readable()).await, Ok(Ok(()))) {
                        break;
                    }
                    match s.try_read(&mut buf) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                }
            };
            let _ = tokio::time::timeout(TOTAL, drain).await;
        });
    }
}
