//! Group signing keys (0x25): created and kept on the node (of a holder of `INVITE_MEMBERS`) that signs invitations
//! with them, their public halves registered by `SigningKeySet` ops (see
//! `docs/invitations.md`).

use weft_primitives::{GroupId, GroupSigningKeyValue, KeyId, OpBody, OpId, PublicKey, SecretKey};
use weft_store::schema::GroupSigningKey;
use weft_store::{Backend, PrefixBy, Read};

use super::{Governance, GovernanceError};

impl<B: Backend> Governance<B> {
    /// Creates a signing key for a group (its secret kept on this node, 0x25) and
    /// registers its public key with a `SigningKeySet` op signed by `admin` (who must
    /// hold `INVITE_MEMBERS` in the group, as every admin does). Returns the key's id and the op. On error nothing is
    /// kept.
    pub fn create_signing_key(&self, group_id: &GroupId, admin: &SecretKey) -> Result<(KeyId, OpId), GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        let secret = SecretKey::generate();
        let public_key = secret.public_key();
        let key_id = weft_primitives::signing_key_id(&public_key);
        let row = GroupSigningKey { group_id: *group_id, key_id };
        self.store.put(&row, &GroupSigningKeyValue { private_key: secret.to_bytes() })?;
        match self.act(namespace_id, *group_id, admin, OpBody::SigningKeySet { key_id, public_key }) {
            Ok(op) => Ok((key_id, op)),
            Err(e) => {
                self.store.delete(&row)?;
                Err(e)
            }
        }
    }

    /// A signing key of the group this node holds the secret of and that counts in the
    /// current fold (registered, its registering admin still an admin), if any.
    pub fn signing_key(&self, group_id: &GroupId) -> Result<Option<(KeyId, SecretKey)>, GovernanceError> {
        let rows = self.store.scan(GroupSigningKey::prefix(group_id)).collect_all()?;
        for (key, value) in rows {
            let secret = SecretKey::from_bytes(&value.private_key);
            if self.registered_signing_key(group_id, &key.key_id)? == Some(secret.public_key()) {
                return Ok(Some((key.key_id, secret)));
            }
        }
        Ok(None)
    }

    /// The public key registered for a group under `key_id`, if it counts in the
    /// current fold (see [`crate::governance::GroupState::signing_key`]).
    pub fn registered_signing_key(
        &self,
        group_id: &GroupId,
        key_id: &KeyId,
    ) -> Result<Option<PublicKey>, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        self.with_loaded(&namespace_id, |l| l.folded.state.group(group_id).and_then(|g| g.signing_key(key_id)))
    }
}
