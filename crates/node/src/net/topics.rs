//! Gossip topic names, derived so that a peer that is not a member learns no context or
//! namespace id from them. Gossipsub tells every connected peer which topics each peer
//! subscribes to, and every message names its topic; a name that showed the id (as
//! `weft/context/<id>` did) told any stranger on the mesh which contexts and namespaces a node
//! holds, and let it follow their traffic.
//!
//! A log's topic is `weft/t/<hex>`, where `<hex>` is the blake3 keyed hash of the log's id
//! under a topic key:
//!
//! ```text
//! topic key = blake3::derive_key("weft topic v1 context|namespace keyed", log key)   with a key
//!           = blake3::derive_key("weft topic v1 context|namespace open", [])         without
//! name      = "weft/t/" ‖ hex(blake3::keyed_hash(topic key, id))
//! ```
//!
//! The log key is the one that seals the log's traffic (see `sealing.rs`): the current key of
//! a context's group, the current namespace key of a namespace. The kind is in the derivation
//! context, so a context and a namespace never share a topic. Only a holder of the key can
//! compute the name, and the name reveals neither the id nor the key.
//!
//! **Rotation.** The topic follows the current key: when a group's or namespace's key is
//! rotated, every member moves to the new topic (unsubscribes from the old, subscribes to the
//! new) on its next anti-entropy round for the log, or at once when it publishes on it.
//! Deriving from the current key rather than from something stable is deliberate: a removed
//! member, who keeps the old keys, can no longer find the log's topic, nor see who follows it.
//! While members move, gossip sent on the old topic can miss some of them; anti-entropy (status
//! checks and catch-up by request, which do not depend on topics) brings them the same deltas
//! and ops within a round. A node that lacks the current key (removed, or the rotation's
//! envelope not there yet) cannot read the traffic anyway and sits on the open topic.
//!
//! **Without a key** (a context whose group has no key yet or that belongs to no group, a
//! namespace before its first key) there is no secret to key the topic with: the name is the
//! open derivation, a hash of the id. It does not show the id, but anyone who knows the id
//! can compute it and confirm a guess; such a log's traffic travels in the clear anyway (a
//! delta or op names its context or namespace in its signed content).

use libp2p::gossipsub::IdentTopic;
use weft_primitives::{ContextId, GroupKey, NamespaceId};

/// The topic name of a context, whose group's current key (if any, and held) is `key`.
pub fn context_topic_name(context_id: &ContextId, key: Option<&GroupKey>) -> String {
    name("context", context_id.as_bytes(), key)
}

/// The topic name of a namespace, whose current namespace key (if any, and held) is `key`.
pub fn namespace_topic_name(namespace_id: &NamespaceId, key: Option<&GroupKey>) -> String {
    name("namespace", namespace_id.as_bytes(), key)
}

/// A context's gossip topic.
pub(super) fn context_topic(context_id: &ContextId, key: Option<&GroupKey>) -> IdentTopic {
    IdentTopic::new(context_topic_name(context_id, key))
}

/// A namespace's gossip topic (its governance ops).
pub(super) fn namespace_topic(namespace_id: &NamespaceId, key: Option<&GroupKey>) -> IdentTopic {
    IdentTopic::new(namespace_topic_name(namespace_id, key))
}

fn name(kind: &str, id: &[u8; 32], key: Option<&GroupKey>) -> String {
    let topic_key = match key {
        Some(key) => blake3::derive_key(&format!("weft topic v1 {kind} keyed"), key.as_bytes()),
        None => blake3::derive_key(&format!("weft topic v1 {kind} open"), &[]),
    };
    format!("weft/t/{}", blake3::keyed_hash(&topic_key, id).to_hex())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_topic_names() {
        let ctx = ContextId::from_bytes([0xC0; 32]);
        let ns = NamespaceId::from_bytes([0xC0; 32]);
        let key = GroupKey::from_bytes([7; 32]);
        let names = [
            context_topic_name(&ctx, None),
            context_topic_name(&ctx, Some(&key)),
            namespace_topic_name(&ns, None),
            namespace_topic_name(&ns, Some(&key)),
        ];
        // Pinned: every node of every version must derive the same names.
        let expected = [
            "weft/t/706cf4fb84a26ff2ea97063955fe98a080489854e7ffc9c23568739c7608a3d1",
            "weft/t/7069459b491be7306809ca74414ff4c0897335d871bb0142b791f83126a5c15e",
            "weft/t/76e62cc29afd62ee9b569b4934b4785751be4c3a12db1f3646baf1a4f9861729",
            "weft/t/7fbd3b1c3355bf9fb85867fbf392d3124d888e9c8b64bff9caeeb642398448dc",
        ];
        assert_eq!(names, expected.map(String::from));
        // Distinct by kind and key; none shows the id.
        for (i, a) in names.iter().enumerate() {
            assert!(!a.contains(&hex::encode([0xC0; 32])));
            assert!(!a.contains(&ctx.to_string()));
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
        let other = GroupKey::from_bytes([8; 32]);
        assert_ne!(context_topic_name(&ctx, Some(&other)), names[1]);
    }
}
