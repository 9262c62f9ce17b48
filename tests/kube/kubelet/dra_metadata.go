package kubelet

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
)

// readMetadata decodes every device metadata file the OCI spec mounts under
// the protocol's directory, from its host path, with the consumer library
// (as a reader in the container, such as KubeVirt's virt-launcher, reads it
// from the container path), validation on.
func readMetadata(mounts []draOCIMount) ([]draMetadata, error) {
	out := []draMetadata{}
	for _, m := range mounts {
		if !strings.HasPrefix(path.Clean(m.Destination), metadata.ContainerDir+"/") {
			continue
		}
		md, err := decodeMetadataFile(m.Source)
		if err != nil {
			return nil, fmt.Errorf("device metadata %s (mounted at %s): %w", m.Source, m.Destination, err)
		}
		md.Destination = m.Destination
		out = append(out, *md)
	}
	return out, nil
}

func decodeMetadataFile(file string) (*draMetadata, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		dm         metadata.DeviceMetadata
		validation error
		gvk        schema.GroupVersionKind
	)
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(f), &dm,
		devicemetadata.DecodeMetadataWithValidationResult(&validation),
		devicemetadata.DecodeMetadataStoreGVKResult(&gvk)); err != nil {
		return nil, err
	}
	out := &draMetadata{
		File:       file,
		APIVersion: gvk.GroupVersion().String(),
		Claim: draMetadataClaim{
			Namespace:  dm.Namespace,
			Name:       dm.Name,
			UID:        string(dm.UID),
			Generation: dm.Generation,
		},
		PodClaimName: dm.PodClaimName,
		Requests:     []draMetadataRequest{},
	}
	if validation != nil {
		out.ValidationError = validation.Error()
	}
	for _, r := range dm.Requests {
		req := draMetadataRequest{Name: r.Name, Devices: []draMetadataDevice{}}
		for _, d := range r.Devices {
			dev := draMetadataDevice{Driver: d.Driver, Pool: d.Pool, Device: d.Name, Attributes: map[string]any{}}
			names := make([]string, 0, len(d.Attributes))
			for n := range d.Attributes {
				names = append(names, string(n))
			}
			sort.Strings(names)
			for _, n := range names {
				raw, err := json.Marshal(d.Attributes[resourceapi.QualifiedName(n)])
				if err != nil {
					return nil, fmt.Errorf("attribute %s of device %s: %w", n, d.Name, err)
				}
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					return nil, err
				}
				dev.Attributes[n] = v
			}
			req.Devices = append(req.Devices, dev)
		}
		out.Requests = append(out.Requests, req)
	}
	return out, nil
}
