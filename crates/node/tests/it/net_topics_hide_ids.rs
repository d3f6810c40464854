//! What a stranger learns: a peer that is no member — a raw libp2p gossipsub swarm — connects
//! to the members of a namespace whose group and namespace have keys, follows every topic it
//! sees them subscribe to, and records the subscriptions and every gossip message. It finds
//! no context or namespace id in any of them (as bytes, hex or text), while the members still
//! converge. (Before topic names were derived from the keys, the names themselves were
//! `weft/context/<id>` and `weft/namespace/<id>`, and sealed gossip named its context.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::swarm::SwarmEvent;
use libp2p::{gossipsub, identity, noise, tcp, yamux, Multiaddr};
use net_support::*;
use weft_primitives::{ApplicationId, OpBody, Role, UpgradePolicy};

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(60);

/// What the stranger saw: topics peers subscribed to, and gossip messages (topic, data).
#[derive(Default)]
struct Seen {
    topics: BTreeSet<String>,
    messages: Vec<(String, Vec<u8>)>,
}

/// A gossipsub-only swarm that dials `peers`, follows every topic it sees subscribed, and
/// records what it sees.
fn stranger(peers: Vec<Multiaddr>, seen: Arc<Mutex<Seen>>) {
    let mut swarm = libp2p::SwarmBuilder::with_existing_identity(identity::Keypair::generate_ed25519())
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .unwrap()
        .with_behaviour(|_key| {
            let config = gossipsub::ConfigBuilder::default()
                .max_transmit_size(8 << 20)
                .heartbeat_interval(Duration::from_millis(200))
                // As weft gossips: no libp2p signatures (see net/swarm.rs).
                .validation_mode(gossipsub::ValidationMode::Anonymous)
                .message_id_fn(weft_node::net::gossip_message_id)
                .build()
                .unwrap();
            gossipsub::Behaviour::<gossipsub::IdentityTransform, gossipsub::AllowAllSubscriptionFilter>::new(
                gossipsub::MessageAuthenticity::Anonymous,
                config,
            )
            .unwrap()
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(120)))
        .build();
    for addr in peers {
        swarm.dial(addr).unwrap();
    }
    tokio::spawn(async move {
        loop {
            match swarm.select_next_some().await {
                SwarmEvent::Behaviour(gossipsub::Event::Subscribed { topic, .. }) => {
                    let name = topic.as_str().to_string();
                    if seen.lock().unwrap().topics.insert(name.clone()) {
                        let _ = swarm.behaviour_mut().subscribe(&gossipsub::IdentTopic::new(name));
                    }
                }
                SwarmEvent::Behaviour(gossipsub::Event::Message { message, .. }) => {
                    seen.lock().unwrap().messages.push((message.topic.as_str().to_string(), message.data));
                }
                _ => {}
            }
        }
    });
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_on_the_mesh_learns_no_context_or_namespace_id() {
    // A namespace with a namespace key, whose root group (holding the context) has a key.
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    let b_id = key(50);
    let mut ops = vec![
        a.gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap(),
        a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: b_id.public_key(), role: Role::Member }).unwrap(),
    ];
    ops.push(a.gov.rotate_group_key(&root, &admin).unwrap().0);
    ops.push(a.gov.rotate_namespace_key(&ns, &admin).unwrap().0);
    a.net.join_namespace(ns).await.unwrap();
    let a_addr = addr(&a.net).await;
    let b = start(store_with_identity(ns, &b_id), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    b.net.join_namespace(ns).await.unwrap();
    publish_ops(&a, ns, &ops).await;
    governance_converged(&[&a, &b], ns, WITHIN).await;

    // The stranger joins the mesh, then the members write and act.
    let seen = Arc::new(Mutex::new(Seen::default()));
    stranger(vec![a_addr, addr(&b.net).await], seen.clone());
    let start = Instant::now();
    let mut i = 0;
    loop {
        write_as(&a, ns, &admin, &format!("a{i}")).await;
        write_as(&b, ns, &b_id, &format!("b{i}")).await;
        let member = key(100 + (i % 100) as u8).public_key();
        let op = a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: member, role: Role::ReadOnly }).unwrap();
        publish_ops(&a, ns, &[op]).await;
        i += 1;
        tokio::time::sleep(TICK).await;
        let topics_with_messages: BTreeSet<String> =
            seen.lock().unwrap().messages.iter().map(|(t, _)| t.clone()).collect();
        // A context topic and a namespace topic, each with messages.
        if topics_with_messages.len() >= 2 && i >= 5 {
            break;
        }
        assert!(start.elapsed() < WITHIN, "the stranger saw no gossip on two topics: {topics_with_messages:?}");
    }
    context_converged(&[&a, &b], CTX, WITHIN).await;
    governance_converged(&[&a, &b], ns, WITHIN).await;

    let seen = seen.lock().unwrap();
    let mut needles: Vec<(String, Vec<u8>)> = Vec::new();
    for (what, bytes, text) in
        [("context", CTX.as_bytes().to_vec(), CTX.to_string()), ("namespace", ns.as_bytes().to_vec(), ns.to_string())]
    {
        needles.push((format!("the {what} id"), bytes.clone()));
        needles.push((format!("the {what} id in hex"), hex::encode(&bytes).into_bytes()));
        needles.push((format!("the {what} id as text"), text.into_bytes()));
    }
    for topic in &seen.topics {
        for (what, needle) in &needles {
            assert!(!contains(topic.as_bytes(), needle), "{what} in the subscription to {topic}");
        }
    }
    for (topic, data) in &seen.messages {
        for (what, needle) in &needles {
            assert!(!contains(topic.as_bytes(), needle), "{what} in the topic {topic} of a message");
            assert!(!contains(data, needle), "{what} in a gossip message on {topic}");
        }
    }
    assert!(seen.messages.len() >= 2, "{} messages seen", seen.messages.len());
}
