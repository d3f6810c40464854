//! The keys and member secrets the nodes hold, to open what the tap recorded.

use std::collections::HashMap;

use weft_node::net::protocol::{self, sealing_header, SealedKind, SyncResponse};
use weft_primitives::{ContextId, GroupId, GroupKey, KeyId, NamespaceId, PublicKey, Sealed, SecretKey};
use weft_store::backend::{RawCursor, RawRange};
use weft_store::schema::{Column, GroupKeyEntry};
use weft_store::{MemoryBackend, RawRead, Store};

use crate::Service;

/// The keys the two nodes hold (group and namespace keys, by group and id) and the member
/// secrets (by identity), to open what was recorded and to address envelopes.
pub struct Keys {
    groups: HashMap<(GroupId, KeyId), [u8; 32]>,
    secrets: HashMap<PublicKey, SecretKey>,
}

impl Keys {
    pub fn of(nodes: &[&Service], namespace: &NamespaceId) -> Keys {
        let mut groups = HashMap::new();
        let mut secrets = HashMap::new();
        for node in nodes {
            for (key, value) in dump(node.store(), Column::Group) {
                if let Ok(entry) = weft_store::FromKeyParts::from_key_bytes(&key) {
                    let entry: GroupKeyEntry = entry;
                    groups.insert((entry.group_id, entry.key_id), value.try_into().unwrap());
                }
            }
            if let Ok(secret) = node.member_key(namespace) {
                secrets.insert(secret.public_key(), secret);
            }
        }
        Keys { groups, secrets }
    }

    pub fn key(&self, group: &GroupId, key_id: &KeyId) -> [u8; 32] {
        self.groups.get(&(*group, *key_id)).copied().unwrap_or_default()
    }

    /// The key of a sealed message (zeros if none is held).
    pub fn for_sealed(&self, group: &GroupId, sealed: &Sealed) -> [u8; 32] {
        self.key(group, &sealed.key_id)
    }

    pub fn open_response(&self, ctx: &ContextId, frame: &[u8]) -> Option<SyncResponse> {
        match protocol::decode::<SyncResponse>(frame.get(4..)?).ok()? {
            SyncResponse::Sealed { group_id, sealed } => {
                let key = GroupKey::from_bytes(self.for_sealed(&group_id, &sealed));
                let plain =
                    weft_primitives::open(&key, &group_id, &sealing_header(SealedKind::Response, ctx), &sealed).ok()?;
                protocol::decode(&plain).ok()
            }
            other => Some(other),
        }
    }

    /// The seed of a member secret this node set holds for `identity`, if any.
    pub fn seed(&self, identity: &PublicKey) -> Option<[u8; 32]> {
        self.secrets.get(identity).map(SecretKey::to_bytes)
    }
}

/// Every row of one column of a store, raw.
pub fn dump(store: &Store<MemoryBackend, Column>, column: Column) -> Vec<(Vec<u8>, Vec<u8>)> {
    let range = RawRange { lower: Vec::new(), upper: None, reverse: false, shared_prefix: 0 };
    let mut cursor = store.backend().cursor(weft_store::ColumnSet::index(column), &range).unwrap();
    let mut rows = Vec::new();
    while let Some((k, v)) = cursor.current() {
        rows.push((k.to_vec(), v.to_vec()));
        cursor.advance();
    }
    rows
}
