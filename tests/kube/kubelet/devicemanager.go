package kubelet

// kube-peers device-manager: the kubelet's device-manager side of the device
// plugin API v1beta1, from the kubelet's own code, driving one device plugin.
//
// The registration server is k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/
// plugin/v1beta1's NewServer, which the kubelet's device manager runs on
// DIR/kubelet.sock: it checks a RegisterRequest (version, resource name),
// dials the plugin's endpoint with the kubelet's client (NewPluginClient) and
// runs its ListAndWatch stream, which feeds the ClientHandler. The
// ClientHandler here stands where the kubelet's ManagerImpl stands (which
// cannot be made on another directory than /var/lib/kubelet/device-plugins):
// on connection it asks GetDevicePluginOptions as ManagerImpl.PluginConnected
// does, and it keeps the first ListAndWatch list. The calls that follow go
// through the kubelet client's API() with the requests the kubelet's
// endpointImpl builds (one container per request).

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

const deviceManagerUsage = `usage: kube-peers device-manager --dir DEVICE_PLUGINS_DIR --resource NAME --size N
           [--must-include ID,...] [--available ID,...] [--timeout 60s] [--v 2]

Serves the kubelet's device-plugin Registration service (the kubelet's own
code) on DEVICE_PLUGINS_DIR/kubelet.sock, waits for a plugin to register
NAME, takes its first ListAndWatch list, asks GetPreferredAllocation (when
the plugin's options offer it) for N of --available (default: every healthy
device) with --must-include, Allocates the answer and prints one JSON object
on stdout. The kubelet's log goes to stderr.
`

// dmArgs is what device-manager was asked.
type dmArgs struct {
	dir       string
	resource  string
	size      int
	must      []string
	available []string // nil: every healthy device
	runFlags
}

func parseDeviceManagerArgs(args []string) (*dmArgs, error) {
	a := &dmArgs{}
	fs := newFlagSet("device-manager", deviceManagerUsage, &a.runFlags)
	var must, available string
	availableSet := false
	fs.StringVar(&a.dir, "dir", "", "the kubelet's device-plugins directory")
	fs.StringVar(&a.resource, "resource", "", "the extended resource to wait for")
	fs.IntVar(&a.size, "size", 0, "allocation size")
	fs.StringVar(&must, "must-include", "", "comma-separated device IDs")
	fs.Func("available", "comma-separated device IDs (default: every healthy device)", func(s string) error {
		available, availableSet = s, true
		return nil
	})
	if err := parseFlags(fs, args, "dir", "resource"); err != nil {
		return nil, err
	}
	if a.size <= 0 {
		return nil, fmt.Errorf("device-manager: --size must be at least 1 (got %d)", a.size)
	}
	if err := a.check("device-manager"); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(a.dir)
	if err != nil {
		return nil, err
	}
	a.dir = dir
	a.must = splitIDs(must)
	if availableSet {
		a.available = splitIDs(available)
		if a.available == nil {
			a.available = []string{}
		}
	}
	return a, nil
}

func splitIDs(s string) []string {
	var out []string
	for _, id := range strings.Split(s, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// The JSON printed.
type dmOutput struct {
	Resource  string      `json:"resource"`
	Endpoint  string      `json:"endpoint"`
	Options   dmOptions   `json:"options"`
	Devices   []dmDevice  `json:"devices"`
	Request   dmRequest   `json:"request"`
	Preferred []string    `json:"preferred"`
	Allocate  dmAllocated `json:"allocate"`
}

type dmOptions struct {
	PreStartRequired                bool `json:"pre_start_required"`
	GetPreferredAllocationAvailable bool `json:"get_preferred_allocation_available"`
}

type dmDevice struct {
	ID     string  `json:"id"`
	Health string  `json:"health"`
	NUMA   []int64 `json:"numa"`
}

type dmRequest struct {
	Available   []string `json:"available"`
	MustInclude []string `json:"must_include"`
	Size        int      `json:"size"`
}

type dmMount struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	ReadOnly      bool   `json:"read_only"`
}

type dmDeviceSpec struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	Permissions   string `json:"permissions"`
}

type dmAllocated struct {
	Envs        map[string]string `json:"envs"`
	Mounts      []dmMount         `json:"mounts"`
	Devices     []dmDeviceSpec    `json:"devices"`
	Annotations map[string]string `json:"annotations"`
	CDIDevices  []string          `json:"cdi_devices"`
}

// connected is one plugin the kubelet's server connected to.
type connected struct {
	plugin  plugin.DevicePlugin
	options *api.DevicePluginOptions
}

// dmHandler is the RegistrationHandler and ClientHandler given to the
// kubelet's registration server (ManagerImpl's place).
type dmHandler struct {
	resource string

	mu        sync.Mutex
	conn      *connected                // the latest connection of the resource
	first     *api.ListAndWatchResponse // the first list of the resource
	firstConn *connected                // the connection first came on
	ready     chan struct{}             // closed once first is set
}

// CleanupPluginDirectory is ManagerImpl.CleanupPluginDirectory
// (pkg/kubelet/cm/devicemanager/manager.go): the server calls it on Start and
// it removes every socket left in the directory (directories, other files and
// the checkpoint stay), as a starting kubelet does.
func (h *dmHandler) CleanupPluginDirectory(logger klog.Logger, dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		path := filepath.Join(dir, name)
		if name == "kubelet_internal_checkpoint" {
			continue
		}
		st, err := os.Stat(path)
		if err != nil {
			logger.Error(err, "Failed to stat file", "path", path)
			continue
		}
		if st.IsDir() || st.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
			logger.Error(err, "Failed to remove file", "path", path)
		}
	}
	return errors.Join(errs...)
}

// PluginConnected asks the plugin's options as ManagerImpl.PluginConnected
// does (an error here fails the plugin's Register call).
func (h *dmHandler) PluginConnected(ctx context.Context, resource string, p plugin.DevicePlugin) error {
	options, err := p.API().GetDevicePluginOptions(ctx, &api.Empty{})
	if err != nil {
		return fmt.Errorf("failed to get device plugin options: %v", err)
	}
	klog.FromContext(ctx).Info("Device plugin connected", "resourceName", resource,
		"socket", p.SocketPath(), "preStartRequired", options.PreStartRequired,
		"getPreferredAllocationAvailable", options.GetPreferredAllocationAvailable)
	if resource != h.resource {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conn = &connected{plugin: p, options: options}
	return nil
}

func (h *dmHandler) PluginDisconnected(logger klog.Logger, resource, socket string) {
	logger.V(2).Info("Device plugin disconnected", "resourceName", resource, "socket", socket)
}

// PluginListAndWatchReceiver keeps the first list of the resource.
func (h *dmHandler) PluginListAndWatchReceiver(logger klog.Logger, resource string, resp *api.ListAndWatchResponse) {
	logger.V(2).Info("ListAndWatch list", "resourceName", resource, "devices", len(resp.Devices))
	if resource != h.resource {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// The kubelet's client runs ListAndWatch only after PluginConnected.
	if h.first == nil && h.conn != nil {
		h.first, h.firstConn = resp, h.conn
		close(h.ready)
	}
}

// rejection is an error the kubelet's code logged, with where it logged it.
type rejection struct {
	msg   string
	err   error
	where string
	kv    []any
}

func (r rejection) String() string {
	s := fmt.Sprintf("%s: %v (%s)", r.msg, r.err, r.where)
	if len(r.kv) > 0 {
		s += fmt.Sprintf(" %v", r.kv)
	}
	return s
}

// recordingSink passes everything to klog's text logger on stderr and keeps
// the errors the kubelet's code logs, with the file:line that logged them.
type recordingSink struct {
	logr.LogSink
	rec   *recorder
	depth int // frames between the caller and logr.Logger (klog's own)
}

type recorder struct {
	mu   sync.Mutex
	errs []rejection
}

// Init: logr.New tells the sink its depth; one more for this wrapper's frame
// (Info and Error below).
func (s recordingSink) Init(info logr.RuntimeInfo) {
	info.CallDepth++
	s.LogSink.Init(info)
}

func (s recordingSink) Info(level int, msg string, kv ...any) {
	s.LogSink.Info(level, msg, kv...)
}

func (s recordingSink) Error(err error, msg string, kv ...any) {
	where := "?"
	// Frames: this method, logr.Logger.Error, depth more, the caller.
	if _, file, line, ok := runtime.Caller(2 + s.depth); ok {
		if i := strings.Index(file, "k8s.io/"); i >= 0 {
			file = file[i:]
		}
		where = fmt.Sprintf("%s:%d", file, line)
	}
	s.rec.mu.Lock()
	s.rec.errs = append(s.rec.errs, rejection{msg: msg, err: err, where: where, kv: kv})
	s.rec.mu.Unlock()
	s.LogSink.Error(err, msg, kv...)
}

func (s recordingSink) WithValues(kv ...any) logr.LogSink {
	return recordingSink{s.LogSink.WithValues(kv...), s.rec, s.depth}
}

func (s recordingSink) WithName(name string) logr.LogSink {
	return recordingSink{s.LogSink.WithName(name), s.rec, s.depth}
}

// WithCallDepth: klog's legacy functions (klog.FromContext without a logger
// in the context ends there) log through the global logger with a depth.
func (s recordingSink) WithCallDepth(depth int) logr.LogSink {
	inner := s.LogSink
	if cd, ok := inner.(logr.CallDepthLogSink); ok {
		inner = cd.WithCallDepth(depth)
	}
	return recordingSink{inner, s.rec, s.depth + depth}
}

func (r *recorder) snapshot() []rejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rejection(nil), r.errs...)
}

// isRefusal: the registration server refused the RegisterRequest itself
// (version or resource name), which a retry cannot change.
func isRefusal(r rejection) bool {
	return strings.HasPrefix(r.msg, "Bad registration request")
}

// RunDeviceManager is the device-manager subcommand.
func RunDeviceManager(args []string) error {
	return runSubcommand(args, parseDeviceManagerArgs, runDeviceManager)
}

func runDeviceManager(a *dmArgs) error {
	rec := &recorder{}
	logger := logr.New(recordingSink{LogSink: a.textSink(), rec: rec})
	// klog's own verbosity too: code logging through klog's global functions
	// checks it before the logger's.
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("v", strconv.Itoa(a.verbosity))
	_ = kfs.Set("logtostderr", "true")
	ctx, finish := a.start(logger)
	defer finish()

	h := &dmHandler{resource: a.resource, ready: make(chan struct{})}
	sock := filepath.Join(a.dir, "kubelet.sock")
	server, err := plugin.NewServer(logger, sock, h, h)
	if err != nil {
		return fmt.Errorf("device-manager: the kubelet's registration server: %w", err)
	}
	if err := server.Start(logger); err != nil {
		return fmt.Errorf("device-manager: starting the kubelet's registration server on %s: %w", sock, err)
	}
	defer func() {
		if err := server.Stop(logger); err != nil {
			logger.Error(err, "Stopping the registration server")
		}
	}()
	logger.Info("Waiting for a device plugin to register", "resourceName", a.resource, "socket", sock, "timeout", a.timeout)

	// Wait for the registration, the options and the first list.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-h.ready:
			break wait
		case <-tick.C:
			for _, r := range rec.snapshot() {
				if isRefusal(r) {
					return fmt.Errorf("device-manager: the kubelet's registration server refused the plugin: %s", r)
				}
			}
			if err := server.Check(nil); err != nil {
				return fmt.Errorf("device-manager: %w", err)
			}
		case <-ctx.Done():
			msg := fmt.Sprintf("device-manager: no device plugin registered %s and sent a ListAndWatch list within %s", a.resource, a.timeout)
			h.mu.Lock()
			if h.conn != nil {
				msg += " (it registered and gave its options, but no list came)"
			}
			h.mu.Unlock()
			if errs := rec.snapshot(); len(errs) > 0 {
				msg += "; the kubelet's code logged: " + errs[len(errs)-1].String()
			}
			msg += fmt.Sprintf("; sockets in %s now: %v", a.dir, sockets(a.dir))
			return errors.New(msg)
		}
	}

	h.mu.Lock()
	conn, first := h.firstConn, h.first
	h.mu.Unlock()
	p := conn.plugin

	out := dmOutput{
		Resource: p.Resource(),
		Endpoint: p.SocketPath(),
		Options: dmOptions{
			PreStartRequired:                conn.options.GetPreStartRequired(),
			GetPreferredAllocationAvailable: conn.options.GetGetPreferredAllocationAvailable(),
		},
		Devices: []dmDevice{},
	}
	var healthy []string
	for _, d := range first.Devices {
		numa := []int64{}
		for _, n := range d.GetTopology().GetNodes() {
			numa = append(numa, n.GetID())
		}
		out.Devices = append(out.Devices, dmDevice{ID: d.ID, Health: d.Health, NUMA: numa})
		if d.Health == api.Healthy {
			healthy = append(healthy, d.ID)
		}
	}
	available := a.available
	if available == nil {
		available = healthy
	}
	if available == nil {
		available = []string{}
	}
	must := a.must
	if must == nil {
		must = []string{}
	}
	out.Request = dmRequest{Available: available, MustInclude: must, Size: a.size}

	// GetPreferredAllocation, only when the plugin's options offer it (as
	// ManagerImpl.callGetPreferredAllocationIfAvailable), with the request
	// endpointImpl.getPreferredAllocation builds.
	ids := append([]string(nil), must...)
	if out.Options.GetPreferredAllocationAvailable {
		resp, err := p.API().GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{
			ContainerRequests: []*api.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs:   available,
				MustIncludeDeviceIDs: must,
				AllocationSize:       int32(a.size),
			}},
		})
		if err != nil {
			return fmt.Errorf("device-manager: device plugin GetPreferredAllocation rpc failed with err: %v", err)
		}
		if n := len(resp.ContainerResponses); n != 1 {
			return fmt.Errorf("device-manager: GetPreferredAllocation answered %d container responses for 1 container request", n)
		}
		out.Preferred = resp.ContainerResponses[0].DeviceIDs
		if out.Preferred == nil {
			out.Preferred = []string{}
		}
		if err := usablePreferred(out.Preferred, available, must, a.size); err != nil {
			return fmt.Errorf("device-manager: the kubelet would not take GetPreferredAllocation's answer %v as it is: %v", out.Preferred, err)
		}
		ids = out.Preferred
	} else {
		// The kubelet then takes devices from the available set itself
		// (in map order); here: must-include first, then available in order.
		logger.Info("The plugin does not offer GetPreferredAllocation; allocating by hand")
		seen := map[string]bool{}
		for _, id := range ids {
			seen[id] = true
		}
		for _, id := range available {
			if len(ids) >= a.size {
				break
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if len(ids) != a.size {
			return fmt.Errorf("device-manager: requested number of devices unavailable for %s. Requested: %d, Available: %d", a.resource, a.size, len(available))
		}
	}

	// Allocate, with the request endpointImpl.allocate builds.
	alloc, err := p.API().Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return fmt.Errorf("device-manager: device plugin Allocate rpc failed for %v: %v", ids, err)
	}
	// manager.go's allocateContainerResources refuses an empty answer and
	// uses the first container response.
	if len(alloc.ContainerResponses) == 0 {
		return fmt.Errorf("device-manager: no containers return in allocation response %v", alloc)
	}
	if n := len(alloc.ContainerResponses); n != 1 {
		return fmt.Errorf("device-manager: Allocate answered %d container responses for 1 container request", n)
	}
	c := alloc.ContainerResponses[0]
	out.Allocate = dmAllocated{
		Envs:        map[string]string{},
		Mounts:      []dmMount{},
		Devices:     []dmDeviceSpec{},
		Annotations: map[string]string{},
		CDIDevices:  []string{},
	}
	for k, v := range c.Envs {
		out.Allocate.Envs[k] = v
	}
	for k, v := range c.Annotations {
		out.Allocate.Annotations[k] = v
	}
	for _, m := range c.Mounts {
		out.Allocate.Mounts = append(out.Allocate.Mounts, dmMount{m.ContainerPath, m.HostPath, m.ReadOnly})
	}
	for _, d := range c.Devices {
		out.Allocate.Devices = append(out.Allocate.Devices, dmDeviceSpec{d.ContainerPath, d.HostPath, d.Permissions})
	}
	for _, d := range c.CdiDevices {
		out.Allocate.CDIDevices = append(out.Allocate.CDIDevices, d.Name)
	}

	// PreStartContainer when the options ask for it, as the kubelet does
	// before starting the container (endpointImpl.preStartContainer).
	if out.Options.PreStartRequired {
		pctx, pcancel := context.WithTimeout(ctx, api.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
		_, err := p.API().PreStartContainer(pctx, &api.PreStartContainerRequest{DevicesIds: ids})
		pcancel()
		if err != nil {
			return fmt.Errorf("device-manager: device plugin PreStartContainer rpc failed with err: %v", err)
		}
	}

	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// usablePreferred: the kubelet (manager.go devicesToAllocate) takes the
// preferred set's intersection with the available devices and falls back to
// its own choice for what is missing; an answer it takes as it is has `size`
// distinct available devices including every must-include one.
func usablePreferred(preferred, available, must []string, size int) error {
	avail := map[string]bool{}
	for _, id := range available {
		avail[id] = true
	}
	seen := map[string]bool{}
	for _, id := range preferred {
		if seen[id] {
			return fmt.Errorf("%s is listed twice", id)
		}
		seen[id] = true
		if !avail[id] {
			return fmt.Errorf("%s is not available", id)
		}
	}
	for _, id := range must {
		if !seen[id] {
			return fmt.Errorf("must-include %s is missing", id)
		}
	}
	if len(preferred) != size {
		return fmt.Errorf("%d devices for allocation size %d", len(preferred), size)
	}
	return nil
}

// sockets lists the sockets in dir, for a failure message.
func sockets(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{err.Error()}
	}
	out := []string{}
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			out = append(out, e.Name())
		}
	}
	return out
}
