//! The API server's reads beside the slices: any resource listed cluster
//! wide and watched from that list's version (the scheduler extender's
//! caches of slices and claims), and the ResourceClaims prepare reads, also
//! from the blocking threads it runs on ([`ApiClaims`]).

use std::time::Duration;

use kube::api::{DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::Api;
use p2p_allocation::dra::claim::ResourceClaim;

use super::{converting, request, ApiError, ApiServer};
use crate::kubelet_plugin::claims::{ClaimRef, ClaimSource};
use crate::kubelet_plugin::objects;

impl ApiServer {
    /// Every object of `resource` (`fields` a field selector) and the list's
    /// resourceVersion, the point a watch of the same objects starts from.
    pub async fn list_versioned(
        &self,
        resource: &kube::api::ApiResource,
        fields: Option<&str>,
    ) -> Result<(Vec<DynamicObject>, String), ApiError> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
        let mut lp = ListParams::default().match_any();
        if let Some(f) = fields {
            lp = lp.fields(f);
        }
        let list = self
            .call(format!("listing {}", resource.plural), api.list(&lp))
            .await?;
        let version = list.metadata.resource_version.unwrap_or_default();
        Ok((list.items, version))
    }

    /// The changes to `resource` (`fields` a field selector) after
    /// `version`, as the API server streams them until its timeout (about
    /// five minutes); starting the stream is bounded by the connection's
    /// timeout.
    pub async fn watch_from(
        &self,
        resource: &kube::api::ApiResource,
        fields: Option<&str>,
        version: &str,
    ) -> Result<
        impl tokio_stream::Stream<Item = Result<WatchEvent<DynamicObject>, kube::Error>>,
        ApiError,
    > {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
        let mut wp = WatchParams::default().timeout(290);
        if let Some(f) = fields {
            wp = wp.fields(f);
        }
        self.call(format!("watching {}", resource.plural), async {
            api.watch(&wp, version).await
        })
        .await
    }

    /// The ResourceClaim `namespace/name` as the API server sends it (its
    /// status whole: the pods it is reserved for).
    pub async fn claim_object(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<DynamicObject, ApiError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &objects::claims());
        self.call(
            format!("reading ResourceClaim {namespace}/{name}"),
            api.get(name),
        )
        .await
    }

    /// The ResourceClaim `namespace/name`, read within `within` or the
    /// connection's timeout, whichever is shorter.
    pub async fn claim(
        &self,
        namespace: &str,
        name: &str,
        within: Duration,
    ) -> Result<ResourceClaim, ApiError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &objects::claims());
        let what = format!("ResourceClaim {namespace}/{name}");
        let reading = format!("reading {what}");
        let obj = Self::within(&reading, within.min(self.timeout), api.get(name))
            .await?
            .map_err(request(reading))?;
        objects::claim(obj).map_err(converting(&what))
    }
}

/// Claims read from the API server, from the blocking threads prepare runs on.
#[derive(Debug, Clone)]
pub struct ApiClaims {
    /// The connection.
    pub api: ApiServer,
    /// The runtime the connection lives on.
    pub runtime: tokio::runtime::Handle,
}

impl ClaimSource for ApiClaims {
    fn claim(&self, claim: &ClaimRef, within: Duration) -> Result<ResourceClaim, String> {
        self.runtime
            .block_on(self.api.claim(&claim.namespace, &claim.name, within))
            .map_err(|e| e.to_string())
    }

    /// Gone on 404, or when the claim of that name has another uid.
    fn exists(&self, claim: &ClaimRef, within: Duration) -> Result<bool, String> {
        match self
            .runtime
            .block_on(self.api.claim(&claim.namespace, &claim.name, within))
        {
            Ok(c) => Ok(c.metadata.uid == claim.uid),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
}
