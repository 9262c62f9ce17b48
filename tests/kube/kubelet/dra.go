package kubelet

// kube-peers kubelet-dra: the kubelet's DRA side for one node and one pod,
// from the kubelet's own code, driving one DRA driver.
//
// The plugin manager (k8s.io/kubernetes/pkg/kubelet/pluginmanager: the
// plugin watcher on KUBELET_ROOT/plugins_registry and its reconciler, which
// dials a registration socket, asks GetInfo, calls the handler's
// ValidatePlugin and RegisterPlugin and answers NotifyRegistrationStatus)
// runs with the DRA manager's watcher handler (pkg/kubelet/cm/dra: NewManager
// on KUBELET_ROOT as the kubelet's container manager makes it, Start,
// GetWatcherHandler), added under the plugin type "DRAPlugin" as the kubelet
// adds it. Once the DRA plugin manager knows the driver (GetPlugin), the pod
// is read as system:node:NODE, prepared (Manager.PrepareResources: the
// kubelet's NodePrepareResources), each container's CDI devices taken
// (Manager.GetResources), injected into an OCI spec with the CDI library as a
// container runtime injects them, the KEP-5304 device metadata files among
// the injected mounts decoded with the consumer library Kubernetes publishes
// (k8s.io/dynamic-resource-allocation/devicemetadata), and with --unprepare
// unprepared (Manager.UnprepareResources: NodeUnprepareResources). With
// --hold-prepared FILE the JSON so far is written to FILE once the claims
// are prepared and injected, and unpreparing waits until FILE is deleted
// (so a test can read the node while the claims are prepared).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

const draUsage = `usage: kube-peers kubelet-dra --kubeconfig FILE --node NODE --root KUBELET_ROOT
           --driver NAME --pod NAMESPACE/NAME [--cdi-dir DIR] [--unprepare]
           [--hold-prepared FILE] [--timeout 60s] [--v 2]

Runs the kubelet's plugin manager on KUBELET_ROOT/plugins_registry with the
DRA manager's handler (its state in KUBELET_ROOT, as the kubelet keeps it),
waits until DRA driver NAME is registered, reads the pod as the node (FILE:
a kubeconfig of system:node:NODE), checks it is bound to NODE, prepares its
claims (NodePrepareResources), takes each container's CDI devices, with
--cdi-dir injects them into an OCI spec with the CDI library and decodes the
device metadata files among its mounts, with --unprepare unprepares the
claims (NodeUnprepareResources), and prints one JSON object on stdout. The
kubelet's log goes to stderr. --hold-prepared FILE: once prepared (and
injected), the JSON so far is written to FILE (complete when it appears),
and the run waits until FILE is deleted before it goes on to unprepare.
`

// draArgs is what kubelet-dra was asked.
type draArgs struct {
	kubeconfig string
	node       string
	root       string
	driver     string
	namespace  string
	pod        string
	cdiDir     string
	unprepare  bool
	hold       string
	runFlags
}

func parseDRAArgs(args []string) (*draArgs, error) {
	a := &draArgs{}
	fs := newFlagSet("kubelet-dra", draUsage, &a.runFlags)
	var pod string
	fs.StringVar(&a.kubeconfig, "kubeconfig", "", "kubeconfig of system:node:NODE")
	fs.StringVar(&a.node, "node", "", "the node's name")
	fs.StringVar(&a.root, "root", "", "the kubelet's root directory")
	fs.StringVar(&a.driver, "driver", "", "the DRA driver to wait for")
	fs.StringVar(&pod, "pod", "", "NAMESPACE/NAME of the pod")
	fs.StringVar(&a.cdiDir, "cdi-dir", "", "CDI spec directory to inject from")
	fs.BoolVar(&a.unprepare, "unprepare", false, "unprepare the pod's claims at the end")
	fs.StringVar(&a.hold, "hold-prepared", "", "write the JSON to FILE once prepared and wait until FILE is deleted")
	if err := parseFlags(fs, args, "kubeconfig", "node", "root", "driver"); err != nil {
		return nil, err
	}
	if err := a.check("kubelet-dra"); err != nil {
		return nil, err
	}
	ns, name, ok := strings.Cut(pod, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("kubelet-dra: --pod must be NAMESPACE/NAME (got %q)", pod)
	}
	a.namespace, a.pod = ns, name
	root, err := filepath.Abs(a.root)
	if err != nil {
		return nil, err
	}
	a.root = root
	if a.cdiDir != "" {
		if a.cdiDir, err = filepath.Abs(a.cdiDir); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// RunDRA is the kubelet-dra subcommand.
func RunDRA(args []string) error {
	return runSubcommand(args, parseDRAArgs, func(a *draArgs) error {
		out, err := runDRA(a)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	})
}

func runDRA(a *draArgs) (*draOutput, error) {
	podRef := a.namespace + "/" + a.pod
	rec := &draRecorder{}
	sink := a.textSink()
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1) // the recording wrapper's frame
	}
	logger := logr.New(draRecordingSink{sink, rec})
	ctx, finish := a.start(logger)
	defer finish()

	restConfig, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubelet-dra: kubeconfig %s: %w", a.kubeconfig, err)
	}
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("kubelet-dra: client of %s: %w", a.kubeconfig, err)
	}

	// The DRA manager, as the kubelet's container manager makes and starts
	// it (pkg/kubelet/cm/container_manager_linux.go): its claim checkpoint
	// in the kubelet's root directory.
	if err := os.MkdirAll(a.root, 0o750); err != nil {
		return nil, fmt.Errorf("kubelet-dra: %w", err)
	}
	manager, err := dra.NewManager(logger, client, a.root)
	if err != nil {
		return nil, fmt.Errorf("kubelet-dra: the kubelet's DRA manager on %s: %w", a.root, err)
	}
	// Only the reconcile loop asks for the active pods, and it never gets
	// that far (see notReady).
	activePods := func() []*v1.Pod { return nil }
	getNode := func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	}
	// Sources never "ready": the manager's reconcile loop, which unprepares
	// the claims of pods the kubelet no longer runs, stays idle; this
	// process runs one pod and unprepares it itself.
	if err := manager.Start(ctx, activePods, getNode, notReady{}); err != nil {
		return nil, fmt.Errorf("kubelet-dra: starting the kubelet's DRA manager: %w", err)
	}
	defer manager.Stop()
	pm, ok := manager.GetWatcherHandler().(*draplugin.DRAPluginManager)
	if !ok {
		return nil, fmt.Errorf("kubelet-dra: the DRA manager's watcher handler is a %T, not the DRA plugin manager", manager.GetWatcherHandler())
	}

	// The plugin manager, as the kubelet makes and runs it (kubelet.go).
	regDir := filepath.Join(a.root, "plugins_registry")
	handler := &draHandler{PluginHandler: pm}
	pluginMgr := pluginmanager.NewPluginManager(regDir, &record.FakeRecorder{})
	pluginMgr.AddHandler(pluginwatcherapi.DRAPlugin, handler)
	stop := make(chan struct{})
	defer close(stop)
	go pluginMgr.Run(ctx, notReady{}, stop)
	logger.Info("Waiting for the DRA driver to register", "driverName", a.driver, "dir", regDir, "timeout", a.timeout)

	out := &draOutput{
		Pod:        podRef,
		Node:       a.node,
		Claims:     []draClaim{},
		CDIDevices: map[string][]string{},
		Metadata:   []draMetadata{},
	}

	// 1. Registration.
	reg, err := waitRegistered(ctx, a, pm, handler, rec)
	if err != nil {
		return nil, err
	}
	out.Registered = reg

	// 2. The pod, as the node reads it.
	pod, err := readPod(ctx, client, a)
	if err != nil {
		return nil, err
	}

	// 3. NodePrepareResources.
	if err := manager.PrepareResources(ctx, pod); err != nil {
		return nil, fmt.Errorf("kubelet-dra: pod %s, driver %s: %w", podRef, a.driver, err)
	}
	logger.Info("Prepared the pod's claims", "pod", klog.KObj(pod))
	prepared := true
	// From here on a failure still unprepares when asked to.
	fail := func(err error) (*draOutput, error) {
		if prepared && a.unprepare {
			uctx, ucancel := context.WithTimeout(klog.NewContext(context.Background(), logger), 30*time.Second)
			defer ucancel()
			if uerr := manager.UnprepareResources(uctx, pod); uerr != nil {
				return nil, fmt.Errorf("%w; unpreparing after it: %v", err, uerr)
			}
			return nil, fmt.Errorf("%w (the pod's claims were unprepared)", err)
		}
		return nil, err
	}

	claims, err := podClaims(manager, pod)
	if err != nil {
		return fail(fmt.Errorf("kubelet-dra: pod %s: the prepared claims: %w", podRef, err))
	}
	out.Claims = claims

	var ids []string
	containers := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range containers {
		c := &containers[i]
		info, err := manager.GetResources(pod, c)
		if err != nil {
			return fail(fmt.Errorf("kubelet-dra: pod %s, container %s: CDI devices: %w", podRef, c.Name, err))
		}
		names := []string{}
		for _, d := range info.CDIDevices {
			names = append(names, d.Name)
			if !slices.Contains(ids, d.Name) {
				ids = append(ids, d.Name)
			}
		}
		out.CDIDevices[c.Name] = names
	}

	// 4 and 5. The CDI injection and the device metadata.
	if a.cdiDir != "" {
		spec, err := InjectCDI([]string{a.cdiDir}, ids)
		if err != nil {
			return fail(fmt.Errorf("kubelet-dra: pod %s, driver %s: the CDI devices of the pod's containers: %w", podRef, a.driver, err))
		}
		out.OCI = ociOf(spec)
		md, err := readMetadata(out.OCI.Mounts)
		if err != nil {
			return fail(fmt.Errorf("kubelet-dra: pod %s, driver %s: %w", podRef, a.driver, err))
		}
		out.Metadata = md
	}

	// The claims prepared, held until the caller deletes the file.
	if a.hold != "" {
		out.KubeletErrors = rec.strings()
		if err := holdPrepared(ctx, a.hold, out); err != nil {
			return fail(fmt.Errorf("kubelet-dra: pod %s: %w", podRef, err))
		}
	}

	// 6. NodeUnprepareResources.
	if a.unprepare {
		if err := manager.UnprepareResources(ctx, pod); err != nil {
			return nil, fmt.Errorf("kubelet-dra: pod %s, driver %s: %w", podRef, a.driver, err)
		}
		if manager.PodMightNeedToUnprepareResources(pod.UID) {
			return nil, fmt.Errorf("kubelet-dra: pod %s: the DRA manager still holds claims of the pod after UnprepareResources", podRef)
		}
		prepared = false
		out.Unprepared = true
		logger.Info("Unprepared the pod's claims", "pod", klog.KObj(pod))
	}
	out.KubeletErrors = rec.strings()
	return out, nil
}

// holdPrepared writes out to file (complete when it appears: written beside
// it and renamed) and waits until file is deleted.
func holdPrepared(ctx context.Context, file string, out *draOutput) error {
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--hold-prepared: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("--hold-prepared: %w", err)
	}
	klog.FromContext(ctx).Info("Holding the prepared claims until the file is deleted", "file", file)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("--hold-prepared: %s still there at the end of --timeout", file)
		}
	}
}

// notReady is config.SourcesReady with no source ever seen.
type notReady struct{}

func (notReady) AddSource(string) {}
func (notReady) AllReady() bool   { return false }

// waitRegistered waits until the DRA plugin manager has a plugin of the
// driver; a refusal of the driver by the kubelet's code ends it at once.
func waitRegistered(ctx context.Context, a *draArgs, pm *draplugin.DRAPluginManager, h *draHandler, rec *draRecorder) (*draRegistered, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := pm.GetPlugin(a.driver); err == nil {
			if r := h.registered(a.driver); r != nil {
				return &draRegistered{Driver: r.name, Endpoint: r.endpoint, Versions: r.versions}, nil
			}
		}
		if c := h.refused(a.driver); c != nil {
			return nil, fmt.Errorf("kubelet-dra: the kubelet refused DRA driver %s (endpoint %s, versions %q) in %s: %v",
				a.driver, c.endpoint, c.versions, c.call, c.err)
		}
		// The driver's HTTP/2 server refusing the kubelet's GetInfo
		// request as malformed does not change with retries.
		for _, e := range rec.strings() {
			if strings.Contains(e, "GetInfo") && strings.Contains(e, "PROTOCOL_ERROR") {
				return nil, fmt.Errorf("kubelet-dra: DRA driver %s: the kubelet's plugin watcher cannot get its plugin info: %s; "+
					"the kubelet dials the registration socket by its path, so its :authority is the percent-encoded path, "+
					"which an HTTP/2 server built on Rust's h2 refuses as malformed unless something in front of it replaces it", a.driver, e)
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			msg := fmt.Sprintf("kubelet-dra: DRA driver %s did not register with the kubelet's plugin watcher on %s within %s",
				a.driver, filepath.Join(a.root, "plugins_registry"), a.timeout)
			if others := h.names(); len(others) > 0 {
				msg += fmt.Sprintf(" (plugins seen: %s)", strings.Join(others, ", "))
			}
			if errs := rec.strings(); len(errs) > 0 {
				msg += "; the kubelet's code logged: " + errs[len(errs)-1]
			}
			return nil, errors.New(msg)
		}
	}
}

// readPod reads the pod as the node and checks that it is bound there. The
// Node authorizer lets a node read only the pods bound to it, and learns of
// a binding through its graph, a moment after the API server stores it:
// Forbidden and NotFound are retried for a while.
func readPod(ctx context.Context, client clientset.Interface, a *draArgs) (*v1.Pod, error) {
	podRef := a.namespace + "/" + a.pod
	deadline := time.Now().Add(10 * time.Second)
	for {
		pod, err := client.CoreV1().Pods(a.namespace).Get(ctx, a.pod, metav1.GetOptions{})
		if err == nil {
			if pod.Spec.NodeName != a.node {
				return nil, fmt.Errorf("kubelet-dra: pod %s is bound to node %q, not %s", podRef, pod.Spec.NodeName, a.node)
			}
			return pod, nil
		}
		retry := apierrors.IsForbidden(err) || apierrors.IsNotFound(err)
		if !retry || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("kubelet-dra: reading pod %s as system:node:%s (the Node authorizer lets a node read only pods bound to it): %w", podRef, a.node, err)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// podClaims is what the DRA manager holds for every claim of the pod: asked
// with a container that names all of the pod's claims.
func podClaims(m *dra.Manager, pod *v1.Pod) ([]draClaim, error) {
	all := v1.Container{}
	for _, pc := range pod.Spec.ResourceClaims {
		all.Resources.Claims = append(all.Resources.Claims, v1.ResourceClaim{Name: pc.Name})
	}
	infos, err := m.GetContainerClaimInfos(pod, &all)
	if err != nil {
		return nil, err
	}
	out := []draClaim{}
	for _, info := range infos {
		c := draClaim{
			Namespace: info.Namespace,
			Name:      info.ClaimName,
			UID:       string(info.ClaimUID),
			Devices:   []draPreparedDevice{},
		}
		drivers := make([]string, 0, len(info.DriverState))
		for d := range info.DriverState {
			drivers = append(drivers, d)
		}
		slices.Sort(drivers)
		for _, d := range drivers {
			for _, dev := range info.DriverState[d].Devices {
				c.Devices = append(c.Devices, draPreparedDevice{
					Driver:   d,
					Pool:     dev.PoolName,
					Device:   dev.DeviceName,
					Requests: nonNil(dev.RequestNames),
					CDIIDs:   nonNil(dev.CDIDeviceIDs),
				})
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
