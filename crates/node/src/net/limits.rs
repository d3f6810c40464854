//! Connection limits. Two behaviours, first in the swarm's [`Behaviour`](super::swarm::Behaviour)
//! so a connection they deny is refused before any other behaviour allocates for it: libp2p's
//! `connection_limits` (`p2p.max_connections` established in all, `max_connections_per_peer`,
//! `max_pending_incoming`, `max_pending_outgoing`) and [`IpLimits`], this file's, which denies
//! an inbound connection from an IP address that already holds `p2p.max_connections_per_ip`
//! (pending and established together). Outbound connections (the node dialling its bootstrap
//! peers or a `node_dial`) are not counted per IP. Each denial is counted by reason
//! (`weft_p2p_connections_denied_total{reason}`; see [`DenialReason`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::net::IpAddr;
use std::task::{Context, Poll};

use libp2p::core::transport::PortUse;
use libp2p::core::{Endpoint, Multiaddr};
use libp2p::multiaddr::Protocol;
use libp2p::swarm::{
    dummy, ConnectionClosed, ConnectionDenied, ConnectionId, FromSwarm, ListenFailure, NetworkBehaviour, THandler,
    THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::{connection_limits, PeerId};

use super::NetConfig;

/// libp2p's limits, as `config` sets them.
pub(super) fn libp2p_limits(config: &NetConfig) -> connection_limits::Behaviour {
    connection_limits::Behaviour::new(
        connection_limits::ConnectionLimits::default()
            .with_max_established(Some(config.max_connections))
            .with_max_established_per_peer(Some(config.max_connections_per_peer))
            .with_max_pending_incoming(Some(config.max_pending_incoming))
            .with_max_pending_outgoing(Some(config.max_pending_outgoing)),
    )
}

/// An inbound connection denied: its address holds `max_connections_per_ip` already.
#[derive(Debug, Clone, Copy)]
pub struct IpLimitExceeded {
    /// The limit.
    pub limit: u32,
}

impl fmt::Display for IpLimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "connection limit exceeded: at most {} connections per IP address are allowed", self.limit)
    }
}

impl std::error::Error for IpLimitExceeded {}

/// Why a connection was denied, as `weft_p2p_connections_denied_total` labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DenialReason {
    /// `max_connections_per_ip`.
    Ip,
    /// `max_connections_per_peer`.
    Peer,
    /// `max_connections`.
    Total,
    /// `max_pending_incoming` or `max_pending_outgoing`.
    Pending,
}

impl DenialReason {
    /// Why `cause` denied a connection (`None`: not one of the limits).
    pub(super) fn of(cause: &ConnectionDenied) -> Option<DenialReason> {
        if cause.downcast_ref::<IpLimitExceeded>().is_some() {
            return Some(DenialReason::Ip);
        }
        // libp2p's `Exceeded` keeps its kind private; its message names it.
        let exceeded = cause.downcast_ref::<connection_limits::Exceeded>()?.to_string();
        Some(if exceeded.contains("per peer") {
            DenialReason::Peer
        } else if exceeded.contains("pending") {
            DenialReason::Pending
        } else {
            DenialReason::Total
        })
    }
}

/// The IP address a multiaddr starts with.
fn ip_of(addr: &Multiaddr) -> Option<IpAddr> {
    match addr.iter().next()? {
        Protocol::Ip4(ip) => Some(IpAddr::V4(ip)),
        Protocol::Ip6(ip) => Some(IpAddr::V6(ip)),
        _ => None,
    }
}

/// Denies inbound connections from an address past `max_connections_per_ip` (pending and
/// established inbound connections counted together).
pub(super) struct IpLimits {
    max: u32,
    /// Inbound connections (pending or established) by the address they come from.
    by_ip: HashMap<IpAddr, u32>,
    /// The address of each inbound connection counted.
    connections: HashMap<ConnectionId, IpAddr>,
}

impl IpLimits {
    pub(super) fn new(max: u32) -> Self {
        IpLimits { max, by_ip: HashMap::new(), connections: HashMap::new() }
    }

    /// Inbound connections counted from `ip` now.
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> u32 {
        self.by_ip.get(&ip).copied().unwrap_or(0)
    }

    fn release(&mut self, connection_id: ConnectionId) {
        let Some(ip) = self.connections.remove(&connection_id) else { return };
        if let Some(n) = self.by_ip.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_ip.remove(&ip);
            }
        }
    }
}

impl NetworkBehaviour for IpLimits {
    type ConnectionHandler = dummy::ConnectionHandler;
    type ToSwarm = Infallible;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        _local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        let Some(ip) = ip_of(remote_addr) else { return Ok(()) };
        let count = self.by_ip.entry(ip).or_default();
        if *count >= self.max {
            return Err(ConnectionDenied::new(IpLimitExceeded { limit: self.max }));
        }
        *count += 1;
        self.connections.insert(connection_id, ip);
        Ok(())
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        _peer: PeerId,
        _local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        // Counted when pending; a connection that was not (no IP then) is counted now.
        if !self.connections.contains_key(&connection_id) {
            if let Some(ip) = ip_of(remote_addr) {
                let count = self.by_ip.entry(ip).or_default();
                if *count >= self.max {
                    return Err(ConnectionDenied::new(IpLimitExceeded { limit: self.max }));
                }
                *count += 1;
                self.connections.insert(connection_id, ip);
            }
        }
        Ok(dummy::ConnectionHandler)
    }

    fn handle_established_outbound_connection(
        &mut self,
        _connection_id: ConnectionId,
        _peer: PeerId,
        _addr: &Multiaddr,
        _role_override: Endpoint,
        _port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        match event {
            FromSwarm::ConnectionClosed(ConnectionClosed { connection_id, .. })
            | FromSwarm::ListenFailure(ListenFailure { connection_id, .. }) => self.release(connection_id),
            _ => {}
        }
    }

    fn on_connection_handler_event(&mut self, _peer: PeerId, _id: ConnectionId, event: THandlerOutEvent<Self>) {
        match event {}
    }

    fn poll(&mut self, _: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ip: &str) -> Multiaddr {
        format!("/ip4/{ip}/tcp/1000").parse().unwrap_or_else(|_| Multiaddr::empty())
    }

    #[test]
    fn an_address_holds_at_most_its_limit_and_frees_it_on_close() {
        let mut limits = IpLimits::new(2);
        let local = addr("127.0.0.1");
        let a = addr("10.0.0.1");
        let ip: IpAddr = [10, 0, 0, 1].into();
        let ids: Vec<ConnectionId> = (0..4).map(|_| ConnectionId::new_unchecked(rand_id())).collect();
        assert!(limits.handle_pending_inbound_connection(ids[0], &local, &a).is_ok());
        assert!(limits.handle_pending_inbound_connection(ids[1], &local, &a).is_ok());
        let denied = limits.handle_pending_inbound_connection(ids[2], &local, &a);
        assert_eq!(denied.as_ref().err().and_then(DenialReason::of), Some(DenialReason::Ip));
        // Another address is not affected.
        assert!(limits.handle_pending_inbound_connection(ids[3], &local, &addr("10.0.0.2")).is_ok());
        assert_eq!(limits.count(ip), 2);
        // A connection that failed frees its place.
        limits.release(ids[0]);
        assert_eq!(limits.count(ip), 1);
        assert!(limits.handle_pending_inbound_connection(ids[2], &local, &a).is_ok());
        assert_eq!(limits.count(ip), 2);
    }

    fn rand_id() -> usize {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
}
