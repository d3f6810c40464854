//! A 100,000-node chain delivered child-first releases in one cascade when its
//! root arrives — on a small stack, so the cascade cannot be recursive.

use std::time::Instant;

use weft_dag::{admit, missing, Admission, DagStore, Limits, MemoryDag};

const N: u32 = 100_000;

#[test]
fn a_100k_chain_delivered_in_reverse_releases_on_a_small_stack() {
    let worker = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(|| {
            let started = Instant::now();
            let limits = Limits { max_parents: 1, max_pending: N as usize };
            let mut dag = MemoryDag::new();
            for i in (1..N).rev() {
                assert!(dag.receive(i, vec![i - 1], &limits).unwrap().is_empty());
            }
            assert_eq!(dag.pending_count().unwrap(), (N - 1) as usize);
            assert_eq!(missing(&dag).unwrap(), vec![0]);
            assert_eq!(admit(&dag, &0, &[], &limits).unwrap(), Admission::Ready { height: 0 });

            let applied = dag.receive(0, vec![], &limits).unwrap();
            assert_eq!(applied, (0..N).collect::<Vec<u32>>());
            assert_eq!(dag.head_ids(), &[N - 1]);
            assert_eq!(dag.height(&(N - 1)), Some(u64::from(N - 1)));
            assert_eq!(dag.pending_count().unwrap(), 0);
            assert!(missing(&dag).unwrap().is_empty());
            started.elapsed()
        })
        .unwrap();
    let elapsed = worker.join().unwrap();
    eprintln!("100,000-node chain: delivered and released in {elapsed:?}");
}
