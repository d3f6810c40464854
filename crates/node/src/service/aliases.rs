//! Node-local aliases (issue 26 item 3): names this node's operator gives its contexts,
//! applications and identities, kept in the Alias column and never replicated (the group
//! aliases at 0x2D–0x2F are governance's, and replicate).
//!
//! A row is `AliasKey { kind, scope: LOCAL_ALIAS_SCOPE, name }` → the 32-byte id: one name
//! names one id per scope (kind); an id may have several names. The RPC server resolves
//! every param that takes a context, application or identity id through
//! [`NodeService::local_alias`] before the method runs (`rpc/aliases.rs`), under one rule:
//!
//! - a string that parses as an id (64 hex characters) **is** that id, never an alias;
//! - any other string is looked up as a local alias of the param's scope;
//! - so an alias that parses as an id is refused when it is set ([`check_alias`]), and the
//!   two can never be confused.
//!
//! Setting a name that names another id already is a conflict (remove it first); setting it
//! again to the same id is a no-op. Setting checks that the context or application exists
//! here (an identity is any 32-byte public key: other nodes' identities are named too).
//! Nothing removes an alias on its own: an alias of a deleted context resolves to its id,
//! and the method then answers "unknown context", as it would for the id.

use weft_primitives::{ApplicationId, ApplicationMeta, ContextId, GroupId, Hash, OpId};
use weft_store::schema::{alias_kind, AliasKey, LOCAL_ALIAS_SCOPE};
use weft_store::{Backend, Prefix, PrefixBy, Read, Text};

use super::{AliasScope, NodeService, ServiceError};

/// The longest local alias, in bytes.
pub const MAX_ALIAS_LEN: usize = 64;

/// What a node-local alias names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LocalScope {
    /// A context.
    Context,
    /// An application.
    Application,
    /// An identity (a public key).
    Identity,
}

impl LocalScope {
    /// Every scope, in the order of their rows.
    pub const ALL: [LocalScope; 3] = [LocalScope::Context, LocalScope::Application, LocalScope::Identity];

    /// The `kind` segment of its rows.
    pub fn kind(self) -> u8 {
        match self {
            LocalScope::Context => alias_kind::CONTEXT,
            LocalScope::Application => alias_kind::APPLICATION,
            LocalScope::Identity => alias_kind::IDENTITY,
        }
    }

    /// The scope whose rows have `kind`.
    pub fn from_kind(kind: u8) -> Option<LocalScope> {
        LocalScope::ALL.into_iter().find(|s| s.kind() == kind)
    }

    /// Its name on the wire: `context`, `application`, `identity`.
    pub fn as_str(self) -> &'static str {
        match self {
            LocalScope::Context => "context",
            LocalScope::Application => "application",
            LocalScope::Identity => "identity",
        }
    }

    /// The scope named `name` (as [`LocalScope::as_str`] writes it).
    pub fn parse(name: &str) -> Option<LocalScope> {
        LocalScope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// A node-local alias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalAlias {
    /// What it names.
    pub scope: LocalScope,
    /// The name.
    pub alias: String,
    /// The id it names.
    pub id: [u8; 32],
}

/// A page of local aliases, and the position of its last one when more follow.
pub type LocalAliasPage = (Vec<LocalAlias>, Option<(LocalScope, String)>);

/// Whether `name` may be a local alias: 1 to [`MAX_ALIAS_LEN`] bytes of UTF-8, no control
/// characters, no whitespace at either end, and not something that parses as an id.
pub fn check_alias(name: &str) -> Result<(), ServiceError> {
    let refuse = |why: &str| Err(ServiceError::BadInput(format!("alias: {why}")));
    if name.is_empty() {
        return refuse("must not be empty");
    }
    if name.len() > MAX_ALIAS_LEN {
        return refuse(&format!("is {} bytes, more than {MAX_ALIAS_LEN}", name.len()));
    }
    if name.chars().any(char::is_control) {
        return refuse("must not hold control characters");
    }
    if name.trim() != name {
        return refuse("must not start or end with whitespace");
    }
    if is_id(name) {
        return refuse(&format!("{name:?} parses as an id, and a string that parses as an id is always that id"));
    }
    Ok(())
}

/// Whether `text` parses as a 32-byte id (64 hex characters, either case): then it is an id
/// wherever an id or an alias is accepted.
pub fn is_id(text: &str) -> bool {
    text.parse::<Hash>().is_ok()
}

fn key(scope: LocalScope, alias: &str) -> AliasKey {
    AliasKey { kind: scope.kind(), scope: LOCAL_ALIAS_SCOPE, name: Text(alias.to_string()) }
}

impl<B: Backend> NodeService<B> {
    /// Names `id` `alias` in `scope` on this node. Refuses a malformed alias (see
    /// [`check_alias`]), an unknown context or application, and a name that names another
    /// id already; the same name for the same id again is a no-op.
    pub fn local_alias_set(&self, scope: LocalScope, alias: &str, id: [u8; 32]) -> Result<(), ServiceError> {
        check_alias(alias)?;
        match scope {
            LocalScope::Context => self.require_context(&ContextId::from_bytes(id))?,
            LocalScope::Application => {
                self.application(Some(ApplicationId::from_bytes(id)))?;
            }
            LocalScope::Identity => {}
        }
        let key = key(scope, alias);
        if self.store().put_if_absent(&key, &id)? {
            return Ok(());
        }
        match self.store().get(&key)? {
            Some(existing) if existing == id => Ok(()),
            // Removed since: take it now (once; a name fought over is a conflict).
            None if self.store().put_if_absent(&key, &id)? => Ok(()),
            _ => Err(ServiceError::Conflict { what: "alias", id: format!("{} {alias:?}", scope.as_str()) }),
        }
    }

    /// One installed application's record (`app_get`).
    pub fn app_get(&self, application_id: &ApplicationId) -> Result<ApplicationMeta, ServiceError> {
        self.application(Some(*application_id))
    }

    /// The id `alias` names in `scope` on this node, if it names one.
    pub fn local_alias(&self, scope: LocalScope, alias: &str) -> Result<Option<[u8; 32]>, ServiceError> {
        if alias.is_empty() || alias.len() > MAX_ALIAS_LEN {
            return Ok(None);
        }
        Ok(self.store().get(&key(scope, alias))?)
    }

    /// [`NodeService::local_alias`], or an unknown alias (not found).
    pub fn local_alias_resolve(&self, scope: LocalScope, alias: &str) -> Result<[u8; 32], ServiceError> {
        if alias.is_empty() {
            return Err(ServiceError::BadInput("alias: must not be empty".into()));
        }
        self.local_alias(scope, alias)?
            .ok_or_else(|| ServiceError::NotFound { what: "alias", id: format!("{} {alias:?}", scope.as_str()) })
    }

    /// Removes a local alias; an unknown one is not found (nothing changes).
    pub fn local_alias_remove(&self, scope: LocalScope, alias: &str) -> Result<(), ServiceError> {
        self.local_alias_resolve(scope, alias)?;
        self.store().delete(&key(scope, alias))?;
        Ok(())
    }

    /// A page of the local aliases (of `scope`, or of every scope) in the order of their rows
    /// — by scope (context, application, identity), then by name bytewise — strictly after
    /// `start_after`, at most `limit` long, and the last one's position when more follow.
    pub fn local_alias_page(
        &self,
        scope: Option<LocalScope>,
        start_after: Option<(LocalScope, &str)>,
        limit: usize,
    ) -> Result<LocalAliasPage, ServiceError> {
        let prefix = match scope {
            Some(s) => AliasKey::prefix((&s.kind(), &LOCAL_ALIAS_SCOPE)),
            None => Prefix::<AliasKey>::family(),
        };
        let mut scan = self.store().scan(prefix).limit(limit);
        if let Some((s, alias)) = start_after {
            scan = scan.after(&key(s, alias));
        }
        let page = scan.page()?;
        let mut aliases = Vec::with_capacity(page.rows.len());
        for (k, id) in page.rows {
            let scope = LocalScope::from_kind(k.kind)
                .filter(|_| k.scope == LOCAL_ALIAS_SCOPE)
                .ok_or_else(|| ServiceError::Internal(format!("an Alias row of unknown kind {}", k.kind).into()))?;
            aliases.push(LocalAlias { scope, alias: k.name.0, id });
        }
        let next = match page.next {
            Some(k) => {
                let scope = LocalScope::from_kind(k.kind)
                    .ok_or_else(|| ServiceError::Internal(format!("an Alias row of unknown kind {}", k.kind).into()))?;
                Some((scope, k.name.0))
            }
            None => None,
        };
        Ok((aliases, next))
    }
}

/// A replicated alias (a group's, a context's in its group, a member's in a group), as the
/// governance fold holds it (Group column 0x2D–0x2F).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupAliasEntry {
    /// What it names.
    pub scope: AliasScope,
    /// The group it lives in.
    pub group_id: GroupId,
    /// The name.
    pub alias: String,
    /// The id it names (the group itself for a group's alias).
    pub id: [u8; 32],
}

/// The order replicated aliases are listed in: group, context, member.
pub fn scope_rank(scope: AliasScope) -> u8 {
    match scope {
        AliasScope::Group => 0,
        AliasScope::Context => 1,
        AliasScope::Member => 2,
    }
}

impl<B: Backend> NodeService<B> {
    /// Every replicated alias of every live group this node holds (of `scope`, or of every
    /// scope), by scope, then group, then name.
    pub fn group_aliases(&self, scope: Option<AliasScope>) -> Result<Vec<GroupAliasEntry>, ServiceError> {
        let mut out = Vec::new();
        for namespace_id in self.namespaces()? {
            let state = self.governance.state(&namespace_id)?;
            for (group_id, g) in &state.groups {
                let entry = |scope, alias: &String, id: [u8; 32]| GroupAliasEntry {
                    scope,
                    group_id: *group_id,
                    alias: alias.clone(),
                    id,
                };
                if let Some(alias) = &g.alias {
                    out.push(entry(AliasScope::Group, alias, *group_id.as_bytes()));
                }
                out.extend(g.context_aliases.iter().map(|(c, a)| entry(AliasScope::Context, a, *c.as_bytes())));
                out.extend(g.member_aliases.iter().map(|(m, a)| entry(AliasScope::Member, a, *m.as_bytes())));
            }
        }
        out.retain(|e| scope.is_none_or(|s| s == e.scope));
        out.sort_by(|a, b| {
            (scope_rank(a.scope), a.group_id, &a.alias).cmp(&(scope_rank(b.scope), b.group_id, &b.alias))
        });
        Ok(out)
    }

    /// Removes a replicated alias: resolves it as `alias_resolve` does, then clears it with
    /// the governance op that sets it (`AliasSet` with an empty alias), under the same
    /// capability (`MANAGE_METADATA`, or a member naming itself).
    pub fn alias_remove(&self, scope: AliasScope, alias: &str, group: Option<GroupId>) -> Result<OpId, ServiceError> {
        let id = self.alias_resolve(scope, alias, group)?;
        self.alias_set(scope, id, group, "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alias_rule() {
        for good in ["chat", "my chat", "a:b", "ünïcode", &"x".repeat(MAX_ALIAS_LEN), &"ab".repeat(31)] {
            assert!(check_alias(good).is_ok(), "{good:?}");
        }
        let id = "ab".repeat(32);
        for bad in ["", " chat", "chat ", "a\0b", "a\nb", &"x".repeat(MAX_ALIAS_LEN + 1), &id, &id.to_uppercase()] {
            assert!(matches!(check_alias(bad), Err(ServiceError::BadInput(_))), "{bad:?}");
        }
        assert!(is_id(&id) && !is_id("chat"));
        for s in LocalScope::ALL {
            assert_eq!(LocalScope::from_kind(s.kind()), Some(s));
            assert_eq!(LocalScope::parse(s.as_str()), Some(s));
        }
    }
}
