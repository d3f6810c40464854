//! The node's home directory: what `weftd init` creates and everything else reads.
//!
//! ```text
//! <home>/            0700
//!   config.toml      0600  settings, every key commented (weft_node::config)
//!   node-key         0600  the node's Ed25519 key: 64 hex characters (its 32-byte seed)
//!   admin-token      0600  the RPC bearer token: 64 hex characters
//!   data/                  RocksDB
//!   weftd.lock             held (flock) by the running weftd; holds its pid
//!   rpc-addr               the RPC address the running weftd is bound to
//! ```
//!
//! The home is `--home`, else `$WEFT_HOME`, else `~/.weft`. Secrets live only in
//! files, never on the command line.

use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use weft_node::config::{ConfigError, Multiaddr, NodeConfig};
use weft_primitives::SecretKey;
use zeroize::Zeroizing;

/// Errors around the home directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HomeError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No home given and no `$HOME` to default to.
    #[error("no home directory: pass --home or set WEFT_HOME (HOME is not set)")]
    NoHome,
    /// The configuration file is bad.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A key or token file does not hold what it should.
    #[error("{path}: {reason}")]
    BadSecret {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `init` was asked to set a value the existing config.toml holds differently.
    #[error("{path} exists with {key} = {existing}, not {requested}; edit the file (or remove it to start over)")]
    ConfigConflict {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// Its value in the file.
        existing: String,
        /// The value asked for.
        requested: String,
    },
    /// Another weftd holds the home.
    #[error("another weftd{pid} is running on {home}; stop it first (two processes on one store would corrupt it)")]
    Locked {
        /// The home.
        home: PathBuf,
        /// ` (pid N)` if known.
        pid: String,
    },
    /// The home has not been initialized.
    #[error("{0} is not an initialized weft home (run `weftd init --home {0}`)")]
    NotInitialized(PathBuf),
    /// The home or a secret in it can be read (or entered) by users other than its owner.
    #[error("{path} is open to other users (mode {mode:04o}); refusing to use it: run `chmod {fix:o} {path}`")]
    Exposed {
        /// The directory or file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The mode to set.
        fix: u32,
    },
}

/// Refuses `path` if its group or others have any permission on it: the node key and the admin
/// token are as good as public on a shared machine otherwise.
fn owner_only(path: &Path, fix: u32) -> Result<(), HomeError> {
    let mode = fs::metadata(path).map_err(io(path))?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(HomeError::Exposed { path: path.to_path_buf(), mode, fix });
    }
    Ok(())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HomeError + '_ {
    move |source| HomeError::Io { path: path.to_path_buf(), source }
}

/// Overrides `weftd init` writes into a new config.toml.
#[derive(Clone, Debug, Default)]
pub struct InitOptions {
    /// `--rpc-listen`.
    pub rpc_listen: Option<SocketAddr>,
    /// `--p2p-listen` (repeatable; replaces the default list).
    pub p2p_listen: Vec<Multiaddr>,
    /// `--bootstrap` (repeatable).
    pub bootstrap: Vec<Multiaddr>,
}

/// What `init` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitReport {
    /// Files created (the rest existed and were kept).
    pub created: Vec<PathBuf>,
}

/// A node home directory.
#[derive(Clone, Debug)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// The home at `dir`, else `$WEFT_HOME` (clap fills `dir` from it), else `~/.weft`.
    pub fn resolve(dir: Option<PathBuf>) -> Result<Home, HomeError> {
        let root = match dir {
            Some(d) => d,
            None => PathBuf::from(std::env::var_os("HOME").ok_or(HomeError::NoHome)?).join(".weft"),
        };
        Ok(Home { root })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    /// `node-key`.
    pub fn key_path(&self) -> PathBuf {
        self.root.join("node-key")
    }
    /// `admin-token`.
    pub fn token_path(&self) -> PathBuf {
        self.root.join("admin-token")
    }
    /// `data/`, the RocksDB directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }
    /// `weftd.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("weftd.lock")
    }
    /// `rpc-addr`.
    pub fn rpc_addr_path(&self) -> PathBuf {
        self.root.join("rpc-addr")
    }

    /// Whether `init` has run here.
    pub fn is_initialized(&self) -> bool {
        self.config_path().exists() && self.key_path().exists() && self.token_path().exists()
    }

    /// Creates what is missing (directory 0700, node key and token 0600, config.toml with
    /// commented defaults and `options` applied) and keeps what exists. Running it again
    /// with the same options changes nothing; options that contradict an existing
    /// config.toml are an error naming the key.
    pub fn init(&self, options: &InitOptions) -> Result<InitReport, HomeError> {
        let mut report = InitReport::default();
        fs::create_dir_all(&self.root).map_err(io(&self.root))?;
        fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700)).map_err(io(&self.root))?;

        let key_path = self.key_path();
        if !key_path.exists() {
            write_secret(&key_path, &hex::encode(SecretKey::generate().to_bytes()))?;
            report.created.push(key_path);
        } else {
            self.load_key()?;
        }
        let token_path = self.token_path();
        if !token_path.exists() {
            let mut token = [0u8; 32];
            rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut token);
            write_secret(&token_path, &hex::encode(token))?;
            report.created.push(token_path);
        } else {
            self.load_token()?;
        }

        let config_path = self.config_path();
        if config_path.exists() {
            let existing = NodeConfig::load(&config_path)?;
            let conflict = |key: &'static str, existing: String, requested: String| HomeError::ConfigConflict {
                path: config_path.clone(),
                key,
                existing,
                requested,
            };
            if let Some(addr) = options.rpc_listen.filter(|a| *a != existing.rpc.listen) {
                return Err(conflict("rpc.listen", existing.rpc.listen.to_string(), addr.to_string()));
            }
            if !options.p2p_listen.is_empty() && options.p2p_listen != existing.p2p.listen {
                return Err(conflict("p2p.listen", list(&existing.p2p.listen), list(&options.p2p_listen)));
            }
            if !options.bootstrap.is_empty() && options.bootstrap != existing.p2p.bootstrap {
                return Err(conflict("p2p.bootstrap", list(&existing.p2p.bootstrap), list(&options.bootstrap)));
            }
        } else {
            let mut config = NodeConfig::default();
            if let Some(addr) = options.rpc_listen {
                config.rpc.listen = addr;
            }
            if !options.p2p_listen.is_empty() {
                config.p2p.listen = options.p2p_listen.clone();
            }
            config.p2p.bootstrap = options.bootstrap.clone();
            config.validate(&config_path)?;
            write_secret(&config_path, &config.render())?;
            report.created.push(config_path);
        }
        Ok(report)
    }

    /// Reads and validates config.toml.
    pub fn load_config(&self) -> Result<NodeConfig, HomeError> {
        let path = self.config_path();
        if !path.exists() {
            return Err(HomeError::NotInitialized(self.root.clone()));
        }
        Ok(NodeConfig::load(&path)?)
    }

    /// Reads the node key.
    pub fn load_key(&self) -> Result<SecretKey, HomeError> {
        let path = self.key_path();
        let text = read_secret(&path)?;
        // The text and the seed are wiped when dropped, on error too.
        let mut seed = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(text.trim(), seed.as_mut()).map_err(|e| HomeError::BadSecret {
            path: path.clone(),
            reason: format!("expected 64 hex characters (an Ed25519 seed): {e}"),
        })?;
        Ok(SecretKey::from_bytes(&seed))
    }

    /// Reads the admin token.
    pub fn load_token(&self) -> Result<String, HomeError> {
        let path = self.token_path();
        let token = read_secret(&path)?.trim().to_string();
        if token.len() < 32 || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(HomeError::BadSecret {
                path,
                reason: "expected a token of at least 32 printable characters".into(),
            });
        }
        Ok(token)
    }

    /// Takes the home's lock for this process: refuses if another weftd (or backup/inspect)
    /// holds it. Released when the returned guard is dropped.
    pub fn lock(&self) -> Result<HomeLock, HomeError> {
        if !self.config_path().exists() {
            return Err(HomeError::NotInitialized(self.root.clone()));
        }
        owner_only(&self.root, 0o700)?;
        let path = self.lock_path();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))?;
        match fs4::FileExt::try_lock(&file) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(HomeError::Locked {
                    home: self.root.clone(),
                    pid: if pid.is_empty() { String::new() } else { format!(" (pid {pid})") },
                });
            }
            Err(fs4::TryLockError::Error(source)) => return Err(HomeError::Io { path, source }),
        }
        file.set_len(0).map_err(io(&path))?;
        write!(file, "{}", std::process::id()).map_err(io(&path))?;
        Ok(HomeLock { _file: file })
    }
}

fn list(addrs: &[Multiaddr]) -> String {
    format!("[{}]", addrs.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", "))
}

/// Writes a new owner-only (0600) file.
pub fn write_secret(path: &Path, text: &str) -> Result<(), HomeError> {
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io(path))?;
    file.write_all(text.as_bytes()).map_err(io(path))?;
    if !text.ends_with('\n') {
        file.write_all(b"\n").map_err(io(path))?;
    }
    file.sync_all().map_err(io(path))
}

/// Reads a secret file (owner-only, or refused) into a buffer wiped when dropped.
fn read_secret(path: &Path) -> Result<Zeroizing<String>, HomeError> {
    owner_only(path, 0o600)?;
    fs::read_to_string(path).map(Zeroizing::new).map_err(io(path))
}

/// The home's lock, held while this guard lives.
pub struct HomeLock {
    _file: File,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn init_is_owner_only_and_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home { root: dir.path().join("h") };
        let options = InitOptions { rpc_listen: Some("127.0.0.1:0".parse().unwrap()), ..InitOptions::default() };
        let first = home.init(&options).unwrap();
        assert_eq!(first.created.len(), 3);
        assert_eq!(mode(home.root()), 0o700);
        for f in [home.key_path(), home.token_path(), home.config_path()] {
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        let key = home.load_key().unwrap().public_key();
        let token = home.load_token().unwrap();
        assert_eq!(home.init(&options).unwrap().created.len(), 0);
        assert_eq!(home.load_key().unwrap().public_key(), key);
        assert_eq!(home.load_token().unwrap(), token);
        assert_eq!(home.load_config().unwrap().rpc.listen.port(), 0);
    }

    #[test]
    fn init_refuses_to_contradict_an_existing_config() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home { root: dir.path().to_path_buf() };
        home.init(&InitOptions::default()).unwrap();
        let err = home
            .init(&InitOptions { rpc_listen: Some("127.0.0.1:9".parse().unwrap()), ..InitOptions::default() })
            .unwrap_err();
        assert!(matches!(err, HomeError::ConfigConflict { key: "rpc.listen", .. }), "{err}");
    }

    #[test]
    fn a_second_lock_is_refused_with_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home { root: dir.path().to_path_buf() };
        home.init(&InitOptions::default()).unwrap();
        let guard = home.lock().unwrap();
        let err = home.lock().err().unwrap().to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(guard);
        home.lock().unwrap();
    }

    #[test]
    fn a_corrupt_key_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home { root: dir.path().to_path_buf() };
        home.init(&InitOptions::default()).unwrap();
        fs::write(home.key_path(), "zz").unwrap();
        let err = home.load_key().err().unwrap();
        assert!(matches!(err, HomeError::BadSecret { .. }), "{err}");
    }

    #[test]
    fn secrets_and_a_home_open_to_others_are_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home { root: dir.path().join("h") };
        home.init(&InitOptions::default()).unwrap();
        type Load = fn(&Home) -> Result<(), HomeError>;
        let loads: [(PathBuf, Load); 2] =
            [(home.key_path(), |h| h.load_key().map(drop)), (home.token_path(), |h| h.load_token().map(drop))];
        for (path, load) in loads {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
            let err = load(&home).unwrap_err();
            assert!(matches!(err, HomeError::Exposed { mode: 0o640, fix: 0o600, .. }), "{err}");
            assert!(err.to_string().contains(&format!("chmod 600 {}", path.display())), "{err}");
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            load(&home).unwrap();
        }
        fs::set_permissions(home.root(), fs::Permissions::from_mode(0o755)).unwrap();
        let err = home.lock().err().unwrap();
        assert!(err.to_string().contains(&format!("chmod 700 {}", home.root().display())), "{err}");
    }
}
