//! Governance vocabulary: member roles, capability bitmasks, upgrade policies.

use std::fmt;
use std::ops::BitOr;
use std::str::FromStr;

use borsh::{BorshDeserialize, BorshSerialize};

use crate::{RoleParseError, UpgradePolicyParseError};

/// A member's role in a group. Admins pass every capability check; a group
/// must always keep at least one.
///
/// Borsh-encoded as the explicit discriminant byte, so reordering the variants
/// cannot silently change stored data.
#[derive(BorshSerialize, BorshDeserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[borsh(use_discriminant = true)]
#[repr(u8)]
pub enum Role {
    /// Full control of the group.
    Admin = 0,
    /// An ordinary member, limited by its capabilities.
    Member = 1,
    /// May read the group's contexts but not write them.
    ReadOnly = 2,
}

/// The value stored under a group-member key (prefix 0x21).
pub type GroupMemberRole = Role;

impl Role {
    /// The stable lowercase name used in the API and CLI.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
            Role::ReadOnly => "read_only",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = RoleParseError;

    /// Parses the names produced by [`Role::as_str`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Role::Admin, Role::Member, Role::ReadOnly]
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| RoleParseError::Unknown { input: s.to_owned() })
    }
}

/// A set of member capabilities, a bitmask Borsh-encoded as its `u32`.
///
/// Unknown bits survive decoding (so a newer peer's data round-trips) and can
/// be rejected with [`is_valid`](Self::is_valid) where it matters.
#[derive(BorshSerialize, BorshDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(pub u32);

impl Capabilities {
    /// Create contexts in the group.
    pub const CREATE_CONTEXT: Self = Self(0x1);
    /// Invite new members.
    pub const INVITE_MEMBERS: Self = Self(0x2);
    /// Join subgroups that are open to the parent's members.
    pub const JOIN_OPEN_SUBGROUPS: Self = Self(0x4);
    /// Add and remove members and change their roles and capabilities.
    pub const MANAGE_MEMBERS: Self = Self(0x8);
    /// Change the group's target application (start upgrades).
    pub const MANAGE_APPLICATION: Self = Self(0x10);
    /// Create subgroups.
    pub const CREATE_SUBGROUP: Self = Self(0x20);
    /// Delete subgroups.
    pub const DELETE_SUBGROUP: Self = Self(0x40);
    /// Change which subgroups and contexts are visible to whom.
    pub const MANAGE_VISIBILITY: Self = Self(0x80);
    /// Set aliases and other metadata.
    pub const MANAGE_METADATA: Self = Self(0x100);
    /// The empty set.
    pub const NONE: Self = Self(0);
    /// Every capability defined above.
    pub const ALL: Self = Self(0x1ff);

    /// Whether every capability in `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Capabilities in either set.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Capabilities in `self` but not in `other`.
    pub const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// Whether no unknown bits are set.
    pub const fn is_valid(self) -> bool {
        Self::ALL.contains(self)
    }
}

impl BitOr for Capabilities {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

/// How a group's contexts follow a change of its target application.
#[derive(BorshSerialize, BorshDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UpgradePolicy {
    /// Every context follows the target as soon as it changes; the default.
    #[default]
    Automatic,
    /// The target changes, and each context moves to it when a member holding
    /// `MANAGE_APPLICATION` moves it (`ContextUpgraded`).
    Manual,
    /// The application is pinned; the target cannot change.
    Frozen,
}

impl UpgradePolicy {
    /// The stable lowercase name used in the API and CLI.
    pub const fn as_str(self) -> &'static str {
        match self {
            UpgradePolicy::Automatic => "automatic",
            UpgradePolicy::Manual => "manual",
            UpgradePolicy::Frozen => "frozen",
        }
    }
}

impl fmt::Display for UpgradePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for UpgradePolicy {
    type Err = UpgradePolicyParseError;

    /// Parses the names produced by [`UpgradePolicy::as_str`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [UpgradePolicy::Automatic, UpgradePolicy::Manual, UpgradePolicy::Frozen]
            .into_iter()
            .find(|policy| policy.as_str() == s)
            .ok_or_else(|| UpgradePolicyParseError::Unknown { input: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_round_trip() {
        for role in [Role::Admin, Role::Member, Role::ReadOnly] {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
            assert_eq!(role.to_string(), role.as_str());
        }
        assert_eq!("Admin".parse::<Role>(), Err(RoleParseError::Unknown { input: "Admin".into() }));
    }

    #[test]
    fn capability_set_algebra() {
        let all = [
            Capabilities::CREATE_CONTEXT,
            Capabilities::INVITE_MEMBERS,
            Capabilities::JOIN_OPEN_SUBGROUPS,
            Capabilities::MANAGE_MEMBERS,
            Capabilities::MANAGE_APPLICATION,
            Capabilities::CREATE_SUBGROUP,
            Capabilities::DELETE_SUBGROUP,
            Capabilities::MANAGE_VISIBILITY,
            Capabilities::MANAGE_METADATA,
        ]
        .into_iter()
        .fold(Capabilities::NONE, BitOr::bitor);
        assert_eq!(all, Capabilities::ALL);

        let some = Capabilities::CREATE_CONTEXT | Capabilities::MANAGE_MEMBERS;
        assert!(some.contains(Capabilities::MANAGE_MEMBERS));
        assert!(some.contains(Capabilities::NONE));
        assert!(!some.contains(Capabilities::ALL));
        assert_eq!(some.difference(Capabilities::MANAGE_MEMBERS), Capabilities::CREATE_CONTEXT);
        assert!(Capabilities::ALL.is_valid());
        assert!(!Capabilities(0x200).is_valid());
        assert_eq!(Capabilities::default(), Capabilities::NONE);
    }

    #[test]
    fn default_upgrade_policy_is_automatic() {
        assert_eq!(UpgradePolicy::default(), UpgradePolicy::Automatic);
        for policy in [UpgradePolicy::Automatic, UpgradePolicy::Manual, UpgradePolicy::Frozen] {
            assert_eq!(policy.as_str().parse::<UpgradePolicy>(), Ok(policy));
        }
        assert!("Manual".parse::<UpgradePolicy>().is_err());
    }
}
