// Package kubelet runs the kubelet's own plugin clients against a plugin on
// a node's directories: the plugin manager's watcher with the DRA manager
// (registration, NodePrepareResources, NodeUnprepareResources), and the
// device manager's plugin server and client (registration, ListAndWatch,
// GetPreferredAllocation, Allocate).
package kubelet

import "errors"

// RunDRA is the kubelet-dra subcommand.
func RunDRA(args []string) error { return errors.New("kubelet-dra: not built yet") }

// RunDeviceManager is the device-manager subcommand.
func RunDeviceManager(args []string) error { return errors.New("device-manager: not built yet") }
