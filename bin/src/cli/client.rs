//! The connection to a node: its address and token from the home directory, the typed
//! client over HTTP (and WebSocket for subscriptions), and the CLI's errors.

use std::future::Future;
use std::time::Duration;

use jsonrpsee::core::client::{ClientT, Error as ClientError};
use jsonrpsee::core::traits::ToRpcParams;
use jsonrpsee::http_client::HttpClient;
use jsonrpsee::ws_client::{WsClient, WsClientBuilder};
use serde::Serialize;
use serde_json::Value;
use weft_node::rpc::client::ByName;

use crate::home::{Home, HomeError};

/// Errors of the CLI.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The home directory.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The node answered with a JSON-RPC error.
    #[error("{message} (error {code})")]
    Rpc {
        /// The error code.
        code: i32,
        /// The message.
        message: String,
        /// The error's data.
        data: Option<Value>,
    },
    /// The node could not be reached or refused the request.
    #[error("{0}")]
    Transport(String),
    /// Bad local input (a file, a JSON argument).
    #[error("{0}")]
    Input(String),
}

/// An error as `--json` prints it: `{"error": {code, message, data}}`, or only a message when
/// the node did not answer one.
#[derive(Serialize)]
struct ErrorLine<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<i32>,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Option<Value>>,
}

impl CliError {
    /// The error as JSON, for `--json`.
    pub fn to_json(&self) -> Value {
        let error = match self {
            CliError::Rpc { code, message, data } => {
                ErrorBody { code: Some(*code), message: message.clone(), data: Some(data) }
            }
            other => ErrorBody { code: None, message: other.to_string(), data: None },
        };
        serde_json::to_value(ErrorLine { error }).unwrap_or(Value::Null)
    }
}

/// Params already written as JSON (`weft call`).
struct RawParams(Value);

impl ToRpcParams for RawParams {
    fn to_rpc_params(self) -> Result<Option<Box<serde_json::value::RawValue>>, serde_json::Error> {
        serde_json::value::to_raw_value(&self.0).map(Some)
    }
}

/// A connection to a node.
pub struct Client {
    url: String,
    token: String,
    home: Home,
    http: ByName<HttpClient>,
}

/// The largest request and response, in bytes.
const MAX_MESSAGE: u32 = 64 << 20;

impl Client {
    /// Connects using the home's token and address (or `rpc`).
    pub fn connect(home: Home, rpc: Option<String>) -> Result<Client, CliError> {
        let token = home.load_token()?;
        let url = match rpc {
            Some(url) => url,
            None => format!("http://{}", default_addr(&home)?),
        };
        let url = url.trim_end_matches('/').to_string();
        let http = HttpClient::builder()
            .set_headers(auth_headers(&token)?)
            .max_request_size(MAX_MESSAGE)
            .max_response_size(MAX_MESSAGE)
            .request_timeout(Duration::from_secs(60))
            .build(&url)
            .map_err(|e| CliError::Transport(format!("{url}: {e}")))?;
        Ok(Client { url, token, home, http: ByName(http) })
    }

    /// The typed client: `WeftApiClient`'s methods, over HTTP.
    pub fn api(&self) -> &ByName<HttpClient> {
        &self.http
    }

    /// Awaits a call of [`Client::api`] (or of [`Client::ws`]'s client), with its error as the
    /// CLI says it.
    pub async fn ask<R>(&self, call: impl Future<Output = Result<R, ClientError>>) -> Result<R, CliError> {
        call.await.map_err(|e| self.error(e))
    }

    /// Calls `method` with `params` as they are (any JSON) and returns the raw result.
    pub async fn call_raw(&self, method: &str, params: Value) -> Result<Value, CliError> {
        self.ask(self.http.0.request(method, RawParams(params))).await
    }

    /// A WebSocket connection, for subscriptions.
    pub async fn ws(&self) -> Result<ByName<WsClient>, CliError> {
        let ws_url = format!("{}/ws", self.url.replacen("http://", "ws://", 1).replacen("https://", "wss://", 1));
        let ws = WsClientBuilder::default()
            .set_headers(auth_headers(&self.token)?)
            .max_response_size(MAX_MESSAGE)
            .build(&ws_url)
            .await
            .map_err(|e| self.error(e))?;
        Ok(ByName(ws))
    }

    fn error(&self, e: ClientError) -> CliError {
        match e {
            ClientError::Call(e) => CliError::Rpc {
                code: e.code(),
                message: e.message().to_string(),
                data: e.data().and_then(|d| serde_json::from_str(d.get()).ok()),
            },
            other => {
                let text = other.to_string();
                if text.contains("401") {
                    CliError::Transport(format!(
                        "the node at {} refused the admin token from {} (HTTP 401)",
                        self.url,
                        self.home.token_path().display()
                    ))
                } else {
                    CliError::Transport(format!("cannot reach the node at {}: {text} (is weftd running?)", self.url))
                }
            }
        }
    }
}

fn auth_headers(token: &str) -> Result<http::HeaderMap, CliError> {
    let mut headers = http::HeaderMap::new();
    let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| CliError::Input("the admin token holds characters not allowed in a header".into()))?;
    headers.insert(http::header::AUTHORIZATION, value);
    Ok(headers)
}

/// The running node's address from `<home>/rpc-addr`, else config.toml's `rpc.listen`.
fn default_addr(home: &Home) -> Result<String, CliError> {
    if let Ok(addr) = std::fs::read_to_string(home.rpc_addr_path()) {
        return Ok(addr.trim().to_string());
    }
    Ok(home.load_config()?.rpc.listen.to_string())
}
