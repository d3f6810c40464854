//! What peers say to each other: gossip payloads and the sync protocol's
//! requests and responses, Borsh-encoded in length-prefixed frames.
//!
//! Sync is request-response over `/weft/sync/1`:
//!
//! | request | response | use |
//! |---|---|---|
//! | `Status { context }` | `Status { heads, root_hash, delta_count }` | the in-sync check: one round trip, ~120 bytes |
//! | `Deltas { context, heads, max }` | `Deltas { deltas, more }` | catch-up: the deltas the asker lacks given its heads, in topological order, at most `max` (and [`MAX_FRAME`] bytes) per response |
//! | `NamespaceStatus { namespace }` | `NamespaceStatus { heads }` | the governance in-sync check: the namespace op log's heads |
//! | `Ops { namespace, heads, max }` | `Ops { ops, more }` | governance catch-up: the ops the asker lacks given its heads, in topological order, at most `max` (and [`MAX_FRAME`] bytes) per response |
//! | `RepairWalk { context, nodes }` | `RepairWalk { replies }` | repair, walking the Merkle tries: the asker's nodes at up to [`MAX_WALK_ITEMS`] paths; per path the responder answers `Same`, its nodes at the children that differ, or its leaves below (see [`crate::context::RepairWalk`]) |
//! | `RepairEntries { context, entries, keys }` | `RepairEntries { entries, answered }` | repair, exchanging the differing keys: the asker's entries (merged by the responder) and the keys it wants; the responder's entries for the first `answered` keys |
//! | `Snapshot { context, session, cursor }` | `Snapshot { session, header, page, next }` | fresh join: a snapshot of the state and the DAG served from one read view held for the session (session 0 opens one and the answer carries the [`SnapshotHeader`]); each page resumes from the cursor (see [`crate::context::SnapshotPage`]) |
//! | `GroupKey { group, key_id, requester }` | `GroupKey { envelope }` | key recovery: a member missing one of its group's keys asks a peer; the answer is the key sealed to the requester's identity (a [`weft_primitives::KeyEnvelope`]) if the requester is a member and the peer holds the key, else `None` (one answer for every refusal) |
//! | `NamespaceKey { namespace, key_id, requester }` | `GroupKey { envelope }` | the same for a namespace key, to a participant of the namespace |
//! | `Bind { identity, signature }` | `Bound` | admission: the asker proves it holds `identity`'s key by signing [`bind_challenge`] (both peers' ids), so the responder serves it what that identity is a member of (see `admission.rs`) |
//! | `Blob { context, blob, offset, max }` | `Blob { total, offset, data }` | blob fetch: at most `max` (and [`MAX_BLOB_CHUNK`]) bytes of a blob from `offset`, served only for a blob a context of the asked context's group runs (its application's bytecode, or its group's target application's) and only sealed under the group's key (see `blobs.rs`) |
//! | `Application { context, application }` | `Application { application }` | an application's record (ApplicationMeta, without its compiled artifact), served by the rules of `Blob` (the group's target application, or one a context of the group runs) and only sealed under the group's key; the asker checks the id against the name, version and bytecode id before storing it (see `apps.rs`) |
//!
//! Once a namespace has a key (a `NamespaceKeyRotated` op), its governance traffic travels
//! sealed under the current one: ops on the namespace's topic (`Gossip::NamespaceSealed`)
//! and the `NamespaceStatus` and `Ops` answers (`SyncResponse::NamespaceSealed`), with the kind
//! and the namespace bound as associated data ([`namespace_sealing_header`]). The requests (the
//! asker's heads) stay in the clear.
//!
//! For a context registered in a group that has a key (see
//! [`crate::governance::Governance::current_group_key`]), everything carrying its state
//! travels sealed under the group's current key — gossip deltas (`Gossip::Sealed`),
//! `Status`, `Deltas`, `Snapshot` and repair responses (`SyncResponse::Sealed`) and repair
//! requests (`SyncRequest::Sealed`) — with the kind and the context bound as associated
//! data ([`sealing_header`]); a `Blob` or `Application` answer travels only sealed (a context without a key
//! serves neither). The requests for status, deltas, snapshots and blob chunks (the asker's
//! heads, a cursor) stay in the clear: they go only to a peer bound to a member of what they
//! name, in the asker's fold (see `admission.rs`), so they name nothing a stranger learns.
//!
//! Either side answers `Unknown` for a context or namespace it does not hold, `Busy`
//! to a request it refuses unserved because the asker went past its per-peer bounds (see
//! the network docs), and `Refused` to a request about a context or namespace the asker is
//! not bound to a member of (see `admission.rs`); the asker tries again on a later
//! anti-entropy round (after binding).
//! Gossip payloads are one [`Gossip`] message without the length prefix: a delta
//! on a context's topic, an op on a namespace's topic. Topic names are derived from the log's
//! key so that only members can compute them (see [`super::topics`]); a sealed gossip message
//! names no context, namespace or group, since its topic tells members which log it is.
//!
//! Every message is bounded: a frame longer than [`MAX_FRAME`] is refused before it
//! is read, and a frame that does not decode is an error, never a panic.

use std::io;

use borsh::{BorshDeserialize, BorshSerialize};
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weft_primitives::{
    ApplicationId, ApplicationMeta, BlobId, ContextDagDeltaValue, ContextId, DeltaId, GroupId, Hash, KeyEnvelope,
    KeyId, NamespaceId, OpId, PublicKey, Sealed, Signature, SignedOp,
};

use crate::context::{RepairEntry, SnapshotCursor, SnapshotHeader, SnapshotPage, WalkNode, WalkReply};

/// The sync protocol's name.
pub const SYNC_PROTOCOL: &str = "/weft/sync/1";

/// Largest frame a peer may send (8 MiB); larger ones are refused unread.
pub const MAX_FRAME: usize = 8 << 20;

/// Most deltas one `Deltas` response carries.
pub const MAX_DELTAS_PER_RESPONSE: u32 = 2048;

/// Most governance ops one `Ops` response carries.
pub const MAX_OPS_PER_RESPONSE: u32 = 1024;

/// Most paths one `RepairWalk` request carries (more are answered `Later`).
pub const MAX_WALK_ITEMS: usize = 4096;

/// Most keys, and most entries, one `RepairEntries` request carries (more are ignored).
pub const MAX_REPAIR_KEYS: usize = 4096;

/// Most bytes of nodes, replies or entries in one repair request or response (well
/// under [`MAX_FRAME`]).
pub const REPAIR_BUDGET: usize = 4 << 20;

/// Most entries (or DAG nodes) one `Snapshot` response carries; its bytes stay under
/// [`REPAIR_BUDGET`] plus the header.
pub const MAX_SNAPSHOT_ITEMS: usize = 8192;

/// Most bytes of a blob one `Blob` response carries, whatever the asker's `max` (well under
/// [`MAX_FRAME`]).
pub const MAX_BLOB_CHUNK: u32 = 4 << 20;

/// A gossip message on a context's topic.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum Gossip {
    /// A delta its author has just applied (`applied` is false on the wire).
    Delta(ContextDagDeltaValue),
    /// A governance op just logged (on a namespace's topic).
    Op(SignedOp),
    /// A `Gossip::Delta` sealed under the key of the context's group (see [`sealing_header`]).
    /// It names neither the context nor the group: the receiver knows the context from the
    /// topic and the group from governance (see `topics.rs`), so a peer that is not a member
    /// learns no id from it.
    Sealed {
        /// The Borsh bytes of the `Gossip::Delta`, sealed.
        sealed: Sealed,
    },
    /// A `Gossip::Op` sealed under the namespace's current key (see
    /// [`namespace_sealing_header`]), on the namespace's topic; it does not name the
    /// namespace (the topic does, to members).
    NamespaceSealed {
        /// The Borsh bytes of the `Gossip::Op`, sealed.
        sealed: Sealed,
    },
}

/// What a sealed message is, bound into its AEAD's associated data with the context, so a
/// sealed message cannot be replayed as another kind or for another context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealedKind {
    /// A gossip delta.
    Gossip = 1,
    /// A sync request.
    Request = 2,
    /// A sync response.
    Response = 3,
}

/// The header a sealed message's AEAD binds: a domain tag, the kind and the context.
pub fn sealing_header(kind: SealedKind, context_id: &ContextId) -> Vec<u8> {
    let mut header = Vec::with_capacity(16 + 32);
    header.extend_from_slice(b"weft/wire/1");
    header.push(kind as u8);
    header.extend_from_slice(context_id.as_bytes());
    header
}

/// The header a message sealed under a namespace key binds: a domain tag, the kind
/// ([`SealedKind::Gossip`] for an op on the topic, [`SealedKind::Response`] for `Ops` and
/// `NamespaceStatus` answers) and the namespace. With the AAD's own binding of the key's group
/// ([`NamespaceId::key_group`]) and key id, a sealed op cannot be replayed as an answer, nor in
/// another namespace.
pub fn namespace_sealing_header(kind: SealedKind, namespace_id: &NamespaceId) -> Vec<u8> {
    let mut header = Vec::with_capacity(16 + 32);
    header.extend_from_slice(b"weft/ns/1");
    header.push(kind as u8);
    header.extend_from_slice(namespace_id.as_bytes());
    header
}

/// A sync request.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum SyncRequest {
    /// The responder's heads and root for a context.
    Status {
        /// The context.
        context_id: ContextId,
    },
    /// The applied deltas the asker lacks, given its heads.
    Deltas {
        /// The context.
        context_id: ContextId,
        /// The asker's heads, then ancestors of them at doubling distances (deltas it holds
        /// that the responder may know when it knows none of the heads; see
        /// [`weft_dag::marks`]).
        heads: Vec<DeltaId>,
        /// Most deltas wanted in this response (capped at [`MAX_DELTAS_PER_RESPONSE`]).
        max: u32,
    },
    /// The responder's heads of a namespace's op log.
    NamespaceStatus {
        /// The namespace.
        namespace_id: NamespaceId,
    },
    /// The logged ops the asker lacks, given its heads of the namespace's log.
    Ops {
        /// The namespace.
        namespace_id: NamespaceId,
        /// The asker's heads (empty if it holds none of the namespace), then ancestors of them
        /// at doubling distances, as for deltas (see [`weft_dag::marks`]).
        heads: Vec<OpId>,
        /// Most ops wanted in this response (capped at [`MAX_OPS_PER_RESPONSE`]).
        max: u32,
    },
    /// Repair walk: the asker's Merkle trie nodes at these paths, for the responder to
    /// compare with its own.
    RepairWalk {
        /// The context.
        context_id: ContextId,
        /// Paths (one nibble per byte) with the asker's node at each (`None`: it has none).
        nodes: Vec<(Vec<u8>, Option<WalkNode>)>,
    },
    /// Repair exchange: the asker's entries for keys where the states differ, to merge,
    /// and the keys whose entries it wants.
    RepairEntries {
        /// The context.
        context_id: ContextId,
        /// The asker's entries (its winning versions, tombstones included).
        entries: Vec<RepairEntry>,
        /// The keys whose entries the asker wants.
        keys: Vec<Vec<u8>>,
    },
    /// A page of a snapshot of the context (for a fresh join).
    Snapshot {
        /// The context.
        context_id: ContextId,
        /// The session the responder opened (0: open one, reading a new snapshot).
        session: u64,
        /// Where the page starts.
        cursor: SnapshotCursor,
    },
    /// A request about the context (`RepairWalk` or `RepairEntries`, which carry state),
    /// sealed under the key of its group.
    Sealed {
        /// The context.
        context_id: ContextId,
        /// The group whose key seals it.
        group_id: GroupId,
        /// The Borsh bytes of the request, sealed.
        sealed: Sealed,
    },
    /// One of a group's keys, for a member that lacks it (it was added after the rotation,
    /// or a message arrived sealed under a key it was never sent). The responder answers
    /// with the key sealed to `requester` if `requester` is a member, else nothing.
    GroupKey {
        /// The group.
        group_id: GroupId,
        /// The key wanted.
        key_id: KeyId,
        /// The member identity (in the group's namespace) to seal the key to.
        requester: PublicKey,
    },
    /// One of a namespace's keys, for a participant that lacks it (a joiner learns the id from
    /// the first sealed message it sees). Answered like `GroupKey`, with the entitlement
    /// "a participant of the namespace in the responder's fold".
    NamespaceKey {
        /// The namespace.
        namespace_id: NamespaceId,
        /// The key wanted.
        key_id: KeyId,
        /// The participant identity (in the namespace) to seal the key to.
        requester: PublicKey,
    },
    /// A chunk of a blob, asked in the context of a context the asker is a member of.
    Blob {
        /// The context whose group entitles the asker to the blob (its key seals the answer).
        context_id: ContextId,
        /// The blob (the blake3 hash of its bytes).
        blob_id: BlobId,
        /// Where the chunk starts.
        offset: u64,
        /// Most bytes wanted (capped at [`MAX_BLOB_CHUNK`]).
        max: u32,
    },
    /// Binds the asking peer to a member identity: the responder serves it what `identity`
    /// is a member (or participant) of. Answered `Bound`, or `Refused` if the signature does
    /// not check out.
    Bind {
        /// The identity (a member key in some namespace).
        identity: PublicKey,
        /// `identity`'s signature over [`bind_challenge`] of (asker, responder).
        signature: Signature,
    },
    /// The record (ApplicationMeta) of an application, asked in the context of a context
    /// the asker is a member of: served only for the group's target application or one a
    /// context of the group runs, and only sealed under the group's key (see `apps.rs`).
    Application {
        /// The context whose group entitles the asker to the record (its key seals the answer).
        context_id: ContextId,
        /// The application.
        application_id: ApplicationId,
    },
}

/// What a [`SyncRequest::Bind`] signs: a domain tag, the asking peer's id and the responding
/// peer's id (their multihash bytes, each after a `u32` LE length). The responder checks it
/// with the ids of the connection it arrived on, so a binding cannot be replayed by another
/// peer, nor to another node.
pub fn bind_challenge(asker: &libp2p::PeerId, responder: &libp2p::PeerId) -> Vec<u8> {
    let (asker, responder) = (asker.to_bytes(), responder.to_bytes());
    let mut challenge = Vec::with_capacity(16 + asker.len() + responder.len());
    challenge.extend_from_slice(b"weft/bind/1");
    for id in [&asker, &responder] {
        challenge.extend_from_slice(&(id.len() as u32).to_le_bytes());
        challenge.extend_from_slice(id);
    }
    challenge
}

/// A sync response.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum SyncResponse {
    /// The responder's heads and root.
    Status {
        /// Heads, sorted.
        heads: Vec<DeltaId>,
        /// Merkle root of the state at those heads.
        root_hash: Hash,
        /// Deltas applied there (a fresh node asks for a snapshot instead of the deltas when
        /// there are many).
        delta_count: u64,
    },
    /// Deltas in topological order.
    Deltas {
        /// The deltas (`applied` false).
        deltas: Vec<ContextDagDeltaValue>,
        /// More deltas remain: ask again with the new heads.
        more: bool,
    },
    /// The responder does not hold the context or namespace (or refuses to serve it).
    Unknown,
    /// The responder's heads of a namespace's op log.
    NamespaceStatus {
        /// Heads, sorted.
        heads: Vec<OpId>,
    },
    /// Governance ops in topological order.
    Ops {
        /// The ops.
        ops: Vec<SignedOp>,
        /// More ops remain: ask again with the new heads.
        more: bool,
    },
    /// The answers to a `RepairWalk`, one per path, in order.
    RepairWalk {
        /// The answers.
        replies: Vec<WalkReply>,
    },
    /// The responder's entries (after merging the asker's) for the first `answered` keys
    /// asked, where they differ from what the asker sent.
    RepairEntries {
        /// The entries.
        entries: Vec<RepairEntry>,
        /// How many of the keys asked were answered; ask again for the rest.
        answered: u32,
    },
    /// A page of a snapshot.
    Snapshot {
        /// The session to cite for the following pages.
        session: u64,
        /// What the snapshot claims (on the first page of a session only).
        header: Option<SnapshotHeader>,
        /// The page.
        page: SnapshotPage,
        /// Where the next page starts ([`SnapshotCursor::Done`] after the last).
        next: SnapshotCursor,
    },
    /// A response carrying a governed context's state (`Deltas`, `Snapshot`, `RepairWalk`,
    /// `RepairEntries`), sealed under the key of its group.
    Sealed {
        /// The group whose key seals it.
        group_id: GroupId,
        /// The Borsh bytes of the response, sealed.
        sealed: Sealed,
    },
    /// The responder refused the request unserved: the asker went past its per-peer bounds
    /// (request rate, or queue of inbound work; see `NetConfig::peer_queue_depth`). Ask
    /// again later; nothing about the context follows from it.
    Busy,
    /// The answer to `GroupKey`: the key sealed to the requester, or `None` (not a member,
    /// not the group's key, or not held by the responder: one answer for all three).
    GroupKey {
        /// The envelope.
        envelope: Option<KeyEnvelope>,
    },
    /// A `NamespaceStatus` or `Ops` answer sealed under the namespace's current key.
    NamespaceSealed {
        /// The Borsh bytes of the response, sealed.
        sealed: Sealed,
    },
    /// A chunk of a blob (travels only inside `Sealed`).
    Blob {
        /// The blob's whole size, in bytes.
        total: u64,
        /// Where the chunk starts (the offset asked).
        offset: u64,
        /// The chunk: empty only at the blob's end.
        data: Vec<u8>,
    },
    /// The responder refused the request: the asker is bound to no member of the context's
    /// group (or participant of the namespace) it asked about, or a `Bind` did not check out.
    /// Nothing about the context follows from it.
    Refused,
    /// The answer to a `Bind` that checked out: the identity is bound to the asking peer.
    Bound,
    /// An application's record (travels only inside `Sealed`), without a compiled artifact.
    Application {
        /// The record.
        application: ApplicationMeta,
    },
}

/// Encodes `msg` as one frame: a big-endian `u32` length, then the Borsh bytes.
pub fn encode<T: BorshSerialize>(msg: &T) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; 4];
    msg.serialize(&mut out)?;
    let len = out.len() - 4;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("message of {len} bytes exceeds the frame limit"),
        ));
    }
    out[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// Decodes one message from a frame's payload; trailing bytes are an error.
pub fn decode<T: BorshDeserialize>(payload: &[u8]) -> io::Result<T> {
    T::try_from_slice(payload).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads one frame's payload, refusing frames over [`MAX_FRAME`] before reading them.
pub async fn read_frame<T: AsyncRead + Unpin>(io: &mut T) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    io.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("frame of {len} bytes exceeds the limit")));
    }
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await?;
    Ok(payload)
}

/// Writes `msg` as one frame and closes the write side.
pub async fn write_frame<T: AsyncWrite + Unpin, M: BorshSerialize>(io: &mut T, msg: &M) -> io::Result<()> {
    io.write_all(&encode(msg)?).await?;
    io.close().await
}

/// The request-response codec of the sync protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncCodec;

impl libp2p::request_response::Codec for SyncCodec {
    type Protocol = libp2p::StreamProtocol;
    type Request = SyncRequest;
    type Response = SyncResponse;

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
    ) -> io::Result<SyncRequest> {
        decode(&read_frame(io).await?)
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
    ) -> io::Result<SyncResponse> {
        decode(&read_frame(io).await?)
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        req: SyncRequest,
    ) -> io::Result<()> {
        write_frame(io, &req).await
    }

    async fn write_response<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        res: SyncResponse,
    ) -> io::Result<()> {
        write_frame(io, &res).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn golden_status_request_and_response() {
        let req = SyncRequest::Status { context_id: ContextId::from_bytes([0xAA; 32]) };
        // u32 BE length 33 ‖ tag 0 ‖ context id
        assert_eq!(hex(&encode(&req).unwrap()), format!("00000021{}{}", "00", "aa".repeat(32)));
        let res = SyncResponse::Status {
            heads: vec![DeltaId::from_bytes([1; 32])],
            root_hash: Hash::from_bytes([2; 32]),
            delta_count: 5,
        };
        // length 77 ‖ tag 0 ‖ u32 LE 1 ‖ head ‖ root ‖ u64 LE 5
        assert_eq!(
            hex(&encode(&res).unwrap()),
            format!("0000004d00{}{}{}{}", "01000000", "01".repeat(32), "02".repeat(32), "0500000000000000")
        );
    }

    #[test]
    fn golden_deltas_request() {
        let req = SyncRequest::Deltas { context_id: ContextId::from_bytes([3; 32]), heads: vec![], max: 256 };
        // length 41 ‖ tag 1 ‖ context ‖ u32 LE 0 heads ‖ u32 LE 256
        assert_eq!(hex(&encode(&req).unwrap()), format!("0000002901{}0000000000010000", "03".repeat(32)));
        assert_eq!(hex(&encode(&SyncResponse::Unknown).unwrap()), "0000000102");
        assert_eq!(hex(&encode(&SyncResponse::Busy).unwrap()), "0000000109");
    }

    #[test]
    fn golden_group_key_request_and_response() {
        let req = SyncRequest::GroupKey {
            group_id: GroupId::from_bytes([0xA1; 32]),
            key_id: KeyId::from_bytes([0xA2; 32]),
            requester: PublicKey([0xA3; 32]),
        };
        // length 97 ‖ tag 8 ‖ group ‖ key id ‖ requester
        assert_eq!(
            hex(&encode(&req).unwrap()),
            format!("0000006108{}{}{}", "a1".repeat(32), "a2".repeat(32), "a3".repeat(32))
        );
        // length 2 ‖ tag 10 ‖ option none
        assert_eq!(hex(&encode(&SyncResponse::GroupKey { envelope: None }).unwrap()), "000000020a00");
        // length 274 ‖ tag 10 ‖ option some ‖ the envelope's own (pinned) 272 bytes
        let sender = weft_primitives::SecretKey::from_bytes(&[1; 32]);
        let recipient = weft_primitives::SecretKey::from_bytes(&[2; 32]).public_key();
        let key = weft_primitives::GroupKey::from_bytes([3; 32]);
        let envelope = KeyEnvelope::seal(&sender, &recipient, GroupId::from_bytes([4; 32]), &key).unwrap();
        let framed = encode(&SyncResponse::GroupKey { envelope: Some(envelope.clone()) }).unwrap();
        assert_eq!(hex(&framed[..6]), "000001120a01");
        assert_eq!(framed[6..], borsh::to_vec(&envelope).unwrap());
    }

    #[test]
    fn golden_namespace_sealed_messages() {
        let sealed = Sealed { key_id: KeyId::from_bytes([0x4b; 32]), nonce: [0x33; 24], ciphertext: vec![0xc1; 17] };
        let sealed_hex = format!("{}{}11000000{}", "4b".repeat(32), "33".repeat(24), "c1".repeat(17));
        // Gossip (no length prefix): tag 3 ‖ sealed (the topic names the namespace, to members).
        let gossip = Gossip::NamespaceSealed { sealed: sealed.clone() };
        let payload = encode(&gossip).unwrap().split_off(4);
        assert_eq!(hex(&payload), format!("03{sealed_hex}"));
        assert_eq!(decode::<Gossip>(&payload).unwrap(), gossip);
        // A sealed delta: tag 2 ‖ sealed (the topic names the context; governance its group).
        let gossip = Gossip::Sealed { sealed: sealed.clone() };
        let payload = encode(&gossip).unwrap().split_off(4);
        assert_eq!(hex(&payload), format!("02{sealed_hex}"));
        assert_eq!(decode::<Gossip>(&payload).unwrap(), gossip);
        // length 78 ‖ tag 11 ‖ sealed.
        let res = SyncResponse::NamespaceSealed { sealed };
        assert_eq!(hex(&encode(&res).unwrap()), format!("0000004e0b{sealed_hex}"));
        // length 97 ‖ tag 9 ‖ namespace ‖ key id ‖ requester.
        let req = SyncRequest::NamespaceKey {
            namespace_id: NamespaceId::from_bytes([0xA1; 32]),
            key_id: KeyId::from_bytes([0xA2; 32]),
            requester: PublicKey([0xA3; 32]),
        };
        assert_eq!(
            hex(&encode(&req).unwrap()),
            format!("0000006109{}{}{}", "a1".repeat(32), "a2".repeat(32), "a3".repeat(32))
        );
        // The header the AEAD binds: "weft/ns/1" ‖ kind ‖ namespace.
        assert_eq!(
            hex(&namespace_sealing_header(SealedKind::Response, &NamespaceId::from_bytes([7; 32]))),
            format!("{}03{}", hex(b"weft/ns/1"), "07".repeat(32))
        );
    }

    #[test]
    fn golden_namespace_status_request_and_response() {
        let req = SyncRequest::NamespaceStatus { namespace_id: NamespaceId::from_bytes([0xAB; 32]) };
        // length 33 ‖ tag 2 ‖ namespace id
        assert_eq!(hex(&encode(&req).unwrap()), format!("0000002102{}", "ab".repeat(32)));
        let res = SyncResponse::NamespaceStatus { heads: vec![OpId::from_bytes([4; 32]), OpId::from_bytes([5; 32])] };
        // length 69 ‖ tag 3 ‖ u32 LE 2 ‖ heads
        assert_eq!(
            hex(&encode(&res).unwrap()),
            format!("0000004503{}{}{}", "02000000", "04".repeat(32), "05".repeat(32))
        );
    }

    #[test]
    fn golden_ops_request_and_response() {
        let req = SyncRequest::Ops {
            namespace_id: NamespaceId::from_bytes([6; 32]),
            heads: vec![OpId::from_bytes([7; 32])],
            max: 1024,
        };
        // length 73 ‖ tag 3 ‖ namespace ‖ u32 LE 1 head ‖ head ‖ u32 LE 1024
        assert_eq!(
            hex(&encode(&req).unwrap()),
            format!("0000004903{}01000000{}00040000", "06".repeat(32), "07".repeat(32))
        );
        let empty = SyncResponse::Ops { ops: vec![], more: false };
        // length 6 ‖ tag 4 ‖ u32 LE 0 ops ‖ more false
        assert_eq!(hex(&encode(&empty).unwrap()), "00000006040000000000");
        // With an op: tag 4 ‖ u32 LE 1 ‖ the op's own Borsh bytes ‖ more true.
        let op = golden_op();
        let op_bytes = borsh::to_vec(&op).unwrap();
        let frame = encode(&SyncResponse::Ops { ops: vec![op.clone()], more: true }).unwrap();
        let mut expected = ((1 + 4 + op_bytes.len() + 1) as u32).to_be_bytes().to_vec();
        expected.extend([4, 1, 0, 0, 0]);
        expected.extend(&op_bytes);
        expected.push(1);
        assert_eq!(hex(&frame), hex(&expected));
        assert_eq!(decode::<SyncResponse>(&frame[4..]).unwrap(), SyncResponse::Ops { ops: vec![op], more: true });
    }

    /// A fixed, signed op (deterministic: Ed25519 signatures are).
    fn golden_op() -> SignedOp {
        use weft_primitives::{HybridTimestamp, OpBody, OpContent, PublicKey, Role, SecretKey};
        let secret = SecretKey::from_bytes(&[9; 32]);
        let namespace_id = NamespaceId::from_bytes([8; 32]);
        let content = OpContent {
            namespace_id,
            group_id: namespace_id.root_group(),
            parents: vec![OpId::from_bytes([1; 32])],
            signer: secret.public_key(),
            nonce: 2,
            hlc: HybridTimestamp { physical_ms: 1_700_000_000_000, logical: 3 },
            body: OpBody::MemberAdded { identity: PublicKey::from_bytes([0x22; 32]), role: Role::Member },
        };
        SignedOp::sign(content, &secret)
    }

    #[test]
    fn golden_gossip() {
        let op = golden_op();
        // An op on a namespace topic: tag 1 ‖ the op's Borsh bytes (no length prefix on gossip).
        let payload = encode(&Gossip::Op(op.clone())).unwrap().split_off(4);
        assert_eq!(payload[0], 1);
        assert_eq!(&payload[1..], borsh::to_vec(&op).unwrap().as_slice());
        assert_eq!(decode::<Gossip>(&payload).unwrap(), Gossip::Op(op.clone()));
        // The op's own encoding, pinned: id ‖ content ‖ signature.
        let bytes = borsh::to_vec(&op).unwrap();
        assert_eq!(&bytes[..32], op.op_id.as_bytes());
        assert_eq!(bytes.len(), 32 + borsh::to_vec(&op.content).unwrap().len() + 64);
        let body = format!("10{}01", "22".repeat(32));
        let expected = format!(
            "{ns}{ns}01000000{parent}{signer}0200000000000000{hlc}{body}",
            ns = "08".repeat(32),
            parent = "01".repeat(32),
            signer = hex(op.content.signer.as_bytes()),
            hlc = "0068e5cf8b01000003000000",
        );
        assert_eq!(hex(&borsh::to_vec(&op.content).unwrap()), expected);
        // The whole gossip payload, pinned (Ed25519 signatures are deterministic).
        let signer = "fd1724385aa0c75b64fb78cd602fa1d991fdebf76b13c58ed702eac835e9f618";
        let id = "f332e22813f1750ae218e7b9f7514eddb0b9eb1f893d85eacca109ba7bd63041";
        let signature = "758653393e0196f2abfa8f050791eb55ec452df6cd47b95ab04e8fc195540236\
                         d44ffccc334374c8732ceab93ef860173e1d1b1579cb3f50ef588f8c7099bd09";
        assert_eq!(hex(op.content.signer.as_bytes()), signer);
        assert_eq!(hex(&payload), format!("01{id}{expected}{signature}"));
    }

    #[test]
    fn golden_repair_walk_request_and_response() {
        let req = SyncRequest::RepairWalk {
            context_id: ContextId::from_bytes([0x11; 32]),
            nodes: vec![
                (vec![], Some(WalkNode::Branch(vec![(3, [0x22; 16])]))),
                (vec![1, 2], Some(WalkNode::Leaf { key: b"k".to_vec(), value_hash: Hash::from_bytes([0x33; 32]) })),
                (vec![4], None),
            ],
        };
        // length 115 ‖ tag 4 ‖ context ‖ u32 LE 3 items ‖
        // (path [] ‖ Some ‖ Branch ‖ u32 LE 1 ‖ nibble 3 ‖ 16-byte prefix) ‖
        // (path [1, 2] ‖ Some ‖ Leaf ‖ key "k" ‖ value hash) ‖ (path [4] ‖ None)
        assert_eq!(
            hex(&encode(&req).unwrap()),
            [
                "0000007304".to_string(),
                "11".repeat(32),
                "03000000".into(),
                "0000000001000100000003".into(),
                "22".repeat(16),
                "0200000001020101010000006b".into(),
                "33".repeat(32),
                "010000000400".into(),
            ]
            .concat()
        );
        assert_eq!(decode::<SyncRequest>(&encode(&req).unwrap()[4..]).unwrap(), req);
        let res = SyncResponse::RepairWalk {
            replies: vec![
                WalkReply::Same,
                WalkReply::Children(vec![
                    (5, None),
                    (6, Some(WalkNode::Leaf { key: b"a".to_vec(), value_hash: Hash::from_bytes([0x44; 32]) })),
                    (7, Some(WalkNode::Leaves(vec![(b"c".to_vec(), Hash::from_bytes([0x66; 32]))]))),
                ]),
                WalkReply::Leaves(vec![(b"b".to_vec(), Hash::from_bytes([0x55; 32]))]),
                WalkReply::Later,
            ],
        };
        // length 140 ‖ tag 5 ‖ u32 LE 4 replies ‖ Same ‖
        // Children (u32 LE 3 ‖ 5 None ‖ 6 Some Leaf "a" hash ‖ 7 Some Leaves (u32 LE 1 ‖ "c" hash)) ‖
        // Leaves (u32 LE 1 ‖ "b" hash) ‖ Later
        assert_eq!(
            hex(&encode(&res).unwrap()),
            [
                "0000008c050400000000".to_string(),
                "010300000005000601010100000061".into(),
                "44".repeat(32),
                "070102010000000100000063".into(),
                "66".repeat(32),
                "02010000000100000062".into(),
                "55".repeat(32),
                "03".into(),
            ]
            .concat()
        );
        assert_eq!(decode::<SyncResponse>(&encode(&res).unwrap()[4..]).unwrap(), res);
    }

    #[test]
    fn golden_repair_entries_request_and_response() {
        use weft_primitives::{HybridTimestamp, KeyVersion, PublicKey};
        let version = KeyVersion {
            hlc: HybridTimestamp { physical_ms: 1, logical: 2 },
            author: PublicKey::from_bytes([0x66; 32]),
            delta_id: DeltaId::from_bytes([0x77; 32]),
            deleted: false,
        };
        let req = SyncRequest::RepairEntries {
            context_id: ContextId::from_bytes([0x12; 32]),
            entries: vec![RepairEntry { key: b"k".to_vec(), value: Some(b"v".to_vec()), version }],
            keys: vec![b"k".to_vec(), b"z".to_vec()],
        };
        let version_hex =
            |deleted: &str| format!("0100000000000000{}{}{}{deleted}", "02000000", "66".repeat(32), "77".repeat(32));
        // length 139 ‖ tag 5 ‖ context ‖ u32 LE 1 entry ‖ (key "k" ‖ Some "v" ‖ version) ‖
        // u32 LE 2 keys ‖ "k" ‖ "z"
        assert_eq!(
            hex(&encode(&req).unwrap()),
            format!(
                "0000008b05{}01000000{}{}{}",
                "12".repeat(32),
                "010000006b010100000076",
                version_hex("00"),
                "02000000010000006b010000007a",
            )
        );
        assert_eq!(decode::<SyncRequest>(&encode(&req).unwrap()[4..]).unwrap(), req);
        let res = SyncResponse::RepairEntries {
            entries: vec![RepairEntry {
                key: b"z".to_vec(),
                value: None,
                version: KeyVersion { deleted: true, ..version },
            }],
            answered: 2,
        };
        // length 92 ‖ tag 6 ‖ u32 LE 1 entry ‖ (key "z" ‖ None ‖ tombstone version) ‖ u32 LE 2 answered
        assert_eq!(
            hex(&encode(&res).unwrap()),
            format!("0000005c0601000000{}{}{}", "010000007a00", version_hex("01"), "02000000")
        );
        assert_eq!(decode::<SyncResponse>(&encode(&res).unwrap()[4..]).unwrap(), res);
    }

    #[test]
    fn golden_snapshot_request_and_response() {
        use weft_primitives::DagNodeValue;
        let req = SyncRequest::Snapshot {
            context_id: ContextId::from_bytes([0x21; 32]),
            session: 9,
            cursor: SnapshotCursor::AfterKey(b"ab".to_vec()),
        };
        // length 48 ‖ tag 6 ‖ context ‖ u64 LE 9 ‖ cursor tag 1 (AfterKey) ‖ u32 LE 2 ‖ "ab"
        assert_eq!(
            hex(&encode(&req).unwrap()),
            format!("0000003006{}0900000000000000010200000061 62", "21".repeat(32)).replace(' ', "")
        );
        assert_eq!(decode::<SyncRequest>(&encode(&req).unwrap()[4..]).unwrap(), req);
        let res = SyncResponse::Snapshot {
            session: 9,
            header: None,
            page: SnapshotPage {
                entries: vec![],
                dag: vec![(
                    DeltaId::from_bytes([0x31; 32]),
                    DagNodeValue { parents: vec![DeltaId::from_bytes([0x32; 32])], height: 1 },
                )],
            },
            next: SnapshotCursor::Done,
        };
        // length 95 ‖ tag 7 ‖ u64 LE 9 ‖ None ‖ u32 LE 0 entries ‖ u32 LE 1 node ‖ id ‖
        // u32 LE 1 parent ‖ parent ‖ u64 LE 1 height ‖ cursor tag 4 (Done)
        assert_eq!(
            hex(&encode(&res).unwrap()),
            format!(
                "0000005f07{}{}{}{}{}01000000{}{}04",
                "0900000000000000",
                "00",
                "00000000",
                "01000000",
                "31".repeat(32),
                "32".repeat(32),
                "0100000000000000"
            )
        );
        assert_eq!(decode::<SyncResponse>(&encode(&res).unwrap()[4..]).unwrap(), res);
    }

    #[test]
    fn golden_blob_request_and_response() {
        let req = SyncRequest::Blob {
            context_id: ContextId::from_bytes([0xB1; 32]),
            blob_id: BlobId::from_bytes([0xB2; 32]),
            offset: 0x0102,
            max: 0x4_0000,
        };
        // length 77 ‖ tag 10 ‖ context ‖ blob ‖ u64 LE offset ‖ u32 LE max
        assert_eq!(
            hex(&encode(&req).unwrap()),
            format!("0000004d0a{}{}{}{}", "b1".repeat(32), "b2".repeat(32), "0201000000000000", "00000400")
        );
        assert_eq!(decode::<SyncRequest>(&encode(&req).unwrap()[4..]).unwrap(), req);
        let res = SyncResponse::Blob { total: 5, offset: 2, data: b"abc".to_vec() };
        // length 24 ‖ tag 12 ‖ u64 LE total ‖ u64 LE offset ‖ u32 LE 3 ‖ "abc"
        assert_eq!(
            hex(&encode(&res).unwrap()),
            format!("000000180c{}{}03000000616263", "0500000000000000", "0200000000000000")
        );
        assert_eq!(decode::<SyncResponse>(&encode(&res).unwrap()[4..]).unwrap(), res);
    }

    #[test]
    fn golden_application_request_and_response() {
        let req = SyncRequest::Application {
            context_id: ContextId::from_bytes([0xA1; 32]),
            application_id: ApplicationId::from_bytes([0xA2; 32]),
        };
        // length 65 ‖ tag 12 ‖ context ‖ application
        assert_eq!(hex(&encode(&req).unwrap()), format!("000000410c{}{}", "a1".repeat(32), "a2".repeat(32)));
        assert_eq!(decode::<SyncRequest>(&encode(&req).unwrap()[4..]).unwrap(), req);
        let application = ApplicationMeta {
            application_id: ApplicationId::from_bytes([0xA3; 32]),
            name: "c".into(),
            version: "2".into(),
            bytecode: weft_primitives::BlobMeta {
                blob_id: BlobId::from_bytes([0xB4; 32]),
                size: 5,
                hash: Hash::from_bytes([0xB4; 32]),
            },
            size: 5,
            ..ApplicationMeta::default()
        };
        let res = SyncResponse::Application { application };
        // length 207 ‖ tag 15 ‖ id ‖ name "c" ‖ version "2" ‖ bytecode (blob, u64 LE 5, hash) ‖
        // compiled (zeros) ‖ u64 LE size 5 ‖ empty source ‖ no metadata ‖ no services
        assert_eq!(
            hex(&encode(&res).unwrap()),
            format!(
                "000000cf0f{}{}{}{}{}{}{}{}{}",
                "a3".repeat(32),
                "0100000063",
                "0100000032",
                "b4".repeat(32),
                "0500000000000000",
                "b4".repeat(32),
                "00".repeat(72),
                "0500000000000000",
                "00000000".repeat(3)
            )
        );
        assert_eq!(decode::<SyncResponse>(&encode(&res).unwrap()[4..]).unwrap(), res);
    }

    #[test]
    fn golden_bind_request_and_answers() {
        let secret = weft_primitives::SecretKey::from_bytes(&[5; 32]);
        let asker = libp2p::identity::Keypair::ed25519_from_bytes([6; 32]).unwrap().public().to_peer_id();
        let responder = libp2p::identity::Keypair::ed25519_from_bytes([7; 32]).unwrap().public().to_peer_id();
        let challenge = bind_challenge(&asker, &responder);
        // "weft/bind/1" ‖ u32 LE 38 ‖ asker's id (38 bytes) ‖ u32 LE 38 ‖ responder's id.
        assert_eq!(
            hex(&challenge),
            format!("{}26000000{}26000000{}", hex(b"weft/bind/1"), hex(&asker.to_bytes()), hex(&responder.to_bytes()))
        );
        assert_ne!(challenge, bind_challenge(&responder, &asker));
        let req = SyncRequest::Bind { identity: secret.public_key(), signature: secret.sign(&challenge) };
        let SyncRequest::Bind { identity, signature } = &req else { unreachable!() };
        // length 97 ‖ tag 11 ‖ identity ‖ signature
        assert_eq!(
            hex(&encode(&req).unwrap()),
            format!("000000610b{}{}", hex(identity.as_bytes()), hex(signature.as_bytes()))
        );
        assert_eq!(decode::<SyncRequest>(&encode(&req).unwrap()[4..]).unwrap(), req);
        // length 1 ‖ tag 13; length 1 ‖ tag 14
        assert_eq!(hex(&encode(&SyncResponse::Refused).unwrap()), "000000010d");
        assert_eq!(hex(&encode(&SyncResponse::Bound).unwrap()), "000000010e");
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        futures::executor::block_on(async {
            let mut huge: &[u8] = &((MAX_FRAME as u32) + 1).to_be_bytes();
            assert_eq!(read_frame(&mut huge).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
            let mut short: &[u8] = &[0, 0, 0, 9, 1, 2];
            assert!(read_frame(&mut short).await.is_err());
        });
        assert!(decode::<SyncRequest>(&[7, 1, 2, 3]).is_err());
        assert!(decode::<SyncRequest>(&[]).is_err());
        // Trailing bytes after a valid message are refused too.
        let mut ok = encode(&SyncResponse::Unknown).unwrap().split_off(4);
        ok.push(0);
        assert!(decode::<SyncResponse>(&ok).is_err());
    }
}
