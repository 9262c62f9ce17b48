#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, without a cluster: etcd,
# kube-apiserver (resource.k8s.io/v1, RBAC and Node authorizers, service
# account tokens, admission), kube-controller-manager and kube-scheduler
# from k8s.io/kubernetes v1.37 (tests/kube). Without --node no kubelet or
# container runtime runs: nodes are API objects you create. With --node a
# booted node joins (scripts/qemu/node.sh: a QEMU guest with systemd,
# containerd, runc, CNI, Kubernetes' kubelet and kube-proxy, three stand-in
# GPUs), vp2p's images are built (scripts/image.sh) and imported on it, and
# the chart (host/kubernetes/helm/vp2p) is installed with Helm, the driver
# told to take the stand-ins (QEMU's bochs-display, class 0380) as GPUs. It stays up until
# `down`.
#
#   bash scripts/kube-sandbox.sh up DIR [--node]   start it; DIR/admin.kubeconfig
#   bash scripts/kube-sandbox.sh down DIR          stop it, and its node (DIR and
#                                                  etcd's data are kept)
#
# DIR/bin/kubectl is the real kubectl of the same version. `up` on a DIR
# whose control plane runs says so and exits 3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
. "$here/qemu/lib.sh"

[ $# -eq 2 ] || [ $# -eq 3 ] || usage_from_header
verb="$1" dir="$2" node=""
if [ $# -eq 3 ]; then
    [ "$verb $3" = "up --node" ] || usage_from_header
    node=1
fi
# VP2P_KUBE_PEERS: another build of kube-peers (and the kubelet, kube-proxy,
# pause and helm beside it), used as it is. VP2P_P2P_HOST: the p2p-host the
# node's image holds (default: the release build, made first).
bin="${VP2P_KUBE_PEERS:-${CARGO_TARGET_DIR:-$root/target}/kube-peers/kube-peers}"
case "$verb" in
up)
    # Built once; built again only when tests/kube changed since.
    if [ -z "${VP2P_KUBE_PEERS:-}" ] && { [ ! -x "$bin" ] || [ -n "$(find "$root/tests/kube" -newer "$bin" \( -name '*.go' -o -name 'go.*' \) -print -quit)" ]; }; then
        bash "$here/build-kube-peers.sh"
    fi
    if [ -n "$node" ]; then
        mkdir -p "$dir"
        # The address a booted node reaches the API server at (QEMU's user network).
        echo 10.0.2.2 >"$dir/node-network"
    fi
    "$bin" up "$dir"
    dir="$(cd "$dir" && pwd)"
    if [ -n "$node" ]; then
        # image.sh prints the archives it wrote; the node imports p2p-host's.
        archive="$(bash "$here/image.sh" ${VP2P_P2P_HOST:+--binary "$VP2P_P2P_HOST"} --out "$dir/images" | grep '/p2p-host-[^/]*\.oci\.tar$')"
        bash "$here/qemu/node.sh" up "$dir" --image "$archive"
        HELM_CACHE_HOME="$dir/helm/cache" HELM_CONFIG_HOME="$dir/helm/config" HELM_DATA_HOME="$dir/helm/data" \
            "$(dirname "$bin")/helm" install vp2p "$root/host/kubernetes/helm/vp2p" --namespace kube-system \
            --kubeconfig "$dir/admin.kubeconfig" --set 'extraArgs={--gpu-class,0380}' >/dev/null
        echo "node vp2p-node joined; vp2p's chart installed (helm release vp2p in kube-system)"
    fi
    cat <<MSG
The control plane runs until \`bash scripts/kube-sandbox.sh down $dir\`. Try it:
  export KUBECONFIG=$dir/admin.kubeconfig PATH=$dir/bin:\$PATH
  kubectl get --raw /version
MSG
    ;;
down)
    [ -x "$bin" ] || die "$bin is not built: nothing was started from this checkout"
    if [ -d "$dir/nodes" ]; then
        for n in "$dir"/nodes/*/; do
            bash "$here/qemu/node.sh" down "$dir" --name "$(basename "$n")"
        done
    fi
    "$bin" down "$dir"
    echo "stopped the control plane of $dir"
    ;;
*) usage_from_header ;;
esac
