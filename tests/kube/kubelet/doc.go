// Package kubelet runs the kubelet's own plugin clients against a plugin on
// a node's directories: the plugin manager's watcher with the DRA manager
// (registration, NodePrepareResources, NodeUnprepareResources), and the
// device manager's plugin server and client (registration, ListAndWatch,
// GetPreferredAllocation, Allocate); and the CDI library, as container
// runtimes use it, on what a DRA driver prepared.
package kubelet
