//! The HTTP layer in front of JSON-RPC: bearer-token auth, probes and metrics.
//!
//! | path | auth | answer |
//! |---|---|---|
//! | `GET /health` | none | 200 while the process serves HTTP |
//! | `GET /ready` | none | 200 once the node can serve calls, else 503 saying why (the store is not open yet, its WAL cannot be synced, or a supervised task died — named) |
//! | `GET /metrics` | bearer | Prometheus text exposition |
//! | `POST /`, WebSocket `/ws` (also `/`) | bearer | JSON-RPC 2.0 |
//! | anything else | — | 404 |
//!
//! A request without `Authorization: Bearer <token>`, or with another token, gets
//! 401 before it reaches JSON-RPC; for a WebSocket this refuses the upgrade. The
//! token is compared in constant time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, Method, StatusCode};
use jsonrpsee::core::BoxError;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use tower::{Layer, Service};

/// What the HTTP layer asks of the node.
pub trait Probe: Send + Sync + 'static {
    /// Whether the node can serve calls, or why not (the 503's body).
    fn ready(&self) -> Result<(), String>;
    /// The metrics exposition.
    fn metrics(&self) -> String;
}

/// Tower layer adding auth, probes and metrics in front of the JSON-RPC service.
#[derive(Clone)]
pub struct AdminLayer {
    token: Arc<[u8]>,
    probe: Arc<dyn Probe>,
}

impl AdminLayer {
    /// A layer requiring `token`.
    pub fn new(token: &str, probe: Arc<dyn Probe>) -> Self {
        AdminLayer { token: token.as_bytes().into(), probe }
    }
}

impl<S> Layer<S> for AdminLayer {
    type Service = Admin<S>;
    fn layer(&self, inner: S) -> Admin<S> {
        Admin { inner, token: self.token.clone(), probe: self.probe.clone() }
    }
}

/// The service [`AdminLayer`] makes.
#[derive(Clone)]
pub struct Admin<S> {
    inner: S,
    token: Arc<[u8]>,
    probe: Arc<dyn Probe>,
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> HttpResponse {
    let mut response = HttpResponse::new(HttpBody::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    response
}

fn unauthorized(reason: &str) -> HttpResponse {
    let mut response = text(StatusCode::UNAUTHORIZED, "text/plain; charset=utf-8", format!("{reason}\n"));
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

/// Whether the presented token is the expected one, in time that depends on neither: both are
/// hashed first, and the two digests (always 32 bytes) compared in constant time, so neither a
/// wrong byte's position nor a wrong length shows in the answer's timing.
fn same(presented: &[u8], expected: &[u8]) -> bool {
    blake3::hash(presented) == blake3::hash(expected)
}

/// The credentials of an `Authorization: Bearer <token>` header; the scheme is
/// case-insensitive (RFC 9110, 11.1), and any other scheme presents nothing.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at(value.iter().position(|b| *b == b' ')?);
    scheme.eq_ignore_ascii_case(b"bearer").then(|| rest.trim_ascii())
}

impl<S> Admin<S> {
    /// `None` when the request carries the right token, else the 401 to send.
    fn check_auth<B>(&self, req: &HttpRequest<B>) -> Option<HttpResponse> {
        let Some(value) = req.headers().get(header::AUTHORIZATION) else {
            return Some(unauthorized("missing Authorization: Bearer <token> (the token is in <home>/admin-token)"));
        };
        match bearer(value.as_bytes()) {
            Some(presented) if same(presented, &self.token) => None,
            Some(_) => Some(unauthorized("wrong bearer token")),
            None => Some(unauthorized("the Authorization header must use the Bearer scheme: Bearer <token>")),
        }
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<HttpResponse, BoxError>> + Send + 'static>>;

impl<S, B> Service<HttpRequest<B>> for Admin<S>
where
    S: Service<HttpRequest<B>, Response = HttpResponse, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: HttpRequest<B>) -> BoxFuture {
        let ready = |r: HttpResponse| -> BoxFuture { Box::pin(async move { Ok(r) }) };
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/health") => ready(text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into())),
            (&Method::GET, "/ready") => ready(match self.probe.ready() {
                Ok(()) => text(StatusCode::OK, "text/plain; charset=utf-8", "ready\n".into()),
                Err(why) => {
                    text(StatusCode::SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", format!("not ready: {why}\n"))
                }
            }),
            (&Method::GET, "/metrics") => match self.check_auth(&req) {
                Some(denied) => ready(denied),
                None => ready(text(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    self.probe.metrics(),
                )),
            },
            (_, "/" | "/ws") => match self.check_auth(&req) {
                Some(denied) => ready(denied),
                None => {
                    // The inner service was polled ready; hand that instance the request and keep
                    // a fresh clone for the next one (tower's clone-and-swap pattern).
                    let clone = self.inner.clone();
                    let mut inner = std::mem::replace(&mut self.inner, clone);
                    Box::pin(inner.call(req))
                }
            },
            _ => ready(text(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{bearer, same};

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_required() {
        assert_eq!(bearer(b"Bearer tok"), Some(&b"tok"[..]));
        assert_eq!(bearer(b"bearer tok"), Some(&b"tok"[..]));
        assert_eq!(bearer(b"BEARER  tok "), Some(&b"tok"[..]));
        assert_eq!(bearer(b"Basic tok"), None);
        assert_eq!(bearer(b"Bearertok"), None);
        assert_eq!(bearer(b"tok"), None);
    }

    #[test]
    fn token_comparison() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
    }
}
