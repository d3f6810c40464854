//! Column sets: the families of a store and each one's tuning.
//!
//! A [`ColumnSet`] is a fieldless enum (declared with [`columns!`](crate::columns))
//! whose variants are the store's column families. Each variant has a stable
//! on-disk name — renaming the Rust variant never orphans data — and a backend-
//! neutral [`ColumnOptions`] that the RocksDB backend turns into per-family options.
//! The node's eleven columns ([`crate::schema::Column`]) are one such set; an
//! embedding program declares its own.

use std::fmt::Debug;
use std::sync::Arc;

/// A store's set of column families.
pub trait ColumnSet: Copy + Eq + Debug + Send + Sync + 'static {
    /// Every column, in declaration order (`ALL[c.index()] == c`).
    const ALL: &'static [Self];
    /// The column that holds the schema version row (the single byte key `0x00`).
    const META: Self;
    /// The schema version this program writes; stores at an older version are migrated
    /// at open, stores at a newer one are refused.
    const SCHEMA_VERSION: u32;
    /// The stable on-disk name of the column family.
    fn name(self) -> &'static str;
    /// The position of the column in [`ColumnSet::ALL`].
    fn index(self) -> usize;
    /// The column's tuning.
    fn options(self) -> ColumnOptions;
}

/// Decides at compaction whether a row survives: `true` keeps it. Receives the key and value.
pub type CompactionFilter = Arc<dyn Fn(&[u8], &[u8]) -> bool + Send + Sync>;

/// Combines an existing value with merge operands, oldest first; `None` fails the merge.
pub type MergeOperator = Arc<dyn Fn(&[u8], Option<&[u8]>, &[&[u8]]) -> Option<Vec<u8>> + Send + Sync>;

/// How the value of a column is read most: decides filters and block layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Mostly point lookups of whole keys: whole-key bloom/ribbon filter.
    Point,
    /// Mostly prefix scans: prefix filters only (needs a fixed prefix length).
    Scan,
    /// Both: whole-key and prefix filters.
    PointAndScan,
}

/// Backend-neutral tuning of one column family.
#[derive(Clone)]
pub struct ColumnOptions {
    /// The dominant access pattern.
    pub access: Access,
    /// Every key starts with a fixed-length prefix of this many bytes (context id,
    /// group prefix byte plus group id, ...): enables a fixed prefix extractor and
    /// prefix filters. Scans shorter than the prefix fall back to total-order seeks.
    pub prefix_len: Option<usize>,
    /// Values of at least this many bytes go to blob files (key-value separation).
    pub blob_min_size: Option<u64>,
    /// Bits per key of the (ribbon) filter; 0 disables filters.
    pub filter_bits_per_key: f64,
    /// Drops rows at compaction (expiry, for instance).
    pub compaction_filter: Option<CompactionFilter>,
    /// An associative merge operator.
    pub merge: Option<MergeOperator>,
}

impl Debug for ColumnOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnOptions")
            .field("access", &self.access)
            .field("prefix_len", &self.prefix_len)
            .field("blob_min_size", &self.blob_min_size)
            .field("filter_bits_per_key", &self.filter_bits_per_key)
            .field("compaction_filter", &self.compaction_filter.is_some())
            .field("merge", &self.merge.is_some())
            .finish()
    }
}

impl ColumnOptions {
    /// A column read by point lookups.
    pub fn point() -> Self {
        ColumnOptions {
            access: Access::Point,
            prefix_len: None,
            blob_min_size: None,
            filter_bits_per_key: 10.0,
            compaction_filter: None,
            merge: None,
        }
    }

    /// A column read by scans of a fixed-length prefix.
    pub fn scan(prefix_len: usize) -> Self {
        ColumnOptions { access: Access::Scan, prefix_len: Some(prefix_len), ..Self::point() }
    }

    /// A column read both ways, with a fixed-length prefix.
    pub fn point_and_scan(prefix_len: usize) -> Self {
        ColumnOptions { access: Access::PointAndScan, prefix_len: Some(prefix_len), ..Self::point() }
    }

    /// Sends values of at least `min_size` bytes to blob files.
    pub fn blobs(mut self, min_size: u64) -> Self {
        self.blob_min_size = Some(min_size);
        self
    }

    /// Installs a compaction filter.
    pub fn compaction_filter(mut self, f: impl Fn(&[u8], &[u8]) -> bool + Send + Sync + 'static) -> Self {
        self.compaction_filter = Some(Arc::new(f));
        self
    }

    /// Installs an associative merge operator.
    pub fn merge(
        mut self,
        f: impl Fn(&[u8], Option<&[u8]>, &[&[u8]]) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        self.merge = Some(Arc::new(f));
        self
    }
}

/// Declares a column set: a fieldless enum plus its [`ColumnSet`] impl.
///
/// ```
/// weft_store::columns! {
///     /// My program's columns.
///     pub enum MyColumns: version 1, meta Meta {
///         /// Small bookkeeping rows.
///         Meta => "meta", weft_store::ColumnOptions::point();
///         /// Posts by author.
///         Posts => "posts", weft_store::ColumnOptions::scan(16);
///     }
/// }
/// ```
#[macro_export]
macro_rules! columns {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : version $version:literal, meta $metacol:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $disk:literal, $opts:expr; )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $crate::ColumnSet for $name {
            const ALL: &'static [Self] = &[ $( $name::$variant, )+ ];
            const META: Self = $name::$metacol;
            const SCHEMA_VERSION: u32 = $version;
            fn name(self) -> &'static str {
                match self { $( $name::$variant => $disk, )+ }
            }
            fn index(self) -> usize {
                self as usize
            }
            fn options(self) -> $crate::ColumnOptions {
                match self { $( $name::$variant => $opts, )+ }
            }
        }

        const _: () = {
            // On-disk names must be unique: two variants sharing one would share data.
            let names: &[&str] = &[ $( $disk, )+ ];
            let mut i = 0;
            while i < names.len() {
                let mut j = i + 1;
                while j < names.len() {
                    if $crate::__const_str_eq(names[i], names[j]) {
                        panic!("two columns share one on-disk name");
                    }
                    j += 1;
                }
                i += 1;
            }
        };
    };
}

/// Compile-time string equality for the declaration macros.
#[doc(hidden)]
pub const fn __const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
