//! `weft namespace` and `weft group`: governance of namespaces and groups (`weft alias` is in
//! `aliases.rs`).

use clap::Subcommand;
use weft_node::rpc::api::WeftApiClient as _;
use weft_node::rpc::types::{
    ContextCapabilitiesParams, DefaultCapabilitiesParams, GroupCreateParams, GroupMembersParams, GroupParams,
    GroupUpgradeParams, MemberCapabilitiesParams, MemberParams, MemberRoleParams, NamespaceCreateParams, SignedOp,
    UpgradePolicyParams, UpgradeState,
};

use super::client::{CliError, Client};
use super::output::{json_or_null, next_page, print, text};

/// `weft namespace`
#[derive(Subcommand, Debug)]
pub enum NamespaceCmd {
    /// Create a namespace with this node as its admin and print its id (namespace_create).
    Create {
        /// An alias for its root group.
        #[arg(long)]
        alias: Option<String>,
        /// Its root group's upgrade policy: automatic, manual (the default) or frozen.
        #[arg(long)]
        upgrade_policy: Option<String>,
    },
}

/// Parses a capability bitmask: decimal, or hexadecimal with 0x.
fn capabilities(text: &str) -> Result<u32, String> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .map_err(|e| format!("{text:?} is not a capability bitmask (decimal or 0x hex): {e}"))
}
/// `weft group`
#[derive(Subcommand, Debug)]
pub enum GroupCmd {
    /// Create a subgroup of PARENT (a group or namespace id) and print its id (group_create).
    Create {
        /// The parent group; a namespace id names its root group.
        parent_id: String,
        /// An alias for the new group.
        #[arg(long)]
        alias: Option<String>,
        /// Its upgrade policy: automatic, manual (the default) or frozen.
        #[arg(long)]
        upgrade_policy: Option<String>,
    },
    /// Parent, namespace, application, admins, member count, contexts, upgrade (group_info).
    Info {
        /// The group id.
        group_id: String,
    },
    /// List members with their roles and capabilities, one per line (group_members).
    Members {
        /// The group id.
        group_id: String,
        /// Start after this identity (a previous page's cursor).
        #[arg(long, value_name = "IDENTITY")]
        start_after: Option<String>,
        /// Members per page (the node clamps it to 1..=1000) [default: 100].
        #[arg(long)]
        limit: Option<u32>,
        /// Follow the cursor and print every page.
        #[arg(long)]
        all: bool,
    },
    /// Add a member and print the governance op's id (group_add_member).
    AddMember {
        /// The group id.
        group_id: String,
        /// The member's identity (its node's `weft node info` identity).
        identity: String,
        /// admin, member or read_only.
        #[arg(long, default_value = "member")]
        role: String,
    },
    /// Remove a member (group_remove_member).
    RemoveMember {
        /// The group id.
        group_id: String,
        /// The member's identity.
        identity: String,
    },
    /// Change a member's role (group_set_role).
    SetRole {
        /// The group id.
        group_id: String,
        /// The member's identity.
        identity: String,
        /// admin, member or read_only.
        role: String,
    },
    /// Set a member's own capabilities, a bitmask: 0x1 create context, 0x2 invite, 0x4 join
    /// open subgroups, 0x8 manage members, 0x10 manage application, 0x20 create subgroup,
    /// 0x40 delete subgroup, 0x80 manage visibility, 0x100 manage metadata
    /// (group_set_capabilities).
    SetCapabilities {
        /// The group id.
        group_id: String,
        /// The member's identity.
        identity: String,
        /// The bitmask (decimal or 0x hex).
        #[arg(value_parser = capabilities)]
        capabilities: u32,
    },
    /// Set the capabilities of members without their own (group_set_default_capabilities).
    SetDefaultCapabilities {
        /// The group id.
        group_id: String,
        /// The bitmask (decimal or 0x hex).
        #[arg(value_parser = capabilities)]
        capabilities: u32,
    },
    /// Set a member's capabilities in one context of the group, a bitmask: 0x1 write
    /// (group_set_context_capabilities). Without one a Member may write every context.
    SetContextCapabilities {
        /// The group id.
        group_id: String,
        /// The context (registered in the group).
        context_id: String,
        /// The member's identity.
        identity: String,
        /// The bitmask (decimal or 0x hex).
        #[arg(value_parser = capabilities)]
        capabilities: u32,
    },
    /// Change the application the group's contexts run (group_upgrade).
    Upgrade {
        /// The group id.
        group_id: String,
        /// The new application (an id from `weft app list`).
        application_id: String,
        /// The migration method to run in each context.
        #[arg(long)]
        migration: Option<String>,
    },
    /// The latest upgrade's progress (group_upgrade_status).
    UpgradeStatus {
        /// The group id.
        group_id: String,
    },
    /// Change how the group's contexts follow its application — automatic (all move on an
    /// upgrade), manual (each moves with `weft context upgrade`) or frozen (no upgrades) —
    /// and print the governance op's id; admins only (group_set_upgrade_policy).
    SetUpgradePolicy {
        /// The group id.
        group_id: String,
        /// automatic, manual or frozen.
        policy: String,
    },
    /// Delete a subgroup and the groups below it, and print the governance op's id; every
    /// member's node leaves their contexts (group_delete).
    Delete {
        /// The group id.
        group_id: String,
    },
}

/// Runs a `weft namespace` command.
pub async fn namespace(client: &Client, json_out: bool, cmd: NamespaceCmd) -> Result<(), CliError> {
    match cmd {
        NamespaceCmd::Create { alias, upgrade_policy } => {
            let params = NamespaceCreateParams { alias, upgrade_policy };
            let r = client.ask(client.api().namespace_create(params)).await?;
            print(json_out, &r, |r| r.namespace_id.clone());
        }
    }
    Ok(())
}

/// Runs a `weft group` command.
pub async fn group(client: &Client, json_out: bool, cmd: GroupCmd) -> Result<(), CliError> {
    let api = client.api();
    let op = |r: &SignedOp| r.op_id.clone();
    match cmd {
        GroupCmd::Create { parent_id, alias, upgrade_policy } => {
            let r = client.ask(api.group_create(GroupCreateParams { parent_id, alias, upgrade_policy })).await?;
            print(json_out, &r, |r| r.group_id.clone());
        }
        GroupCmd::Info { group_id } => {
            let r = client.ask(api.group_info(GroupParams { group_id })).await?;
            print(json_out, &r, |r| {
                format!(
                    "group        {}\nalias        {}\nparent       {}\nnamespace    {}\napplication  {}\npolicy       {}\nadmins       {}\nmembers      {}\ncontexts     {}\nupgrade      {}",
                    r.group_id,
                    text(&r.alias),
                    text(&r.parent_id),
                    r.namespace_id,
                    r.target_application_id,
                    r.upgrade_policy,
                    r.admins.join(" "),
                    r.member_count,
                    r.contexts.join(" "),
                    json_or_null(r.upgrade.as_ref()),
                )
            });
        }
        GroupCmd::Members { group_id, start_after, limit, all } => {
            let mut cursor = start_after;
            loop {
                let params = GroupMembersParams { group_id: group_id.clone(), start_after: cursor, limit };
                let r = client.ask(api.group_members(params)).await?;
                print(json_out, &r, |r| {
                    r.members
                        .iter()
                        .map(|m| format!("{}  {}  capabilities {:#x}", m.identity, m.role, m.capabilities))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                match next_page(r.next, all, json_out, "members") {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        GroupCmd::AddMember { group_id, identity, role } => {
            let r = client.ask(api.group_add_member(MemberRoleParams { group_id, identity, role })).await?;
            print(json_out, &r, op);
        }
        GroupCmd::RemoveMember { group_id, identity } => {
            let r = client.ask(api.group_remove_member(MemberParams { group_id, identity })).await?;
            print(json_out, &r, op);
        }
        GroupCmd::SetRole { group_id, identity, role } => {
            let r = client.ask(api.group_set_role(MemberRoleParams { group_id, identity, role })).await?;
            print(json_out, &r, op);
        }
        GroupCmd::SetCapabilities { group_id, identity, capabilities } => {
            let params = MemberCapabilitiesParams { group_id, identity, capabilities };
            print(json_out, &client.ask(api.group_set_capabilities(params)).await?, op);
        }
        GroupCmd::SetDefaultCapabilities { group_id, capabilities } => {
            let params = DefaultCapabilitiesParams { group_id, capabilities };
            print(json_out, &client.ask(api.group_set_default_capabilities(params)).await?, op);
        }
        GroupCmd::SetContextCapabilities { group_id, context_id, identity, capabilities } => {
            let params = ContextCapabilitiesParams { group_id, context_id, identity, capabilities };
            print(json_out, &client.ask(api.group_set_context_capabilities(params)).await?, op);
        }
        GroupCmd::Upgrade { group_id, application_id, migration } => {
            let params = GroupUpgradeParams { group_id, application_id, migration };
            print(json_out, &client.ask(api.group_upgrade(params)).await?, op);
        }
        GroupCmd::SetUpgradePolicy { group_id, policy } => {
            let params = UpgradePolicyParams { group_id, policy };
            print(json_out, &client.ask(api.group_set_upgrade_policy(params)).await?, op);
        }
        GroupCmd::Delete { group_id } => {
            print(json_out, &client.ask(api.group_delete(GroupParams { group_id })).await?, op);
        }
        GroupCmd::UpgradeStatus { group_id } => {
            let r = client.ask(api.group_upgrade_status(GroupParams { group_id })).await?;
            print(json_out, &r, |r| match r.status {
                UpgradeState::InProgress => {
                    format!("in progress: {} of {} contexts migrated, {} failed", r.completed, r.total, r.failed)
                }
                UpgradeState::Completed => format!("completed at {}", json_or_null(r.completed_at.as_ref())),
                UpgradeState::None => "none".to_string(),
                // A state this CLI does not know (a newer node): its wire name.
                other => json_or_null(Some(&other)).trim_matches('"').to_string(),
            });
        }
    }
    Ok(())
}
