//! A context's revision counters (ContextConfig) and member directory (ContextIdentity) on
//! one node, through the service: each counter moves exactly when what it counts changes
//! (and not for roles, capabilities, aliases or an upgrade whose application is missing);
//! the directory lists the group's members with this node's own row holding its namespace
//! identity's keys; and a store written before these rows were kept gets them, with the
//! numbers every node computes, when its namespace is loaded.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use weft_node::config::NodeConfig;
use weft_node::governance::{Governance, GovernanceConfig};
use weft_node::metrics::NodeMetrics;
use weft_node::service::NodeService;
use weft_primitives::{
    AliasTarget, ContextConfigValue, ContextId, ContextIdentityValue, ContextMetaValue, NamespaceId, OpBody, PublicKey,
    Role, SecretKey,
};
use weft_store::schema::{Column, ContextConfig, ContextIdentity, ContextMeta, NamespaceIdentity};
use weft_store::{MemoryBackend, Prefix, PrefixBy, Read, Store};

type Service = NodeService<MemoryBackend>;

fn service() -> Service {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap()
}

fn revisions(s: &Service, context_id: &ContextId) -> (u64, u64) {
    let r = s.context_revisions(context_id).unwrap();
    (r.application_revision, r.members_revision)
}

fn directory(s: &Service, context_id: &ContextId) -> Vec<(PublicKey, bool)> {
    let (page, next) = s.context_members_page(context_id, None, 1000).unwrap();
    assert_eq!(next, None);
    page.into_iter().map(|e| (e.identity, e.own)).collect()
}

#[test]
fn revisions_move_exactly_when_the_application_or_the_members_change() {
    let s = service();
    let v1 = s.app_install("chat", "1", b"v1 bytecode").unwrap();
    let v2 = s.app_install("chat", "2", b"v2 bytecode").unwrap();
    let created = s.context_create(None, Some(v1), None).unwrap();
    let (ctx, group, me) = (created.context_id, created.group_id, created.identity);
    // Created with an application, registered (its members: the registrar).
    assert_eq!(revisions(&s, &ctx), (1, 1));
    assert_eq!(directory(&s, &ctx), vec![(me, true)]);
    // This node's own row holds its namespace identity's keys, as 0x37 does.
    let ns = NamespaceId::from_bytes(*group.as_bytes());
    let identity = s.store().get(&NamespaceIdentity { namespace_id: ns }).unwrap().unwrap();
    assert_eq!(identity.public_key, me);
    let own = s.store().get(&ContextIdentity { context_id: ctx, public_key: me }).unwrap().unwrap();
    assert_eq!(
        own,
        ContextIdentityValue { private_key: Some(identity.private_key), sender_key: Some(identity.sender_key) }
    );

    let other = SecretKey::from_bytes(&[7; 32]).public_key();
    s.group_add_member(group, other, Role::Member).unwrap();
    assert_eq!(revisions(&s, &ctx), (1, 2), "a member added");
    let mut expected = vec![(me, true), (other, false)];
    expected.sort();
    assert_eq!(directory(&s, &ctx), expected);
    let row = s.store().get(&ContextIdentity { context_id: ctx, public_key: other }).unwrap().unwrap();
    assert_eq!(row, ContextIdentityValue { private_key: None, sender_key: None }, "no key in another's row");

    // Neither a role, capabilities, a default, nor an alias changes who the members are.
    s.group_set_role(group, other, Role::ReadOnly).unwrap();
    s.group_set_role(group, other, Role::Member).unwrap();
    s.group_set_capabilities(group, other, 0x1).unwrap();
    s.group_set_default_capabilities(group, 0x1).unwrap();
    s.act(group, OpBody::AliasSet { target: AliasTarget::Member(other), alias: "seven".into() }).unwrap();
    s.act(group, OpBody::AliasSet { target: AliasTarget::Context(ctx), alias: "chat".into() }).unwrap();
    assert_eq!(revisions(&s, &ctx), (1, 2), "roles, capabilities and aliases");

    // An upgrade moves the context: the group's upgrade number (1) + 1.
    s.group_set_application(group, v2, None).unwrap();
    assert_eq!(revisions(&s, &ctx), (2, 2), "moved to v2 by upgrade 1");
    // An upgrade to an application this node lacks moves nothing, so counts nothing yet ...
    let v3 = weft_node::service::application_id_of("chat", "3", &weft_primitives::BlobId::default());
    s.group_set_application(group, v3, None).unwrap();
    assert_eq!(revisions(&s, &ctx), (2, 2), "v3 is not installed: the context still runs v2");
    // ... until the application arrives and the context moves: upgrade 2, revision 3.
    let v4 = s.app_install("chat", "4", b"v4 bytecode").unwrap();
    s.group_set_application(group, v4, None).unwrap();
    assert_eq!(revisions(&s, &ctx), (4, 2), "moved by upgrade 3 (never by 2): 3 + 1");

    s.group_remove_member(group, other).unwrap();
    assert_eq!(revisions(&s, &ctx).1, 3, "a member removed");
    assert_eq!(directory(&s, &ctx), vec![(me, true)]);
    assert_eq!(s.store().get(&ContextIdentity { context_id: ctx, public_key: other }).unwrap(), None);

    // A second context of the group, without an application: revision 0, and its own count.
    let bare = s.context_create(Some(group), None, None).unwrap().context_id;
    assert_eq!(revisions(&s, &bare), (0, 1));
    assert_eq!(revisions(&s, &ctx).1, 3, "registering another context is not a change of this one's members");
}

#[test]
fn a_store_without_the_rows_gets_them_when_its_namespace_loads() {
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let gov = Governance::new(Arc::clone(&store), GovernanceConfig::default());
    let (ns, _) = gov.create_namespace(Default::default(), Default::default()).unwrap();
    let admin = gov.identity(&ns).unwrap();
    let root = ns.root_group();
    let ctx = ContextId([0xC7; 32]);
    let member = SecretKey::from_bytes(&[9; 32]).public_key();
    for body in [
        OpBody::ContextRegistered { context_id: ctx },
        OpBody::MemberAdded { identity: member, role: Role::Member },
        OpBody::MemberRemoved { identity: member },
        OpBody::MemberAdded { identity: member, role: Role::ReadOnly },
    ] {
        gov.act(ns, root, &admin, body).unwrap();
    }
    let rows = |store: &Store<MemoryBackend, Column>| {
        let config = store.scan(Prefix::<ContextConfig>::family()).collect_all().unwrap();
        let identity = store.scan(ContextIdentity::prefix(&ctx)).collect_all().unwrap();
        (config, identity)
    };
    let written = rows(&store);
    assert_eq!(
        written.0,
        vec![(ContextConfig { context_id: ctx }, ContextConfigValue { application_revision: 0, members_revision: 4 })]
    );
    assert_eq!(written.1.len(), 2, "{:?}", written.1);
    drop(gov);

    // A store of schema 4: no such rows. Readers see zeros and nothing ...
    let mut batch = store.batch();
    batch.delete(&ContextConfig { context_id: ctx });
    for (key, _) in &written.1 {
        batch.delete(key);
    }
    store.write(batch).unwrap();
    assert_eq!(rows(&store), (Vec::new(), Vec::new()));
    // ... until the namespace is loaded, which writes them as they were for a context held
    // here (one not held — or deleted here — gets them when this node joins it).
    let reloaded = Governance::new(Arc::clone(&store), GovernanceConfig::default());
    reloaded.state(&ns).unwrap();
    assert_eq!(rows(&store), (Vec::new(), Vec::new()));
    drop(reloaded);
    let meta =
        ContextMetaValue { application: Default::default(), root_hash: Default::default(), dag_heads: Vec::new() };
    store.put(&ContextMeta { context_id: ctx }, &meta).unwrap();
    let reloaded = Governance::new(Arc::clone(&store), GovernanceConfig::default());
    reloaded.state(&ns).unwrap();
    assert_eq!(rows(&store), written);
}

/// A context deleted here (after leaving it) keeps no revision or directory row while it stays
/// registered in its group: a later membership change folded here writes none back (before the
/// fix, governance re-wrote the row of the member added and the members revision), nor does
/// loading the namespace again.
#[test]
fn a_deleted_context_gets_no_rows_back_from_governance() {
    let config = NodeConfig::default();
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let metrics = Arc::new(NodeMetrics::new());
    let s =
        NodeService::new(Arc::clone(&store), SecretKey::generate(), config.limits.clone(), config.engine(), metrics)
            .unwrap();
    let created = s.context_create(None, None, None).unwrap();
    let (ctx, group) = (created.context_id, created.group_id);
    let ns = NamespaceId::from_bytes(*group.as_bytes());
    // Another admin stays when this node leaves; it adds a member after the delete.
    let other = SecretKey::from_bytes(&[7; 32]);
    s.group_add_member(group, other.public_key(), Role::Admin).unwrap();
    s.context_leave(&ctx).unwrap();
    s.context_delete(&ctx).unwrap();
    let rows = |s: &Service| {
        let config = s.store().get(&ContextConfig { context_id: ctx }).unwrap();
        let identity = s.store().scan(ContextIdentity::prefix(&ctx)).collect_all().unwrap();
        (config, identity)
    };
    assert_eq!(rows(&s), (None, Vec::new()));
    let late = SecretKey::from_bytes(&[8; 32]).public_key();
    s.governance().act(ns, group, &other, OpBody::MemberAdded { identity: late, role: Role::Member }).unwrap();
    assert!(s.governance().state(&ns).unwrap().group(&group).unwrap().contexts.contains(&ctx), "still registered");
    assert_eq!(rows(&s), (None, Vec::new()), "governance wrote rows of a deleted context");
    // Nor when the namespace is loaded again, from the same store.
    let gov = Governance::new(Arc::clone(&store), GovernanceConfig::default());
    gov.state(&ns).unwrap();
    assert_eq!(rows(&s), (None, Vec::new()), "loading wrote rows of a deleted context");
}
