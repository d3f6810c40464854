//! A jsonrpsee client that sends each call's params by name, as the server reads them.
//!
//! jsonrpsee's generated [`WeftApiClient`](super::api::WeftApiClient) sends a method's
//! arguments as a positional array; every method of the contract has exactly one, its params
//! object, so that array is `[{...}]`. The server takes params by name only (an object, see
//! [`wire::parse_params`](super::wire::parse_params)), so [`ByName`] wraps any client and sends
//! the object itself. Calls whose params are not a one-object array pass through unchanged.

use std::future::Future;

use jsonrpsee::core::client::{BatchResponse, ClientT, Error, Subscription, SubscriptionClientT};
use jsonrpsee::core::params::BatchRequestBuilder;
use jsonrpsee::core::traits::ToRpcParams;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// A client whose calls carry their one params object by name: `{...}`, not `[{...}]`.
/// `WeftApiClient`'s methods are available on it.
#[derive(Debug, Clone)]
pub struct ByName<C>(pub C);

/// Params already serialized.
struct Raw(Option<Box<RawValue>>);

impl ToRpcParams for Raw {
    fn to_rpc_params(self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        Ok(self.0)
    }
}

/// `params` serialized, with a one-object array unwrapped to the object.
fn by_name(params: impl ToRpcParams) -> Result<Raw, serde_json::Error> {
    let Some(raw) = params.to_rpc_params()? else {
        return Ok(Raw(None));
    };
    match serde_json::from_str::<[Box<RawValue>; 1]>(raw.get()) {
        Ok([object]) if object.get().starts_with('{') => Ok(Raw(Some(object))),
        _ => Ok(Raw(Some(raw))),
    }
}

impl<C: ClientT + Sync> ClientT for ByName<C> {
    fn notification<Params>(&self, method: &str, params: Params) -> impl Future<Output = Result<(), Error>> + Send
    where
        Params: ToRpcParams + Send,
    {
        let params = by_name(params);
        async move { self.0.notification(method, params?).await }
    }

    fn request<R, Params>(&self, method: &str, params: Params) -> impl Future<Output = Result<R, Error>> + Send
    where
        R: DeserializeOwned,
        Params: ToRpcParams + Send,
    {
        let params = by_name(params);
        async move { self.0.request(method, params?).await }
    }

    fn batch_request<'a, R>(
        &self,
        batch: BatchRequestBuilder<'a>,
    ) -> impl Future<Output = Result<BatchResponse<'a, R>, Error>> + Send
    where
        R: DeserializeOwned + std::fmt::Debug + 'a,
    {
        self.0.batch_request(batch)
    }
}

impl<C: SubscriptionClientT + Sync> SubscriptionClientT for ByName<C> {
    fn subscribe<'a, Notif, Params>(
        &self,
        subscribe_method: &'a str,
        params: Params,
        unsubscribe_method: &'a str,
    ) -> impl Future<Output = Result<Subscription<Notif>, Error>> + Send
    where
        Params: ToRpcParams + Send,
        Notif: DeserializeOwned,
    {
        let params = by_name(params);
        async move { self.0.subscribe(subscribe_method, params?, unsubscribe_method).await }
    }

    fn subscribe_to_method<Notif>(
        &self,
        method: &str,
    ) -> impl Future<Output = Result<Subscription<Notif>, Error>> + Send
    where
        Notif: DeserializeOwned,
    {
        self.0.subscribe_to_method(method)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use jsonrpsee::core::params::ArrayParams;

    fn sent(params: impl ToRpcParams) -> Option<String> {
        by_name(params).unwrap().0.map(|raw| raw.get().to_string())
    }

    #[test]
    fn one_object_is_sent_by_name_and_anything_else_as_it_is() {
        let mut one = ArrayParams::new();
        one.insert(crate::rpc::types::ContextParams { context_id: "ab".into() }).unwrap();
        assert_eq!(sent(one).as_deref(), Some(r#"{"context_id":"ab"}"#));
        let mut two = ArrayParams::new();
        two.insert(1).unwrap();
        two.insert(2).unwrap();
        assert_eq!(sent(two).as_deref(), Some("[1,2]"));
        let mut number = ArrayParams::new();
        number.insert(1).unwrap();
        assert_eq!(sent(number).as_deref(), Some("[1]"));
        assert_eq!(sent(ArrayParams::new()), None);
    }
}
