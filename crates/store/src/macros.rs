//! The key-family declaration macro, [`keys!`](crate::keys).
//!
//! One table declares every family of a column set: its name, column, optional
//! prefix byte, segments and value codec. The macro generates the key struct, its
//! [`AsKeyParts`](crate::AsKeyParts) / [`FromKeyParts`](crate::FromKeyParts)
//! impls (sizes computed with `typenum`, offsets computed by the macro, never by
//! hand), typed [`PrefixBy`](crate::PrefixBy) constructors for every proper
//! leading run of segments, and a compile-time check that no two families of one
//! column share a prefix byte and that an unprefixed family owns its column alone.

/// Declares a table of key families.
///
/// ```
/// use weft_store::{columns, keys, BorshCodec, ColumnOptions, Raw, Text};
/// columns! {
///     /// Columns.
///     pub enum Cols: version 1, meta Meta {
///         /// Meta.
///         Meta => "meta", ColumnOptions::point();
///         /// Things, partitioned by prefix byte.
///         Things => "things", ColumnOptions::point_and_scan(9);
///     }
/// }
/// keys! {
///     columns Cols;
///     /// A counter per user.
///     pub struct Counter in Things [0x01] { user: u64 } => BorshCodec<u64>;
///     /// Tags of a user, in tag order.
///     pub struct Tag in Things [0x02] { user: u64 ; tag: Text } => Raw;
/// }
/// ```
#[macro_export]
macro_rules! keys {
    (
        columns $cols:ident;
        $(
            $(#[$meta:meta])*
            $vis:vis struct $name:ident in $col:ident $([$prefix:literal])?
                { $($f:ident : $t:ty),* $(; $($tf:ident : $tt:ty),+ )? } => $codec:ty;
        )+
    ) => {
        $(
            $crate::__key_family! {
                $(#[$meta])* $vis $name, $cols, $col, [$($prefix)?],
                [$($f : $t),*], [$($($tf : $tt),+)?], $codec
            }
        )+

        const _: () = {
            // (column index, prefix byte or -1, family name)
            let table: &[(usize, i16, &str)] = &[
                $( ($cols::$col as usize, $crate::__prefix_or_none!($($prefix)?), stringify!($name)), )+
            ];
            let mut i = 0;
            while i < table.len() {
                let mut j = i + 1;
                while j < table.len() {
                    if table[i].0 == table[j].0 {
                        if table[i].1 < 0 || table[j].1 < 0 {
                            panic!("an unprefixed key family must own its column alone");
                        }
                        if table[i].1 == table[j].1 {
                            panic!("two key families in one column share a prefix byte");
                        }
                    }
                    j += 1;
                }
                i += 1;
            }
        };
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __prefix_or_none {
    () => {
        -1i16
    };
    ($p:literal) => {
        $p as i16
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __size_of_segments {
    () => { $crate::typenum::U0 };
    ($t:ty $(, $rest:ty)*) => {
        $crate::typenum::Sum<<$t as $crate::FixedSegment>::Size, $crate::__size_of_segments!($($rest),*)>
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __prefix_size {
    () => {
        $crate::typenum::U0
    };
    ($p:literal) => {
        $crate::typenum::U1
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __has_tail {
    () => {
        false
    };
    ($($tf:ident)+) => {
        true
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __key_family {
    (
        $(#[$meta:meta])* $vis:vis $name:ident, $cols:ident, $col:ident, [$($prefix:literal)?],
        [$($f:ident : $t:ty),*], [$($tf:ident : $tt:ty),*], $codec:ty
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name {
            $( #[doc = concat!("Key segment `", stringify!($f), "` (fixed width).")] pub $f: $t, )*
            $( #[doc = concat!("Key segment `", stringify!($tf), "` (variable width).")] pub $tf: $tt, )*
        }

        impl $crate::AsKeyParts for $name {
            type Columns = $cols;
            type Size = $crate::typenum::Sum<$crate::__prefix_size!($($prefix)?), $crate::__size_of_segments!($($t),*)>;
            type Codec = $codec;
            const COLUMN: $cols = $cols::$col;
            const PREFIX: Option<u8> = $crate::__option_prefix!($($prefix)?);
            const FAMILY: &'static str = stringify!($name);
            const HAS_TAIL: bool = $crate::__has_tail!($($tf)*);

            #[inline]
            #[allow(unused_mut, unused_variables, unused_assignments)]
            fn as_key(&self) -> $crate::Key<Self> {
                let mut arr = $crate::generic_array::GenericArray::<u8, Self::Size>::default();
                let mut rest: &mut [u8] = arr.as_mut_slice();
                $(
                    let (head, tail) = ::core::mem::take(&mut rest).split_at_mut(1);
                    head.copy_from_slice(&[$prefix]);
                    rest = tail;
                )?
                $(
                    let (seg, tail) = ::core::mem::take(&mut rest)
                        .split_at_mut(<$t as $crate::FixedSegment>::LEN);
                    $crate::FixedSegment::write(&self.$f, seg);
                    rest = tail;
                )*
                $crate::Key(arr)
            }

            #[inline]
            #[allow(unused_variables)]
            fn write_tail(&self, out: &mut Vec<u8>) {
                $( $crate::KeySegment::encode(&self.$tf, out); )*
            }
        }

        impl $crate::FromKeyParts for $name {
            #[inline]
            #[allow(unused_mut)]
            fn from_key_bytes(bytes: &[u8]) -> Result<Self, $crate::KeyError> {
                let head = <Self as $crate::AsKeyParts>::head_len();
                let has_tail = <Self as $crate::AsKeyParts>::HAS_TAIL;
                if bytes.len() < head || (!has_tail && bytes.len() != head) {
                    return Err($crate::KeyError::Length {
                        family: stringify!($name),
                        expected: head,
                        found: bytes.len(),
                    });
                }
                let mut input = bytes;
                $(
                    match input.split_first() {
                        Some((first, rest)) if *first == $prefix => input = rest,
                        Some((first, _)) => {
                            return Err($crate::KeyError::Prefix {
                                family: stringify!($name),
                                expected: $prefix,
                                found: *first,
                            })
                        }
                        None => {
                            return Err($crate::KeyError::Length {
                                family: stringify!($name),
                                expected: head,
                                found: 0,
                            })
                        }
                    }
                )?
                $( let $f = <$t as $crate::KeySegment>::decode(&mut input)?; )*
                $( let $tf = <$tt as $crate::KeySegment>::decode(&mut input)?; )*
                if !input.is_empty() {
                    return Err($crate::KeyError::Trailing(input.len()));
                }
                Ok(Self { $($f,)* $($tf,)* })
            }
        }

        $crate::__prefix_impls!($name, [$($prefix)?], []; $($f : $t,)* $($tf : $tt,)*);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __option_prefix {
    () => {
        None
    };
    ($p:literal) => {
        Some($p)
    };
}

/// Emits a `PrefixBy` impl for each proper leading run of segments.
#[doc(hidden)]
#[macro_export]
macro_rules! __prefix_impls {
    // At least one more segment after `$nf`: the run done + nf is a proper prefix.
    ($name:ident, [$($prefix:literal)?], [$($df:ident : $dt:ty),*]; $nf:ident : $nt:ty, $rf:ident : $rt:ty, $($more:tt)*) => {
        $crate::__prefix_impl!($name, [$($prefix)?], $($df : $dt,)* $nf : $nt);
        $crate::__prefix_impls!($name, [$($prefix)?], [$($df : $dt,)* $nf : $nt]; $rf : $rt, $($more)*);
    };
    ($name:ident, [$($prefix:literal)?], [$($df:ident : $dt:ty),*]; $($last:tt)*) => {};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __prefix_impl {
    ($name:ident, [$($prefix:literal)?], $f:ident : $t:ty) => {
        impl<'a> $crate::PrefixBy<&'a $t> for $name {
            fn prefix($f: &'a $t) -> $crate::Prefix<Self> {
                let mut out = Vec::with_capacity(<Self as $crate::AsKeyParts>::head_len());
                $( out.push($prefix); )?
                $crate::KeySegment::encode($f, &mut out);
                $crate::Prefix::from_raw(out)
            }
        }
    };
    ($name:ident, [$($prefix:literal)?], $($f:ident : $t:ty),+) => {
        impl<'a> $crate::PrefixBy<($(&'a $t,)+)> for $name {
            fn prefix(($($f,)+): ($(&'a $t,)+)) -> $crate::Prefix<Self> {
                let mut out = Vec::with_capacity(<Self as $crate::AsKeyParts>::head_len());
                $( out.push($prefix); )?
                $( $crate::KeySegment::encode($f, &mut out); )+
                $crate::Prefix::from_raw(out)
            }
        }
    };
}
