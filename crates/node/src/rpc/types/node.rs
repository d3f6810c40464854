//! The node, its peers, blobs and applications: `node_*`, `blob_*`, `app_*`.

use serde::{Deserialize, Serialize};

/// `node_info`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The libp2p peer id.
    pub peer_id: String,
    /// This node's identity: the key other nodes invite (`context_invite`'s `invitee`).
    pub identity: String,
    /// The bound p2p addresses, each ending in `/p2p/<peer id>`: what another node dials.
    pub listen_addrs: Vec<String>,
    /// The RPC address this server is bound to.
    pub rpc_addr: String,
    /// The node's version.
    pub version: String,
    /// The configured p2p listen addresses.
    pub p2p_listen: Vec<String>,
    /// The configured bootstrap peers.
    pub bootstrap: Vec<String>,
}

/// `node_peers`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peers {
    /// A page of the connected peers, by peer id.
    pub peers: Vec<Peer>,
    /// The cursor to pass as `start_after` for the next page (null on the last).
    #[serde(default)]
    pub next: Option<String>,
}

/// A connected peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// Its peer id.
    pub peer_id: String,
    /// The addresses it is connected on.
    pub addrs: Vec<String>,
    /// The contexts it shares with this node, sorted.
    pub contexts: Vec<String>,
    /// The namespaces it shares with this node, sorted.
    pub namespaces: Vec<String>,
}

/// `node_dial`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DialParams {
    /// The peer's multiaddr.
    pub addr: String,
}

/// `blob_put`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobPutParams {
    /// The bytes, base64.
    pub data: String,
}

/// `blob_put`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredBlob {
    /// The blob's id: the blake3 hash of its bytes.
    pub blob_id: String,
}

/// `blob_get`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobParams {
    /// The blob id.
    pub blob_id: String,
    /// Fetch the blob from connected peers if this node lacks it (false: only read it here).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fetch: bool,
    /// With `fetch`, the context to ask peers in (by default every context held here): a
    /// peer serves a blob only to members of a group one of whose contexts runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
}

/// `blob_get`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobData {
    /// The bytes, base64.
    pub data: String,
}

/// `app_install`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppInstallParams {
    /// Application name.
    pub name: String,
    /// Version string.
    pub version: String,
    /// The bytecode, base64.
    pub bytecode: String,
}

/// `app_install`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledApp {
    /// The application's id.
    pub application_id: String,
}

/// `app_list`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applications {
    /// A page of the installed applications, by id.
    pub applications: Vec<Application>,
    /// The cursor to pass as `start_after` for the next page (null on the last).
    #[serde(default)]
    pub next: Option<String>,
}

/// An installed application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Application {
    /// Its id.
    pub application_id: String,
    /// Its name.
    pub name: String,
    /// Its version string.
    pub version: String,
    /// Its size in bytes.
    pub size: u64,
    /// The blob holding its bytecode.
    pub bytecode_blob_id: String,
}
