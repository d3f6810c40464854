//! A peer that wrote since it last met this node asks with heads this node has never seen.
//! With its heads alone, `lacking` finds it lacking this node's whole history (the unknown
//! heads are ignored) and catch-up resends everything, so convergence after a partition
//! slows as history grows (found by the partition and crash campaigns, issue 24). With
//! `marks` (its heads and ancestors at doubling distances) only about the difference is sent.
#![allow(clippy::unwrap_used)]

use weft_dag::{lacking, marks, MemoryDag};

/// A chain 0..len, then `ours` nodes on top of it (ids from `first`).
fn chain_with_tip(len: u32, first: u32, ours: u32) -> MemoryDag<u32> {
    let mut dag = MemoryDag::new();
    for id in 0..len {
        dag.apply(id, if id == 0 { vec![] } else { vec![id - 1] }).unwrap();
    }
    for k in 0..ours {
        dag.apply(first + k, vec![if k == 0 { len - 1 } else { first + k - 1 }]).unwrap();
    }
    dag
}

#[test]
fn a_diverged_peer_is_sent_about_the_difference_not_the_history() {
    let server = chain_with_tip(2_000, 10_000, 5);
    let client = chain_with_tip(2_000, 20_000, 40);
    let heads = client.head_ids().to_vec();

    // Heads alone: the server knows none of them, so everything it holds is "lacking".
    assert_eq!(lacking(&server, &heads, 100).unwrap().total(), 2_005);

    let marks = marks(&client, &heads, 1024).unwrap();
    assert!(marks.iter().all(|m| client.is_applied(m)), "marks are held by the asker");
    assert!(marks.len() <= heads.len() + 11, "{marks:?}");
    let sent = lacking(&server, &marks, 100).unwrap().into_ids();
    // The server's five, plus chain nodes between the mark it knows and the divergence.
    for own in 10_000..10_005 {
        assert!(sent.contains(&own), "{sent:?}");
    }
    assert!(sent.len() <= 5 + 40, "sent {} ids: {sent:?}", sent.len());
}

#[test]
fn marks_stop_at_the_walk_budget_and_the_root() {
    let dag = chain_with_tip(10, 100, 0);
    assert_eq!(marks(&dag, &[9], 1024).unwrap(), vec![9, 8, 7, 5, 1]);
    assert_eq!(marks(&dag, &[9], 3).unwrap(), vec![9, 8, 7]);
    assert_eq!(marks(&dag, &[0], 1024).unwrap(), vec![0]);
}
