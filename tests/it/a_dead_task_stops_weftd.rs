//! `weftd run` exits non-zero, naming the task, when a supervised task dies: here its network
//! driver, killed by a panic injected through `WEFTD_DEBUG_PANIC_TASK` (honoured by debug
//! builds only, which the tests run). Before supervision the driver died silently and weftd
//! went on answering `/ready` 200.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{init, spawn_run};

#[test]
fn weftd_exits_non_zero_naming_the_network_driver_when_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("a");
    init(&home);
    let (mut child, stdout, stderr) = spawn_run(&home, &[("WEFTD_DEBUG_PANIC_TASK", "network-driver")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("weftd did not exit after its driver died: {}", stderr.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = stderr.lock().unwrap().clone();
    assert!(stdout.lock().unwrap().contains("ready"), "it started: {}", stdout.lock().unwrap());
    assert!(!status.success(), "exit status {status}: {stderr}");
    assert!(stderr.contains("task `network-driver` died"), "{stderr}");
    assert!(stderr.contains("panic injected"), "{stderr}");
    // It shut down cleanly: the store was closed and the rpc-addr file removed.
    assert!(stderr.contains("store closed"), "{stderr}");
    assert!(!home.join("rpc-addr").exists());
}
