//! The lifecycle methods (issue 26 item 5): what was created can be listed by page and
//! removed — `private_delete`, `private_scan`; `app_list`, `context_list` and `node_peers`
//! by page; `app_uninstall`, `blob_delete`, `context_delete`, `group_delete`. Each is called from its one-line method in
//! [`WeftApiServer`](super::WeftApiServer)'s implementation.

use jsonrpsee::core::RpcResult;
use weft_store::Backend;

use super::{context_id, group_id, optional, signed, sorted, strings, svc_err, Api};
use crate::rpc::types::*;
use crate::service::EntryPage;
use weft_primitives::{ApplicationId, BlobId, ContextId};

use crate::rpc::error::invalid_params;
use crate::rpc::wire::parse_id;

/// A page of entries as the wire writes it, keys and values in the call's encoding
/// (`state_scan`, `private_scan`).
pub(super) fn scan_page(p: &ScanParams, page: EntryPage) -> RpcResult<ScanPage> {
    let entries = page
        .entries
        .into_iter()
        .map(|(k, v)| Ok(Entry { key: p.encoding.encode("key", k)?, value: p.encoding.encode("value", v)? }))
        .collect::<RpcResult<Vec<_>>>()?;
    let next = page.next.map(|k| p.encoding.encode("key", k)).transpose()?;
    Ok(ScanPage { entries, next })
}

/// `private_delete`: removes one node-local key (absent already: `{}` all the same).
pub(super) fn private_delete<B: Backend>(api: &Api<B>, p: KeyParams) -> RpcResult<Empty> {
    let service = api.service()?;
    let id = context_id(&p.context_id)?;
    let key = p.encoding.decode("key", &p.key)?;
    service.private_delete(&id, &key).map_err(svc_err(&service))?;
    Ok(Empty {})
}

/// `private_scan`: a page of node-local entries, bounded as `state_scan`'s pages are.
pub(super) fn private_scan<B: Backend>(api: &Api<B>, p: ScanParams) -> RpcResult<ScanPage> {
    let service = api.service()?;
    let id = context_id(&p.context_id)?;
    let prefix = optional(p.prefix.as_deref(), |s| p.encoding.decode("prefix", s))?.unwrap_or_default();
    let after = optional(p.start_after.as_deref(), |s| p.encoding.decode("start_after", s))?;
    let page = service
        .private_scan(&id, &prefix, after.as_deref(), p.clamped_limit(), api.shared.scan_bytes, p.reverse)
        .map_err(svc_err(&service))?;
    scan_page(&p, page)
}

/// `app_list`: a page of the installed applications, by id.
pub(super) fn app_list<B: Backend>(api: &Api<B>, p: ListParams) -> RpcResult<Applications> {
    let service = api.service()?;
    let after = optional(p.start_after.as_deref(), |a| parse_id::<ApplicationId>("start_after", a))?;
    let (apps, next) = service.app_page(after.as_ref(), p.clamped_limit()).map_err(svc_err(&service))?;
    let applications = apps
        .into_iter()
        .map(|a| Application {
            application_id: a.application_id.to_hex(),
            name: a.name,
            version: a.version,
            size: a.size,
            bytecode_blob_id: a.bytecode.blob_id.to_hex(),
        })
        .collect();
    Ok(Applications { applications, next: next.map(|n| n.to_hex()) })
}

/// `context_list`: a page of this node's contexts, by id.
pub(super) fn context_list<B: Backend>(api: &Api<B>, p: ListParams) -> RpcResult<Contexts> {
    let service = api.service()?;
    let after = optional(p.start_after.as_deref(), |a| parse_id::<ContextId>("start_after", a))?;
    let (summaries, next) = service.context_page(after.as_ref(), p.clamped_limit()).map_err(svc_err(&service))?;
    let contexts = summaries
        .into_iter()
        .map(|c| ContextEntry {
            context_id: c.context_id.to_hex(),
            group_id: c.group_id.map(|g| g.to_hex()),
            application_id: c.application_id.map(|a| a.to_hex()),
            alias: c.alias,
        })
        .collect();
    Ok(Contexts { contexts, next: next.map(|n| n.to_hex()) })
}

/// `node_peers`: a page of the connected peers, by peer id (as text: the order of the
/// cursor). The network task answers with all of them (at most the connection limit).
pub(super) fn node_peers<B: Backend>(api: &Api<B>, p: ListParams) -> RpcResult<Peers> {
    let service = api.service()?;
    if let Some(after) = p.start_after.as_deref() {
        after.parse::<libp2p::PeerId>().map_err(|e| invalid_params("start_after", format!("not a peer id: {e}")))?;
    }
    let limit = p.clamped_limit();
    let mut peers = service.peers().map_err(svc_err(&service))?;
    peers.sort_by_cached_key(|p| p.peer_id.to_string());
    let mut page: Vec<Peer> = peers
        .into_iter()
        .map(|p| Peer {
            peer_id: p.peer_id.to_string(),
            addrs: strings(&p.addrs),
            contexts: sorted(p.contexts.iter().map(|c| c.to_hex())),
            namespaces: sorted(p.namespaces.iter().map(|n| n.to_hex())),
        })
        .filter(|peer| p.start_after.as_deref().is_none_or(|after| peer.peer_id.as_str() > after))
        .take(limit.saturating_add(1))
        .collect();
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|peer| peer.peer_id.clone())
    } else {
        None
    };
    Ok(Peers { peers: page, next })
}

/// `app_uninstall`: removes an application no context or group here uses.
pub(super) fn app_uninstall<B: Backend>(api: &Api<B>, p: ApplicationParams) -> RpcResult<Empty> {
    let service = api.service()?;
    let id: ApplicationId = parse_id("application_id", &p.application_id)?;
    service.app_uninstall(&id).map_err(svc_err(&service))?;
    Ok(Empty {})
}

/// `blob_delete`: removes a blob nothing names.
pub(super) fn blob_delete<B: Backend>(api: &Api<B>, p: BlobIdParams) -> RpcResult<Empty> {
    let service = api.service()?;
    let id: BlobId = parse_id("blob_id", &p.blob_id)?;
    service.blob_delete(&id).map_err(svc_err(&service))?;
    Ok(Empty {})
}

/// `context_delete`: removes this node's copy of a context it left.
pub(super) fn context_delete<B: Backend>(api: &Api<B>, p: ContextParams) -> RpcResult<Empty> {
    let service = api.service()?;
    service.context_delete(&context_id(&p.context_id)?).map_err(svc_err(&service))?;
    Ok(Empty {})
}

/// `group_delete`: signs the op deleting a subgroup and the groups below it.
pub(super) fn group_delete<B: Backend>(api: &Api<B>, p: GroupParams) -> RpcResult<SignedOp> {
    let service = api.service()?;
    let group = group_id("group_id", &p.group_id)?;
    signed(&service, service.group_delete(&group))
}
