//! A real node, nothing stood in but the GPUs: a QEMU guest with systemd,
//! containerd, runc, the CNI plugins, Kubernetes' own kubelet and kube-proxy
//! joins Kubernetes' own control plane (tests/src/sandbox_node.rs); vp2p's
//! DRA driver runs on it from vp2p's image as the chart's DaemonSet, and a
//! pod's claim for two peer GPUs goes scheduler -> kubelet -> driver ->
//! containerd (CDI) -> the container, which opens the VFIO groups.
//! One binary of its own: the guest takes both cores while it boots.

mod claim_lifecycle;
mod day_two;
mod deploy_walkthrough;
mod vm_in_pod;
