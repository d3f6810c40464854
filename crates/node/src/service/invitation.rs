//! Invitations: how a member hands another node what it needs to join a context, and the
//! join itself.
//!
//! `context_invite` first makes the invitee a member of the context's group with a
//! governance op (`MemberAdded`, signed by the inviter's key in the namespace and published
//! on the namespace's topic), so membership is decided by governance like every other
//! change; the invitation only tells the invitee where to find it. It is a signed Borsh
//! [`Invitation`], written as unpadded URL-safe base64 (layout in `docs/invitations.md`):
//! the context, its group, namespace and application, the inviter's identity, peer id and
//! addresses, the invitee, its role, the member op, an expiry and the group signing key —
//! signed by that key under the domain [`INVITATION_DOMAIN`].
//!
//! **Group signing keys.** Invitations are signed with a signing key of the group, not with
//! the inviter's own key: the inviter's node creates one the first time it invites to the
//! group (its secret stays on that node, 0x25, left out of backups without
//! `--include-secrets`) and registers its public key with a `SigningKeySet` governance op,
//! which the member op descends from. Only the node of a member holding `INVITE_MEMBERS` (every
//! admin does) can therefore issue invitations; the key counts while its registrar holds that
//! capability, so demoting or removing an admin, or taking the capability from a member, voids
//! its outstanding invitations.
//!
//! `context_join` checks the invitation (the signature under the key it carries, the
//! invitee, the expiry) before it touches the network, then records its node key as its
//! identity in the namespace (it asks peers for the namespace's and the group's keys under
//! it), joins the namespace's topic naming the inviter's identity (until this node is a
//! participant, the namespace is named in sync requests only to peers bound to it), dials the
//! inviter, waits until the namespace's ops it
//! received make this node a member that reads the group's private state whole and holds
//! its current key (key recovery brings the keys of older sealed ops),
//! then checks that the invitation's key is a signing key registered for the group
//! ([`InvitationError::UnregisteredSigningKey`] otherwise), and only then creates the
//! context, records the join with a `ContextJoined` op, joins the context's topic and syncs.
//! An invitation whose member op never arrives is unknown; nothing of the context is
//! created. Invitations stay bound to the invitee's key (which is what makes them safe to
//! reuse: only the invitee can join with one, and only while governance keeps it a member).
//!
//! `context_leave` signs `MemberLeft` (unless this node is no longer a member), marks the
//! context left in the store ([`ContextLeft`]) and has the network stop replicating it: no
//! gossip, anti-entropy, catch-up or repair for it from then on, nor after a restart (the
//! network does not join a context marked left). The local copy is kept and stays readable.
//! Joining it again by a new invitation clears the mark. A single-owner context (no group)
//! cannot be left: there is no membership to give up and nobody it syncs with.

use std::time::Duration;

use base64::Engine as _;
use borsh::{BorshDeserialize, BorshSerialize};
use libp2p::Multiaddr;
use weft_primitives::{
    signing_key_id, ApplicationMeta, Capabilities, ContextId, GroupId, KeyId, NamespaceId, OpBody, OpId, PublicKey,
    Role, SecretKey, Signature,
};
use weft_store::schema::{ContextLeft, ContextMeta};
use weft_store::{Backend, Read};

use super::network::{poll_until, wait};
use super::{NodeService, ServiceError};

/// Domain tag of the message a group signing key signs: `INVITATION_DOMAIN ‖ borsh(version, body)`.
pub const INVITATION_DOMAIN: &[u8] = b"weft invitation v1";
/// The invitation format's version (2: signed by a group signing key).
pub const INVITATION_VERSION: u8 = 2;
/// Largest invitation accepted, in bytes of its Borsh encoding.
pub const MAX_INVITATION_BYTES: usize = 16 << 10;
/// Most inviter addresses an invitation carries.
pub const MAX_INVITATION_ADDRS: usize = 16;
/// Validity of an invitation when `expires_in_s` is not given: one day.
pub const DEFAULT_EXPIRY_S: u64 = 24 * 3600;
/// Longest validity an invitation may be given: thirty days.
pub const MAX_EXPIRY_S: u64 = 30 * 24 * 3600;
/// How long `context_join` waits by default for the inviter's governance ops to make this node
/// a member (`sync.join_timeout_ms`).
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `context_join` waits for the first catch-up before it returns anyway.
pub const SYNC_WAIT: Duration = Duration::from_secs(10);

/// What an invitation says, and its inviter signs.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct InvitationBody {
    /// The context to join.
    pub context_id: ContextId,
    /// The group it is registered in.
    pub group_id: GroupId,
    /// The group's namespace.
    pub namespace_id: NamespaceId,
    /// The application the context runs (what the invitee creates the context with).
    pub application: ApplicationMeta,
    /// The inviter's identity in the namespace (a holder of `INVITE_MEMBERS` in the group).
    pub inviter: PublicKey,
    /// The inviter node's libp2p peer id (its bytes).
    pub inviter_peer_id: Vec<u8>,
    /// Multiaddrs the inviter node listens on, each ending in `/p2p/<peer id>`.
    pub inviter_addrs: Vec<String>,
    /// The identity the invitation is for (the invitee's `node_info.identity`).
    pub invitee: PublicKey,
    /// The role the invitee was given.
    pub role: Role,
    /// The governance op that made the invitee a member (`None` if it already was one).
    pub member_op: Option<OpId>,
    /// When the invitation was issued, ms since the Unix epoch.
    pub issued_at_ms: u64,
    /// After this (ms since the Unix epoch) the invitation is refused.
    pub expires_at_ms: u64,
    /// The id of the group signing key that signs the invitation (`signing_key_id` of
    /// `signing_key`).
    pub signing_key_id: KeyId,
    /// The group signing key's public key.
    pub signing_key: PublicKey,
}

/// A signed invitation.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct Invitation {
    /// [`INVITATION_VERSION`].
    pub version: u8,
    /// What it says.
    pub body: InvitationBody,
    /// The group signing key's signature over [`Invitation::signing_message`].
    pub signature: Signature,
}

/// Why an invitation cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvitationError {
    /// It is not an invitation: not base64, not the format, another version, too large, or
    /// its signature is not the signing key's it names.
    #[error("invalid invitation: {0}")]
    Malformed(String),
    /// It has expired.
    #[error("the invitation expired at {expired_at_ms} ms since the epoch (now {now_ms})")]
    Expired {
        /// Its expiry.
        expired_at_ms: u64,
        /// This node's clock.
        now_ms: u64,
    },
    /// It is for another identity.
    #[error("the invitation is for {invitee}, not this node ({identity})")]
    WrongInvitee {
        /// Who it is for.
        invitee: PublicKey,
        /// This node's identity.
        identity: PublicKey,
    },
    /// The key that signed it is not a signing key registered for the group (in the
    /// namespace's governance as this node received it), or no longer counts (its admin
    /// was demoted or removed).
    #[error("the invitation is signed by key {key_id}, which is not a signing key of group {group_id}")]
    UnregisteredSigningKey {
        /// The invitation's signing key id.
        key_id: KeyId,
        /// The group.
        group_id: GroupId,
    },
    /// The inviter's namespace does not make this node a member: the invitation was never
    /// issued there, or its member op was overruled or revoked.
    #[error("unknown invitation: {0}")]
    Unknown(String),
}

impl Invitation {
    /// Signs `body` with a group signing key (setting `body.signing_key` and
    /// `body.signing_key_id` to its public key and id).
    pub fn sign(mut body: InvitationBody, signing_key: &SecretKey) -> Invitation {
        body.signing_key = signing_key.public_key();
        body.signing_key_id = signing_key_id(&body.signing_key);
        let signature = signing_key.sign(&Self::signing_message(INVITATION_VERSION, &body));
        Invitation { version: INVITATION_VERSION, body, signature }
    }

    /// `INVITATION_DOMAIN ‖ borsh(version, body)`.
    pub fn signing_message(version: u8, body: &InvitationBody) -> Vec<u8> {
        let mut msg = INVITATION_DOMAIN.to_vec();
        // Serializing into a Vec cannot fail.
        let _ = (version, body).serialize(&mut msg);
        msg
    }

    /// The text form: unpadded URL-safe base64 of the Borsh encoding.
    pub fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(borsh::to_vec(self).unwrap_or_default())
    }

    /// Parses the text form and checks the version, the size, and the signature under the
    /// signing key it carries (whether that key is the group's is checked on joining).
    pub fn decode(text: &str) -> Result<Invitation, InvitationError> {
        let malformed = |m: String| InvitationError::Malformed(m);
        let text = text.trim();
        if text.len() > MAX_INVITATION_BYTES * 4 / 3 + 4 {
            return Err(malformed(format!("longer than {MAX_INVITATION_BYTES} bytes")));
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|e| malformed(format!("not unpadded URL-safe base64: {e}")))?;
        match bytes.first() {
            Some(&INVITATION_VERSION) => {}
            Some(v) => return Err(malformed(format!("version {v}, this node reads version {INVITATION_VERSION}"))),
            None => return Err(malformed("empty".into())),
        }
        let invitation: Invitation =
            borsh::from_slice(&bytes).map_err(|e| malformed(format!("does not decode: {e}")))?;
        if invitation.body.inviter_addrs.len() > MAX_INVITATION_ADDRS {
            return Err(malformed(format!("more than {MAX_INVITATION_ADDRS} addresses")));
        }
        if invitation.body.signing_key_id != signing_key_id(&invitation.body.signing_key) {
            return Err(malformed("its signing key id does not match its signing key".into()));
        }
        invitation
            .body
            .signing_key
            .verify(&Self::signing_message(invitation.version, &invitation.body), &invitation.signature)
            .map_err(|e| malformed(format!("not signed by its signing key: {e}")))?;
        Ok(invitation)
    }

    /// Whether `identity` may use it at `now_ms`.
    pub fn check_for(&self, identity: &PublicKey, now_ms: u64) -> Result<(), InvitationError> {
        if self.body.invitee != *identity {
            return Err(InvitationError::WrongInvitee { invitee: self.body.invitee, identity: *identity });
        }
        if now_ms > self.body.expires_at_ms {
            return Err(InvitationError::Expired { expired_at_ms: self.body.expires_at_ms, now_ms });
        }
        Ok(())
    }

    /// The inviter's addresses that parse as multiaddrs.
    pub fn addrs(&self) -> Vec<Multiaddr> {
        self.body.inviter_addrs.iter().filter_map(|a| a.parse().ok()).collect()
    }
}

/// What `context_join` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinOutcome {
    /// The context joined.
    pub context_id: ContextId,
    /// This node's identity in it (its node identity).
    pub identity: PublicKey,
    /// Whether a peer reported the same heads and root before the join returned (otherwise
    /// catch-up goes on in the background).
    pub synced: bool,
    /// Bytes of the application's bytecode fetched from peers by this join (0 when it was
    /// held already).
    pub fetched_bytes: u64,
}

impl<B: Backend> NodeService<B> {
    /// Makes `invitee` a member of the context's group with `role` (a governance op, unless
    /// it is one already) and returns an invitation for it, valid for `expires_in_s` seconds,
    /// signed with this node's signing key of the group (created and registered first if it
    /// has none; this node must hold `INVITE_MEMBERS` in the group, as every admin does).
    pub fn context_invite(
        &self,
        context_id: &ContextId,
        invitee: PublicKey,
        role: Role,
        expires_in_s: Option<u64>,
    ) -> Result<Invitation, ServiceError> {
        let expires_in_s = expires_in_s.unwrap_or(DEFAULT_EXPIRY_S);
        if expires_in_s == 0 || expires_in_s > MAX_EXPIRY_S {
            return Err(ServiceError::BadInput(format!("expires_in_s: must be between 1 and {MAX_EXPIRY_S}")));
        }
        let application = self
            .store()
            .get(&ContextMeta { context_id: *context_id })?
            .ok_or_else(|| ServiceError::NotFound { what: "context", id: context_id.to_hex() })?
            .application;
        let (namespace_id, group_id) = self.governed(context_id)?.ok_or_else(|| {
            ServiceError::Forbidden(format!(
                "context {context_id} is single-owner (it was created before governance): it cannot be shared"
            ))
        })?;
        let key = self.member_key(&namespace_id)?;
        // Checked before anything is signed: only an admin makes an admin.
        if role == Role::Admin && self.governance.role(&group_id, &key.public_key())? != Some(Role::Admin) {
            return Err(ServiceError::Forbidden(format!(
                "{} is not an admin: only admins invite admins",
                key.public_key()
            )));
        }
        let signing_key = self.group_signing_key(namespace_id, group_id, &key)?;
        let member_op = match self.governance.role(&group_id, &invitee)? {
            Some(_) => None,
            None => Some(self.act(group_id, OpBody::MemberAdded { identity: invitee, role })?),
        };
        let now_ms = weft_primitives::wall_clock_ms();
        let mut addrs: Vec<String> = self.dial_addrs()?.iter().map(ToString::to_string).collect();
        addrs.truncate(MAX_INVITATION_ADDRS);
        let body = InvitationBody {
            context_id: *context_id,
            group_id,
            namespace_id,
            application,
            inviter: key.public_key(),
            inviter_peer_id: self.peer_id.to_bytes(),
            inviter_addrs: addrs,
            invitee,
            role,
            member_op,
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(expires_in_s.saturating_mul(1000)),
            signing_key_id: KeyId::default(),
            signing_key: PublicKey::default(),
        };
        Ok(Invitation::sign(body, &signing_key))
    }

    /// This node's signing key of a group that counts in governance, created and registered
    /// (a `SigningKeySet` op, published) if it has none. Only a holder of `INVITE_MEMBERS` may
    /// register one; anyone else gets [`ServiceError::Forbidden`] and nothing changes.
    fn group_signing_key(
        &self,
        namespace_id: NamespaceId,
        group_id: GroupId,
        member: &SecretKey,
    ) -> Result<SecretKey, ServiceError> {
        if let Some((_, secret)) = self.governance.signing_key(&group_id)? {
            return Ok(secret);
        }
        let may_invite = self
            .governance
            .capabilities(&group_id, &member.public_key())?
            .is_some_and(|c| c.contains(Capabilities::INVITE_MEMBERS));
        if !may_invite {
            return Err(ServiceError::Forbidden(format!(
                "{} lacks INVITE_MEMBERS (0x2) in group {group_id}: ask a member holding it (every admin does) \
                 to invite",
                member.public_key()
            )));
        }
        let (key_id, op) = self.governance.create_signing_key(&group_id, member)?;
        tracing::info!(%group_id, %key_id, "registered a group signing key");
        self.publish_ops(namespace_id, &[op]);
        self.governance.signing_key(&group_id)?.map(|(_, secret)| secret).ok_or_else(|| {
            ServiceError::Internal(format!("the signing key registered for {group_id} is not held").into())
        })
    }

    /// Joins a context by invitation: checks it, dials the inviter, joins the namespace's
    /// topic, waits until governance makes this node a member, then creates the context,
    /// joins its topic and catches up (waiting up to [`SYNC_WAIT`] for a peer in sync), and
    /// fetches the application's bytecode from peers if this node lacks it (a join that
    /// cannot fetch it fails; calling it again resumes the fetch).
    pub fn context_join(&self, text: &str) -> Result<JoinOutcome, ServiceError> {
        let invitation = Invitation::decode(text)?;
        invitation.check_for(&self.identity, weft_primitives::wall_clock_ms())?;
        let body = &invitation.body;
        let network = self.require_network()?;
        let (context_id, group_id, namespace_id) = (body.context_id, body.group_id, body.namespace_id);

        // This node's identity in the namespace (its node key, the invitee) first: it asks peers
        // for the namespace's key, and the group's keys, under it.
        self.adopt_namespace(&namespace_id)?;
        // Until this node holds the ops that make it a participant, the namespace is named only
        // to peers bound to the inviter's identity (see `net/admission.rs`).
        wait(network.join_namespace_invited(namespace_id, body.inviter)).map_err(super::network::net_error)?;
        let addrs = invitation.addrs();
        for addr in &addrs {
            if let Err(e) = wait(network.dial(addr.clone())) {
                tracing::debug!(%addr, error = %e, "cannot dial the inviter at this address");
            }
        }
        // Ask again every few polls: the inviter may have connected after the first ask.
        let mut polls = 0u32;
        // A member, reading the group's private state whole (the signing key's registration is
        // sealed under an older group key, which key recovery brings) and holding its current key.
        let mut is_member = || {
            let member = matches!(self.governance.role(&group_id, &self.identity), Ok(Some(_)));
            let readable = matches!(self.governance.group_held(&group_id), Ok(false));
            let keyed = match self.governance.current_key_id(&group_id) {
                Ok(Some(key_id)) => matches!(self.governance.group_key(&group_id, &key_id), Ok(Some(_))),
                Ok(None) => true,
                Err(_) => false,
            };
            if member && readable && keyed {
                return Some(());
            }
            polls += 1;
            if polls.is_multiple_of(20) {
                let _ = wait(network.sync_namespace_now(namespace_id));
            }
            None
        };
        if poll_until(self.join_timeout, &mut is_member).is_none() {
            let connected = wait(network.peers()).map(|p| !p.is_empty()).unwrap_or(false);
            return Err(if connected {
                InvitationError::Unknown(format!(
                    "after {} ms the namespace's governance (as peers sent it) does not make this node a member \
                     of group {group_id}",
                    self.join_timeout.as_millis()
                ))
                .into()
            } else {
                ServiceError::Unavailable {
                    reason: "unreachable",
                    message: format!(
                        "cannot reach the inviter at any of its {} addresses ({}); check that it runs and that \
                         this node can connect to it, or `weft node dial` it first",
                        addrs.len(),
                        body.inviter_addrs.join(" ")
                    ),
                }
            });
        }
        // The invitation's key must be a signing key of the group in the governance this node
        // now holds (the member op descends from its registration).
        if self.governance.registered_signing_key(&group_id, &body.signing_key_id)? != Some(body.signing_key) {
            return Err(InvitationError::UnregisteredSigningKey { key_id: body.signing_key_id, group_id }.into());
        }
        let created = {
            let _uses = self.uses_lock();
            self.engine.create_context(context_id, body.application.clone())
        };
        match created {
            Ok(()) | Err(crate::context::EngineError::ContextExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        // The context's member directory and members revision, whole: governance keeps them
        // for a registered context, except one deleted here before (see `context_delete`).
        self.governance.materialize_context(&namespace_id, &context_id)?;
        // The invitation names the application the context ran when it was issued; if the
        // group has been upgraded since, the new replica moves to the target too.
        self.apply_upgrade(&group_id);
        // Record the join (0x32) for every member to see, once.
        if !self.governance.has_joined(&context_id, &self.identity)? {
            self.act(group_id, OpBody::ContextJoined { context_id })?;
        }
        // Joining a context this node left undoes the leave.
        self.store().delete(&ContextLeft { context_id })?;
        self.join_context(namespace_id, context_id);
        wait(network.sync_now(context_id)).map_err(super::network::net_error)?;
        let synced = poll_until(SYNC_WAIT, || {
            let in_sync = wait(network.in_sync_peers(context_id)).unwrap_or_default();
            (!in_sync.is_empty()).then_some(())
        })
        .is_some();
        // The join is done once this node can run the context's application.
        let fetched_bytes = self.fetch_bytecode(&context_id)?;
        Ok(JoinOutcome { context_id, identity: self.identity, synced, fetched_bytes })
    }

    /// Leaves a context: leaves its group (a `MemberLeft` governance op, published — this
    /// node's writes to the group's contexts are refused from then on; the last admin cannot
    /// leave), then stops replicating the context, now and after restarts (see the module
    /// docs). The local copy is kept. Returns the op, or `None` when this node was no longer
    /// a member (it left before, or was removed): then it only stops replicating, so a leave
    /// cut short can be finished by calling it again.
    pub fn context_leave(&self, context_id: &ContextId) -> Result<Option<OpId>, ServiceError> {
        self.require_context(context_id)?;
        let (namespace_id, group_id) = self.governed(context_id)?.ok_or_else(|| {
            ServiceError::Forbidden(format!("context {context_id} is single-owner: there is no group to leave"))
        })?;
        let member = self.member_key(&namespace_id)?.public_key();
        let op = match self.governance.role(&group_id, &member)? {
            Some(_) => Some(self.act(group_id, OpBody::MemberLeft)?),
            None => None,
        };
        self.store().put(&ContextLeft { context_id: *context_id }, &weft_primitives::wall_clock_ms())?;
        if let Some(network) = self.network() {
            wait(network.leave(*context_id)).map_err(super::network::net_error)?;
        }
        Ok(op)
    }

    /// Whether this node left the context (`context_leave`, not joined again since).
    pub fn has_left(&self, context_id: &ContextId) -> Result<bool, ServiceError> {
        Ok(self.store().contains(&ContextLeft { context_id: *context_id })?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn body(invitee: PublicKey) -> InvitationBody {
        InvitationBody {
            context_id: ContextId::from_bytes([1; 32]),
            group_id: GroupId::from_bytes([2; 32]),
            namespace_id: NamespaceId::from_bytes([2; 32]),
            application: ApplicationMeta::default(),
            inviter: PublicKey::default(),
            inviter_peer_id: vec![1, 2, 3],
            inviter_addrs: vec!["/ip4/127.0.0.1/tcp/1".into()],
            invitee,
            role: Role::Member,
            member_op: Some(OpId::from_bytes([3; 32])),
            issued_at_ms: 1_000,
            expires_at_ms: 2_000,
            signing_key_id: KeyId::default(),
            signing_key: PublicKey::default(),
        }
    }

    #[test]
    fn an_invitation_round_trips_and_binds_its_invitee_and_expiry() {
        let inviter = SecretKey::from_bytes(&[5; 32]);
        let invitee = SecretKey::from_bytes(&[6; 32]).public_key();
        let invitation = Invitation::sign(body(invitee), &inviter);
        let text = invitation.encode();
        assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{text}");
        let back = Invitation::decode(&format!("  {text}\n")).unwrap();
        assert_eq!(back, invitation);
        assert_eq!(back.body.signing_key, inviter.public_key());
        assert_eq!(back.body.signing_key_id, signing_key_id(&inviter.public_key()));
        assert_eq!(back.check_for(&invitee, 1_500), Ok(()));
        assert_eq!(
            back.check_for(&invitee, 2_001),
            Err(InvitationError::Expired { expired_at_ms: 2_000, now_ms: 2_001 })
        );
        let other = SecretKey::from_bytes(&[7; 32]).public_key();
        assert!(matches!(back.check_for(&other, 1_500), Err(InvitationError::WrongInvitee { .. })));
    }

    #[test]
    fn tampered_or_foreign_invitations_are_malformed() {
        let inviter = SecretKey::from_bytes(&[5; 32]);
        let invitation = Invitation::sign(body(PublicKey::from_bytes([9; 32])), &inviter);
        // Another invitee, same signature.
        let mut forged = invitation.clone();
        forged.body.invitee = PublicKey::from_bytes([8; 32]);
        assert!(
            matches!(Invitation::decode(&forged.encode()), Err(InvitationError::Malformed(m)) if m.contains("signed"))
        );
        // A later expiry, same signature.
        let mut extended = invitation.clone();
        extended.body.expires_at_ms += 1;
        assert!(matches!(Invitation::decode(&extended.encode()), Err(InvitationError::Malformed(_))));
        // Another signing key named, same signature; or a key id that is not the key's.
        let mut rekeyed = invitation.clone();
        rekeyed.body.signing_key = SecretKey::from_bytes(&[6; 32]).public_key();
        rekeyed.body.signing_key_id = signing_key_id(&rekeyed.body.signing_key);
        assert!(
            matches!(Invitation::decode(&rekeyed.encode()), Err(InvitationError::Malformed(m)) if m.contains("signed"))
        );
        let mut misnamed = invitation.clone();
        misnamed.body.signing_key_id = KeyId([1; 32]);
        assert!(
            matches!(Invitation::decode(&misnamed.encode()), Err(InvitationError::Malformed(m)) if m.contains("key id"))
        );
        // Not base64, padded base64, another version, trailing bytes, nothing.
        let mut bytes = borsh::to_vec(&invitation).unwrap();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let mut trailing = bytes.clone();
        trailing.push(0);
        // Version 1 (signed by the inviter's member key) is no longer read.
        bytes[0] = 1;
        for text in ["not an invitation!", "AAAA====", &b64(&bytes), &b64(&trailing), ""] {
            assert!(matches!(Invitation::decode(text), Err(InvitationError::Malformed(_))), "{text:?}");
        }
        assert!(
            matches!(Invitation::decode(&"A".repeat(MAX_INVITATION_BYTES * 2)), Err(InvitationError::Malformed(m)) if m.contains("longer"))
        );
    }
}
