package kubelet

import (
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// The JSON kubelet-dra prints.
type draOutput struct {
	// What the plugin watcher handed the DRA manager's handler when it
	// registered the driver.
	Registered *draRegistered `json:"registered"`
	Pod        string         `json:"pod"`
	Node       string         `json:"node"`
	// The pod's claims as the DRA manager holds them after preparing.
	Claims []draClaim `json:"claims"`
	// Container name: the CDI device IDs GetResources gave it.
	CDIDevices map[string][]string `json:"cdi_devices"`
	// The OCI spec the CDI library made of all containers' devices (null
	// without --cdi-dir).
	OCI *draOCI `json:"oci"`
	// Each device metadata file among the spec's mounts, decoded.
	Metadata   []draMetadata `json:"metadata"`
	Unprepared bool          `json:"unprepared"`
	// Errors the kubelet's code logged during the run (file:line of the
	// Kubernetes source that logged them).
	KubeletErrors []string `json:"kubelet_errors"`
}

type draRegistered struct {
	Driver   string   `json:"driver"`
	Endpoint string   `json:"endpoint"`
	Versions []string `json:"versions"`
}

type draClaim struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	UID       string              `json:"uid"`
	Devices   []draPreparedDevice `json:"devices"`
}

// draPreparedDevice is one device as NodePrepareResources answered it (the
// DRA manager's claim info).
type draPreparedDevice struct {
	Driver   string   `json:"driver"`
	Pool     string   `json:"pool"`
	Device   string   `json:"device"`
	Requests []string `json:"requests"`
	CDIIDs   []string `json:"cdi_device_ids"`
}

type draOCI struct {
	Devices []draOCIDevice `json:"devices"`
	Mounts  []draOCIMount  `json:"mounts"`
	Env     []string       `json:"env"`
}

type draOCIDevice struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

type draOCIMount struct {
	Destination string   `json:"destination"`
	Source      string   `json:"source"`
	Options     []string `json:"options"`
}

type draMetadata struct {
	File        string `json:"file"`
	Destination string `json:"destination"`
	// The API version the file was decoded from.
	APIVersion string `json:"api_version"`
	// metadata.name/namespace/uid/generation of the file's DeviceMetadata.
	Claim           draMetadataClaim     `json:"claim"`
	PodClaimName    *string              `json:"pod_claim_name"`
	Requests        []draMetadataRequest `json:"requests"`
	ValidationError string               `json:"validation_error"`
}

type draMetadataClaim struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
}

type draMetadataRequest struct {
	Name    string              `json:"name"`
	Devices []draMetadataDevice `json:"devices"`
}

type draMetadataDevice struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
	// Qualified name: the attribute as a ResourceSlice has it
	// ({"string": ...}, {"int": ...}, {"bool": ...} or {"version": ...}).
	Attributes map[string]any `json:"attributes"`
}

// ociOf is what the report keeps of an OCI spec.
func ociOf(spec *oci.Spec) *draOCI {
	out := &draOCI{Devices: []draOCIDevice{}, Mounts: []draOCIMount{}, Env: []string{}}
	if spec.Linux != nil {
		for _, d := range spec.Linux.Devices {
			out.Devices = append(out.Devices, draOCIDevice{Path: d.Path, Type: d.Type, Major: d.Major, Minor: d.Minor})
		}
	}
	for _, m := range spec.Mounts {
		out.Mounts = append(out.Mounts, draOCIMount{Destination: m.Destination, Source: m.Source, Options: nonNil(m.Options)})
	}
	if spec.Process != nil && spec.Process.Env != nil {
		out.Env = spec.Process.Env
	}
	return out
}

func (r draRegistered) String() string {
	return fmt.Sprintf("%s at %s (%v)", r.Driver, r.Endpoint, r.Versions)
}
