package kubelet

import (
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// InjectCDI loads the CDI specs of specDirs with the CDI library's cache
// (what containerd and CRI-O use) and injects the fully qualified devices
// (vendor/class=name) into a minimal OCI runtime spec, as a runtime does
// for a container the kubelet asked for them; it returns the edited spec.
func InjectCDI(specDirs []string, devices []string) (*oci.Spec, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(specDirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI cache over %v: %w", specDirs, err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		return nil, fmt.Errorf("CDI specs in %v: %v", specDirs, errs)
	}
	spec := &oci.Spec{Version: oci.Version, Process: &oci.Process{}, Linux: &oci.Linux{}}
	unresolved, err := cache.InjectDevices(spec, devices...)
	if err != nil {
		return nil, fmt.Errorf("injecting %v (unresolved %v): %w", devices, unresolved, err)
	}
	return spec, nil
}
