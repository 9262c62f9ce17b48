//! The scheduler extender's wire format: what kube-scheduler POSTs to the
//! prioritize verb and what it reads back, from k8s.io/kube-scheduler
//! extender/v1 types.go (`ExtenderArgs`: `Pod`, `Nodes`, `NodeNames`;
//! `HostPriority`: `Host`, `Score`; `MaxExtenderPriority` 10). Those structs
//! carry no JSON tags, so the scheduler writes the Go field names
//! (capitalised), seen from kube-scheduler v1.37.2; Go reads the answer's
//! names case-insensitively. The lower-case names of older copies of the
//! types are read too. The pod and nodes stay JSON: the extender reads a few
//! fields of them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `ExtenderArgs`: the pod being scheduled and the nodes that passed the
/// filters, as whole Node objects or (with `nodeCacheCapable`) names.
#[derive(Debug, Clone, Deserialize)]
pub struct ExtenderArgs {
    /// The pod.
    #[serde(rename = "Pod", alias = "pod")]
    pub pod: Value,
    /// The candidate nodes, when the extender is not node-cache capable.
    #[serde(default, rename = "Nodes", alias = "nodes")]
    pub nodes: Option<NodeList>,
    /// The candidate nodes' names, when it is.
    #[serde(default, rename = "NodeNames", alias = "nodenames")]
    pub nodenames: Option<Vec<String>>,
}

/// The part of a `NodeList` the extender reads.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeList {
    /// The nodes.
    #[serde(default)]
    pub items: Vec<Value>,
}

impl ExtenderArgs {
    /// The candidate nodes' names, whichever way they came.
    pub fn node_names(&self) -> Vec<String> {
        if let Some(names) = &self.nodenames {
            return names.clone();
        }
        self.nodes
            .iter()
            .flat_map(|l| &l.items)
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// `namespace/name` of the pod, for messages.
    pub fn pod_name(&self) -> String {
        format!(
            "{}/{}",
            self.pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default"),
            self.pod["metadata"]["name"].as_str().unwrap_or("?")
        )
    }

    /// The names of the pod's ResourceClaims, from its status (the
    /// ResourceClaim controller records the claim it made from a template
    /// there before the scheduler takes the pod) or, for a claim named in
    /// the spec, the spec.
    pub fn claim_names(&self) -> Vec<String> {
        let mut out: Vec<String> = self.pod["status"]["resourceClaimStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["resourceClaimName"].as_str().map(str::to_string))
            .collect();
        for c in self.pod["spec"]["resourceClaims"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(n) = c["resourceClaimName"].as_str() {
                out.push(n.to_string());
            }
        }
        out
    }
}

/// `HostPriority`: one node's score, 0 ..= 10.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// The node's name.
    pub host: String,
    /// Its score.
    pub score: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_s_args_read_with_names_or_whole_nodes() {
        // As kube-scheduler v1.37.2 sends them: Go's field names.
        let by_name: ExtenderArgs = serde_json::from_str(
            r#"{"Pod": {"metadata": {"name": "vm", "namespace": "a"},
                "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "vm-gpus-x7"}]}},
                "Nodes": null, "NodeNames": ["n1", "n2"]}"#,
        )
        .unwrap();
        assert_eq!(by_name.node_names(), ["n1", "n2"]);
        assert_eq!(by_name.claim_names(), ["vm-gpus-x7"]);
        assert_eq!(by_name.pod_name(), "a/vm");
        let whole: ExtenderArgs = serde_json::from_str(
            r#"{"pod": {"spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "shared"}]}},
                "nodes": {"items": [{"metadata": {"name": "n3"}}]}}"#,
        )
        .unwrap();
        assert_eq!(whole.node_names(), ["n3"]);
        assert_eq!(whole.claim_names(), ["shared"]);
        let reply = serde_json::to_string(&[HostPriority {
            host: "n1".into(),
            score: 8,
        }])
        .unwrap();
        assert_eq!(reply, r#"[{"host":"n1","score":8}]"#);
    }
}
