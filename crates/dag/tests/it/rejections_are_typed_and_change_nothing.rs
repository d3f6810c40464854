//! Malformed parent lists and a full pending set are typed errors that change
//! nothing; a failing apply stops the cascade where it failed, resumably.

use weft_dag::{admit, next_heads, release_all, Admission, DagError, DagStore, Limits, MemoryDag, Release};

fn limits() -> Limits {
    Limits { max_parents: 3, max_pending: 2 }
}

#[test]
fn pending_full_is_typed_and_changes_nothing() {
    let mut dag = MemoryDag::new();
    assert!(dag.receive(10u32, vec![1], &limits()).unwrap().is_empty());
    assert!(dag.receive(11, vec![2], &limits()).unwrap().is_empty());
    let before = dag.clone();

    let err = dag.receive(12, vec![3], &limits()).unwrap_err();
    assert!(matches!(err, DagError::PendingFull { limit: 2 }), "{err:?}");
    assert!(matches!(admit(&dag, &12, &[3], &limits()), Err(DagError::PendingFull { limit: 2 })));
    assert_eq!(dag, before);

    // A full pending set still takes duplicates (known) and nodes that are ready,
    // and releasing frees room.
    assert_eq!(admit(&dag, &10, &[1], &limits()).unwrap(), Admission::Known { applied: false });
    assert_eq!(dag.receive(1, vec![], &limits()).unwrap(), vec![1, 10]);
    assert!(dag.receive(12, vec![3], &limits()).unwrap().is_empty());
    assert_eq!(dag.pending_count().unwrap(), 2);
}

#[test]
fn malformed_parent_lists_are_typed_and_change_nothing() {
    let mut dag = MemoryDag::new();
    dag.receive(1u32, vec![], &limits()).unwrap();
    dag.receive(5, vec![4], &limits()).unwrap();
    let before = dag.clone();

    let err = dag.receive(2, vec![1, 3, 4, 5], &limits()).unwrap_err();
    assert!(matches!(err, DagError::TooManyParents { count: 4, max: 3 }), "{err:?}");
    let err = dag.receive(2, vec![1, 2], &limits()).unwrap_err();
    assert!(matches!(err, DagError::SelfParent), "{err:?}");
    let err = dag.receive(2, vec![1, 3, 1], &limits()).unwrap_err();
    assert!(matches!(err, DagError::DuplicateParent), "{err:?}");
    // Malformed is malformed even for an id already applied or pending.
    assert!(matches!(admit(&dag, &1, &[1], &limits()), Err(DagError::SelfParent)));
    assert!(matches!(admit(&dag, &5, &[4, 4], &limits()), Err(DagError::DuplicateParent)));
    assert_eq!(dag, before);

    assert_eq!(
        DagError::<std::convert::Infallible>::TooManyParents { count: 4, max: 3 }.to_string(),
        "node lists 4 parents, more than the maximum 3"
    );
}

#[test]
fn admission_reports_known_ready_and_missing_parents() {
    let mut dag = MemoryDag::new();
    dag.receive(1u32, vec![], &limits()).unwrap();
    dag.receive(3, vec![2], &limits()).unwrap();
    assert_eq!(admit(&dag, &1, &[], &limits()).unwrap(), Admission::Known { applied: true });
    assert_eq!(admit(&dag, &3, &[2], &limits()).unwrap(), Admission::Known { applied: false });
    assert_eq!(admit(&dag, &7, &[1], &limits()).unwrap(), Admission::Ready { height: 1 });
    // 3 is pending, yet still missing (it is not applied): index the node under it.
    assert_eq!(admit(&dag, &8, &[3, 1, 9], &limits()).unwrap(), Admission::Pending { missing: vec![3, 9] });
}

#[test]
fn next_heads_replaces_the_parents_with_the_node() {
    assert_eq!(next_heads(&[5u32, 2, 9], 7, &[2, 9]), vec![5, 7]);
    assert_eq!(next_heads(&[], 1u32, &[]), vec![1]);
    assert_eq!(next_heads(&[3u32, 1], 2, &[]), vec![1, 2, 3]);
    assert_eq!(next_heads(&[3u32], 3, &[]), vec![3]);
}

#[test]
fn a_failing_apply_stops_the_cascade_and_can_resume() {
    // 1 <- 2 <- 3 and 1 <- 4, delivered child-first.
    let big = Limits::default();
    let mut dag = MemoryDag::new();
    dag.receive(3u32, vec![2], &big).unwrap();
    dag.receive(2, vec![1], &big).unwrap();
    dag.receive(4, vec![1], &big).unwrap();
    dag.apply(1, vec![]).unwrap();

    let mut calls = Vec::new();
    let err = release_all(&mut dag, &1, |d: &mut MemoryDag<u32>, r: &Release<u32>| {
        calls.push(r.id);
        if r.id == 4 {
            return Err(DagError::Inconsistent("refused".into()));
        }
        d.apply(r.id, r.parents.clone()).map(|_| ())
    })
    .unwrap_err();
    assert!(matches!(err, DagError::Inconsistent(ref m) if m == "refused"));
    // Height 1 first: 2, then 4 (which failed); 3 (height 2) never came up.
    assert_eq!(calls, vec![2, 4]);
    assert!(dag.is_applied(&2) && dag.is_pending(&4) && dag.is_pending(&3));

    // Resume from each applied node.
    let mut resumed = release_all(&mut dag, &1, |d: &mut MemoryDag<u32>, r: &Release<u32>| {
        d.apply(r.id, r.parents.clone()).map(|_| ())
    })
    .unwrap();
    resumed.extend(
        release_all(&mut dag, &2, |d: &mut MemoryDag<u32>, r: &Release<u32>| {
            d.apply(r.id, r.parents.clone()).map(|_| ())
        })
        .unwrap(),
    );
    assert_eq!(resumed, vec![4, 3]);
    assert_eq!(dag.pending_count().unwrap(), 0);
    assert_eq!(dag.head_ids(), &[3, 4]);
}

#[test]
fn an_apply_that_records_nothing_is_inconsistent() {
    let mut dag = MemoryDag::new();
    dag.receive(2u32, vec![1], &Limits::default()).unwrap();
    dag.apply(1, vec![]).unwrap();
    let err = release_all(&mut dag, &1, |_: &mut MemoryDag<u32>, _: &Release<u32>| {
        Ok::<(), DagError<std::convert::Infallible>>(())
    })
    .unwrap_err();
    assert!(matches!(err, DagError::Inconsistent(_)), "{err:?}");
}
