package controlplane

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

// Components in the order they start (and the reverse of the order they stop).
var Components = []string{"etcd", "apiserver", "controller-manager", "scheduler"}

// The controllers kube-controller-manager runs: what turns a pod's claim
// template into a ResourceClaim, the default ServiceAccount of a namespace,
// owner references and namespace deletion. Nothing that needs a kubelet.
var controllers = []string{
	"serviceaccount-controller",
	"resourceclaim-controller",
	"garbage-collector-controller",
	"namespace-controller",
}

// The controllers a booted node's pods need besides: DaemonSet pods, the
// CA bundle in each namespace for in-cluster clients, and the clean-up of
// pods whose node went away, and the taints that follow a node's
// conditions (a new node is tainted not-ready until this controller sees it Ready).
var nodeControllers = []string{
	"daemonset-controller",
	"root-ca-certificate-publisher-controller",
	"pod-garbage-collector-controller",
	"node-lifecycle-controller",
}

// RunEtcd runs embedded etcd (go.etcd.io/etcd/server/v3/embed) with its
// data in DIR/etcd until SIGTERM or SIGINT. Its data outlives the API
// server, so a restarted API server finds every object again.
func RunEtcd(dir string) error {
	st, err := ReadState(dir)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "vp2p"
	cfg.Dir = filepath.Join(dir, "etcd")
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", st.EtcdClientPort)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", st.EtcdPeerPort)}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// A scratch store: an fsync per write only costs time on loopback tests.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd in %s: %w", cfg.Dir, err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
}

// APIServerArgs are kube-apiserver's flags for DIR: etcd of DIR, TLS and
// client certificates from DIR's CA, service-account tokens signed by DIR's
// key, the Node and RBAC authorizers, NodeRestriction on top of the default
// admission plugins.
func APIServerArgs(dir string) ([]string, error) {
	st, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	pki := filepath.Join(dir, "pki")
	p := func(f string) string { return filepath.Join(pki, f) }
	// Without booted nodes no pod reaches the API server through the
	// `kubernetes` Service, so it gets no endpoints. With them (DIR/node-network),
	// it advertises the address the nodes reach it at, as a cluster's does.
	advertise, reconciler := "127.0.0.1", "none"
	if addr, ok, err := NodeNetwork(dir); err != nil {
		return nil, err
	} else if ok {
		advertise, reconciler = addr, "lease"
	}
	return []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", st.EtcdClientPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=" + advertise,
		fmt.Sprintf("--secure-port=%d", st.APIServerPort),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--requestheader-client-ca-file=" + p("ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"),
		"--proxy-client-key-file=" + p("front-proxy-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// As kubeadm sets it: the DRA driver's DaemonSet is privileged.
		"--allow-privileged=true",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=" + reconciler,
		"--profiling=false",
		"--v=1",
	}, nil
}

// ControllerManagerArgs are kube-controller-manager's flags for DIR.
func ControllerManagerArgs(dir string) ([]string, error) {
	run := controllers
	if _, ok, err := NodeNetwork(dir); err != nil {
		return nil, err
	} else if ok {
		run = append(append([]string{}, controllers...), nodeControllers...)
	}
	return clientArgs(dir, "controller-manager", "system:kube-controller-manager",
		func(st *State) int { return st.ControllerManagerPort },
		"--controllers="+strings.Join(run, ","),
		// What the root-CA publisher puts in each namespace's
		// kube-root-ca.crt, the CA a pod's projected token volume carries.
		"--root-ca-file="+filepath.Join(dir, "pki", "ca.crt"),
		// Each controller as its own service account with its bootstrap
		// role, as kubeadm runs it.
		"--use-service-account-credentials=true",
	)
}

// SchedulerProfileFile is where a run may put kube-scheduler's settings
// (KubeSchedulerConfiguration fields below the top level, e.g. `profiles`
// and `percentageOfNodesToScore`, as YAML) before the control plane starts.
func SchedulerProfileFile(dir string) string { return filepath.Join(dir, "scheduler-profile.yaml") }

// SchedulerArgs are kube-scheduler's flags for DIR: the default profile,
// whose DynamicResources plugin allocates claims, or the settings of
// DIR/scheduler-profile.yaml when there is one (written into a
// KubeSchedulerConfiguration with DIR's kubeconfig, no leader election).
func SchedulerArgs(dir string) ([]string, error) {
	args, err := clientArgs(dir, "scheduler", "system:kube-scheduler",
		func(st *State) int { return st.SchedulerPort })
	if err != nil {
		return nil, err
	}
	profile, err := os.ReadFile(SchedulerProfileFile(dir))
	if os.IsNotExist(err) {
		return args, nil
	} else if err != nil {
		return nil, err
	}
	kc, err := kubeconfigOf(dir, "scheduler", "system:kube-scheduler")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "scheduler-config.yaml")
	text := fmt.Sprintf("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"+
		"clientConnection:\n  kubeconfig: %q\nleaderElection:\n  leaderElect: false\n%s", kc, profile)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return nil, err
	}
	return append(args, "--config="+cfg), nil
}

// clientArgs are the flags kube-controller-manager and kube-scheduler share
// for DIR: DIR/pki/NAME.kubeconfig (certificate NAME of USER) for the API
// server and for delegated authentication and authorization, then extra,
// then no leader election and the secure port port(DIR's state) on
// 127.0.0.1 without profiling.
func clientArgs(dir, name, user string, port func(*State) int, extra ...string) ([]string, error) {
	st, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	kc, err := kubeconfigOf(dir, name, user)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
	}
	args = append(args, extra...)
	return append(args,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port(st)),
		"--profiling=false",
		"--v=1",
	), nil
}

// logFile is where a component's output goes.
func logFile(dir, component string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, "logs", component+".log"),
		os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}
