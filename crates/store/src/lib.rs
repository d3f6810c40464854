//! # weft-store
//!
//! weft's typed-key storage layer: RocksDB (or memory) underneath, typed key
//! families on top. A program declares a column set with [`columns!`] and its
//! key families with [`keys!`]; every read and write is then typed by its key:
//! the column is resolved at compile time, the key's fixed head is a
//! `GenericArray` sized at compile time, and values use the family's codec
//! (Borsh by default, raw bytes where the application owns the encoding).
//!
//! The node's own schema (seed 002: eleven columns, the Group column's prefix
//! bytes 0x20–0x3B) is [`schema`], one column set among others.
//!
//! ```
//! use weft_store::schema::{Column, GroupMember};
//! use weft_store::{MemoryBackend, PrefixBy, Read, Store};
//! use weft_primitives::{GroupId, PublicKey, Role};
//!
//! let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
//! let group = GroupId::from_bytes([7; 32]);
//! let alice = GroupMember { group_id: group, identity: PublicKey::from_bytes([1; 32]) };
//! store.put(&alice, &Role::Admin).unwrap();
//! let members = store.scan(GroupMember::prefix(&group)).collect_all().unwrap();
//! assert_eq!(members, vec![(alice, Role::Admin)]);
//! ```

pub mod backend;
pub mod codec;
pub mod column;
pub mod error;
pub mod key;
mod macros;
pub mod schema;
pub mod segment;
pub mod store;

pub use backend::memory::MemoryBackend;
pub use backend::rocks::{Durability, RocksBackend, RocksConfig, WalSyncHealth};
pub use backend::{Backend, RawRead};
pub use codec::{BorshCodec, Raw, Unit, ValueCodec};
pub use column::{__const_str_eq, Access, ColumnOptions, ColumnSet};
pub use error::{BackendError, BackendErrorKind, DecodeError, KeyError, Result, StoreError};
pub use key::{AsKeyParts, FromKeyParts, Key, OwnedValueOf, Prefix, PrefixBy, ValueOf};
pub use segment::{Bytes, FixedSegment, KeySegment, RawTail, Text};
pub use store::{
    Migration, OwnedSnapshot, Page, Read, Scan, ScanIter, Snapshot, Store, WriteBatch, SCHEMA_VERSION_KEY,
};

#[doc(hidden)]
pub use generic_array;
#[doc(hidden)]
pub use typenum;

/// The node's store on RocksDB.
pub type NodeStore = Store<RocksBackend, schema::Column>;
