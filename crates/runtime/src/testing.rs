//! Test support (feature `testing`): an in-memory [`Host`] and the example applications
//! under `apps/`, built from source for `wasm32-unknown-unknown`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use weft_primitives::{Action, BlobId, Hash};

use crate::{Entry, Host, HostError, Outcome};

/// A context's state, private state and blobs in memory. Cloning is cheap and takes a
/// snapshot: pass a clone to each call, then [`MemoryHost::apply`] the outcome.
#[derive(Clone, Debug, Default)]
pub struct MemoryHost {
    /// The replicated state.
    pub state: Arc<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// The node-local state.
    pub private: Arc<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Blobs by id.
    pub blobs: Arc<HashMap<BlobId, Vec<u8>>>,
    /// When set, every read fails with a [`HostError`] (to test the node failing under a call).
    pub fail_reads: bool,
}

impl MemoryHost {
    /// An empty host.
    pub fn new() -> Self {
        Self::default()
    }

    /// Commits a call's writes, as the node does with a successful call's outcome.
    pub fn apply(&mut self, outcome: &Outcome) {
        apply(Arc::make_mut(&mut self.state), &outcome.actions);
        apply(Arc::make_mut(&mut self.private), &outcome.private);
    }

    /// Stores a blob under the blake3 hash of its contents; returns its id.
    pub fn add_blob(&mut self, data: Vec<u8>) -> BlobId {
        let id = BlobId(Hash::digest(&data).0);
        Arc::make_mut(&mut self.blobs).insert(id, data);
        id
    }

    fn check(&self) -> Result<(), HostError> {
        if self.fail_reads {
            return Err(HostError::msg("reads fail (MemoryHost::fail_reads)"));
        }
        Ok(())
    }
}

fn apply(map: &mut BTreeMap<Vec<u8>, Vec<u8>>, actions: &[Action]) {
    for action in actions {
        match action {
            Action::Put { key, value } => map.insert(key.clone(), value.clone()),
            Action::Delete { key } => map.remove(key),
        };
    }
}

impl Host for MemoryHost {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        self.check()?;
        Ok(self.state.get(key).cloned())
    }

    fn range(
        &mut self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>, HostError> {
        self.check()?;
        let range = crate::KeyRange { lower: lower.map(<[u8]>::to_vec), upper: upper.map(<[u8]>::to_vec) };
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let entries = self.state.range::<[u8], _>((lower, upper)).map(|(k, v)| (k.clone(), v.clone()));
        Ok(if reverse { entries.rev().take(limit).collect() } else { entries.take(limit).collect() })
    }

    fn private_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        self.check()?;
        Ok(self.private.get(key).cloned())
    }

    fn blob(&mut self, id: &BlobId) -> Result<Option<Vec<u8>>, HostError> {
        self.check()?;
        Ok(self.blobs.get(id).cloned())
    }
}

/// The directory holding the repository's `apps/` workspace.
pub fn apps_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps")
}

/// Where the example applications are built: `wasm-apps` under the outer build's target
/// directory (`$CARGO_TARGET_DIR`, or the target directory holding the running test binary),
/// so the nested cargo never waits on the outer cargo's lock.
fn apps_target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("wasm-apps");
    }
    // Cargo marks the root of every target directory with CACHEDIR.TAG.
    let exe = std::env::current_exe().unwrap_or_default();
    let target = exe.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()).map(Path::to_path_buf);
    target.unwrap_or_else(|| apps_dir().join("../target")).join("wasm-apps")
}

/// Builds the `apps/` workspace (release, `wasm32-unknown-unknown`) once per process.
fn build_apps() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target_dir = apps_target_dir();
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let output = Command::new(cargo)
                .args(["build", "--quiet", "--release", "--target", "wasm32-unknown-unknown", "--manifest-path"])
                .arg(apps_dir().join("Cargo.toml"))
                .arg("--target-dir")
                .arg(&target_dir)
                // Flags meant for the outer (native) build must not reach the WASM one.
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_ENCODED_RUSTFLAGS")
                .env_remove("CARGO_BUILD_TARGET")
                .output()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "building apps/ for wasm32-unknown-unknown failed ({}):\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            Ok(target_dir.join("wasm32-unknown-unknown/release"))
        })
        .clone()
}

/// The bytecode of example application `name` (a package of `apps/`, e.g. `"kv-registry"`),
/// building the apps first if this process has not.
pub fn example_app(name: &str) -> Result<Vec<u8>, String> {
    let path = build_apps()?.join(format!("{}.wasm", name.replace('-', "_")));
    std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}
