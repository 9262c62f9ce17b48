#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, without a cluster: etcd,
# kube-apiserver (resource.k8s.io/v1, RBAC and Node authorizers, service
# account tokens, admission), kube-controller-manager and kube-scheduler
# from k8s.io/kubernetes v1.37 (tests/kube). No kubelet or container runtime
# runs: nodes are API objects you create. It stays up until `down`.
#
#   bash scripts/kube-sandbox.sh up DIR     start it; DIR/admin.kubeconfig, DIR/address
#   bash scripts/kube-sandbox.sh down DIR   stop it (DIR and etcd's data are kept)
#
# DIR/bin/kubectl is the real kubectl of the same version. `up` on a DIR
# whose control plane runs says so and exits 3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
. "$here/qemu/lib.sh"

[ $# -eq 2 ] || usage_from_header
verb="$1" dir="$2"
# VP2P_KUBE_PEERS: another build of kube-peers, used as it is.
bin="${VP2P_KUBE_PEERS:-${CARGO_TARGET_DIR:-$root/target}/kube-peers/kube-peers}"
case "$verb" in
up)
    # Built once; built again only when tests/kube changed since.
    if [ -z "${VP2P_KUBE_PEERS:-}" ] && { [ ! -x "$bin" ] || [ -n "$(find "$root/tests/kube" -newer "$bin" \( -name '*.go' -o -name 'go.*' \) -print -quit)" ]; }; then
        bash "$here/build-kube-peers.sh"
    fi
    "$bin" up "$dir"
    dir="$(cd "$dir" && pwd)"
    cat <<MSG
The control plane runs until \`bash scripts/kube-sandbox.sh down $dir\`. Try it:
  export KUBECONFIG=$dir/admin.kubeconfig PATH=$dir/bin:\$PATH
  kubectl get --raw /version
MSG
    ;;
down)
    [ -x "$bin" ] || die "$bin is not built: nothing was started from this checkout"
    "$bin" down "$dir"
    echo "stopped the control plane of $dir"
    ;;
*) usage_from_header ;;
esac
