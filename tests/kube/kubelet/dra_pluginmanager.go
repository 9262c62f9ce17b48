package kubelet

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/resolver"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/operationexecutor"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/pluginwatcher"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/reconciler"
)

// newPluginManager is the kubelet's plugin manager on sockDir: by default
// exactly what the kubelet makes (pluginmanager.NewPluginManager).
//
// With authorityLocalhost the same parts are put together as
// NewPluginManager does (the plugin watcher, the desired and actual state of
// the world, the reconciler with its 1 s loop, the operation executor with
// the kubelet's operation generator), except that the operation generator
// is given each registration socket PATH as the target
// kube-peers-uds://PATH. The kubelet dials the bare path
// (pluginmanager/operationexecutor/operation_generator.go, dial:
// grpc.DialContext(ctx, unixSocketPath, ...) with a dialer of "unix"
// addresses), for which grpc-go's passthrough resolver makes the
// :authority the percent-encoded path (grpc clientconn.go,
// determineAuthority: encodeAuthority(endpoint)). The kube-peers-uds
// resolver below hands the kubelet's dialer the same bare path and sets the
// :authority to "localhost", what grpc-go's unix resolver sends for the
// DRA socket, which the DRA manager dials as "unix:"+endpoint. Everything
// else (GetInfo, ValidatePlugin, RegisterPlugin, NotifyRegistrationStatus,
// the actual state of the world keyed by the bare path) is the kubelet's
// code unchanged. No kubelet does this: it stands in for a driver that
// accepts the kubelet's :authority.
func newPluginManager(sockDir string, authorityLocalhost bool) pluginmanager.PluginManager {
	if !authorityLocalhost {
		return pluginmanager.NewPluginManager(sockDir, &record.FakeRecorder{})
	}
	asw := cache.NewActualStateOfWorld()
	dsw := cache.NewDesiredStateOfWorld()
	gen := unixURLGenerator{operationexecutor.NewOperationGenerator(&record.FakeRecorder{})}
	return &assembledPluginManager{
		watcher:    pluginwatcher.NewWatcher(sockDir, dsw),
		reconciler: reconciler.NewReconciler(operationexecutor.NewOperationExecutor(gen), time.Second, dsw, asw),
	}
}

// assembledPluginManager runs as pluginmanager's pluginManager.Run does:
// the watcher started, then the reconciler, until stopCh.
type assembledPluginManager struct {
	watcher    *pluginwatcher.Watcher
	reconciler reconciler.Reconciler
}

func (pm *assembledPluginManager) Run(ctx context.Context, _ config.SourcesReady, stopCh <-chan struct{}) {
	if err := pm.watcher.Start(ctx, stopCh); err != nil {
		klog.FromContext(ctx).Error(err, "The desired_state_of_world populator (plugin watcher) starts failed!")
		return
	}
	go pm.reconciler.Run(ctx)
	<-stopCh
}

func (pm *assembledPluginManager) AddHandler(pluginType string, h cache.PluginHandler) {
	pm.reconciler.AddHandler(pluginType, h)
}

// udsScheme is the scheme of the kube-peers-uds resolver.
const udsScheme = "kube-peers-uds"

const unixURL = udsScheme + "://"

func init() { resolver.Register(udsLocalhost{}) }

// udsLocalhost resolves kube-peers-uds://PATH to the address PATH as it is
// (the kubelet's dialer dials it as a unix socket), with :authority
// "localhost".
type udsLocalhost struct{}

func (udsLocalhost) Scheme() string { return udsScheme }

func (udsLocalhost) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	err := cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: t.URL.Path}}})
	return udsResolved{}, err
}

func (udsLocalhost) OverrideAuthority(resolver.Target) string { return "localhost" }

type udsResolved struct{}

func (udsResolved) ResolveNow(resolver.ResolveNowOptions) {}
func (udsResolved) Close()                                {}

// unixURLGenerator hands the kubelet's operation generator
// kube-peers-uds://PATH for a registration socket PATH, and keeps the actual
// state of the world keyed by PATH, as the reconciler expects.
type unixURLGenerator struct {
	operationexecutor.OperationGenerator
}

func (g unixURLGenerator) GenerateRegisterPluginFunc(ctx context.Context, socketPath string, uuid types.UID,
	handlers map[string]cache.PluginHandler, asw operationexecutor.ActualStateOfWorldUpdater) func() error {
	return g.OperationGenerator.GenerateRegisterPluginFunc(ctx, unixURL+socketPath, uuid, handlers, barePathASW{asw})
}

type barePathASW struct {
	operationexecutor.ActualStateOfWorldUpdater
}

func (a barePathASW) AddPlugin(ctx context.Context, info cache.PluginInfo) error {
	info.SocketPath = strings.TrimPrefix(info.SocketPath, unixURL)
	return a.ActualStateOfWorldUpdater.AddPlugin(ctx, info)
}

func (a barePathASW) RemovePlugin(socketPath string) {
	a.ActualStateOfWorldUpdater.RemovePlugin(strings.TrimPrefix(socketPath, unixURL))
}
