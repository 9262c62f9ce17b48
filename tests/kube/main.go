// kube-peers: the Kubernetes peers of vp2p's tests, from Kubernetes' own
// code. A control plane on loopback (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler), kubectl, and the kubelet's
// plugin clients (plugin watcher and DRA manager, device manager), with the
// CDI library injecting what a DRA driver prepared.
//
//	kube-peers up DIR | down DIR            the control plane in the background
//	kube-peers control-plane DIR [--watch-pid PID]
//	                                        the same in the foreground
//	kube-peers stop-component DIR NAME [--kill]
//	                                        stop one component (etcd kept) ...
//	kube-peers start-component DIR NAME     ... and start it again
//	kube-peers node-kubeconfig DIR NODE OUT [--server URL]
//	                                        a kubeconfig as system:node:NODE
//	kube-peers proxy-kubeconfig DIR OUT [--server URL]
//	                                        a kubeconfig as system:kube-proxy
//	kube-peers kubectl ARGS...              kubectl (also as argv[0] "kubectl")
//	kube-peers metrics-parse < SCRAPE       a Prometheus text scrape as JSON
//	kube-peers kubelet-dra ...              the kubelet's DRA side for one node
//	kube-peers device-manager ...           the kubelet's device-plugin side
//	kube-peers etcd|apiserver|controller-manager|scheduler DIR
//	                                        one component (run by control-plane)
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	"vp2p/tests/kube/controlplane"
	"vp2p/tests/kube/kubelet"
	"vp2p/tests/kube/metrics"
)

func usage() {
	fmt.Fprintln(os.Stderr, `usage: kube-peers up DIR | down DIR | control-plane DIR [--watch-pid PID]
       kube-peers stop-component DIR NAME [--kill] | start-component DIR NAME
       kube-peers node-kubeconfig DIR NODE OUT [--server URL]
       kube-peers proxy-kubeconfig DIR OUT [--server URL]
       kube-peers kubectl ARGS... | metrics-parse < SCRAPE
       kube-peers kubelet-dra --help | device-manager --help`)
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "kube-peers: %v\n", err)
	if errors.Is(err, controlplane.ErrRunning) {
		os.Exit(3)
	}
	os.Exit(1)
}

func main() {
	if filepath.Base(os.Args[0]) == "kubectl" {
		os.Exit(cli.Run(kubectl.NewDefaultKubectlCommand()))
	}
	if len(os.Args) < 2 {
		usage()
	}
	sub, args := os.Args[1], os.Args[2:]
	dirArg := func(n int) {
		if len(args) < n {
			usage()
		}
	}
	switch sub {
	case "up":
		dirArg(1)
		st, err := controlplane.Up(args[0])
		if err != nil {
			fail(err)
		}
		fmt.Printf("API server %s\nkubeconfig %s\n", st.Address(), controlplane.AdminKubeconfig(mustAbs(args[0])))
	case "down":
		dirArg(1)
		if err := controlplane.Down(args[0]); err != nil {
			fail(err)
		}
	case "control-plane":
		dirArg(1)
		watch := 0
		if len(args) == 3 && args[1] == "--watch-pid" {
			if _, err := fmt.Sscan(args[2], &watch); err != nil {
				usage()
			}
		} else if len(args) != 1 {
			usage()
		}
		if err := controlplane.Supervise(args[0], watch); err != nil {
			fail(err)
		}
	case "stop-component":
		dirArg(2)
		kill := len(args) == 3 && args[2] == "--kill"
		if err := controlplane.StopComponent(args[0], args[1], kill); err != nil {
			fail(err)
		}
	case "start-component":
		dirArg(2)
		if err := controlplane.StartComponent(args[0], args[1]); err != nil {
			fail(err)
		}
	case "node-kubeconfig":
		dirArg(3)
		server := serverArg(args[0], args[3:])
		cert, key, err := controlplane.NodeIdentity(args[0], args[1])
		if err == nil {
			err = controlplane.WriteKubeconfigFor(args[0], server, args[2], "system:node:"+args[1], cert, key, "")
		}
		if err != nil {
			fail(err)
		}
	case "proxy-kubeconfig":
		dirArg(2)
		server := serverArg(args[0], args[2:])
		cert, key, err := controlplane.ClientIdentity(args[0], "kube-proxy", "system:kube-proxy")
		if err == nil {
			err = controlplane.WriteKubeconfigFor(args[0], server, args[1], "system:kube-proxy", cert, key, "")
		}
		if err != nil {
			fail(err)
		}
	case "kubectl":
		os.Args = append([]string{"kubectl"}, args...)
		os.Exit(cli.Run(kubectl.NewDefaultKubectlCommand()))
	case "metrics-parse":
		if err := metrics.Parse(os.Stdin, os.Stdout); err != nil {
			fail(err)
		}
	case "kubelet-dra":
		if err := kubelet.RunDRA(args); err != nil {
			fail(err)
		}
	case "device-manager":
		if err := kubelet.RunDeviceManager(args); err != nil {
			fail(err)
		}
	case "etcd":
		dirArg(1)
		if err := controlplane.RunEtcd(args[0]); err != nil {
			fail(err)
		}
	case "apiserver", "controller-manager", "scheduler":
		dirArg(1)
		component(sub, args[0])
	default:
		usage()
	}
}

// component runs one of Kubernetes' own commands with DIR's flags.
func component(name, dir string) {
	var (
		flags []string
		err   error
	)
	switch name {
	case "apiserver":
		flags, err = controlplane.APIServerArgs(dir)
	case "controller-manager":
		flags, err = controlplane.ControllerManagerArgs(dir)
	default:
		flags, err = controlplane.SchedulerArgs(dir)
	}
	if err != nil {
		fail(err)
	}
	// Each command is built only when it runs: the API server's sets up its
	// signal handler when constructed, once per process.
	cmd := map[string]func() int{
		"apiserver": func() int {
			c := apiserver.NewAPIServerCommand()
			c.SetArgs(flags)
			return cli.Run(c)
		},
		"controller-manager": func() int {
			c := kcm.NewControllerManagerCommand()
			c.SetArgs(flags)
			return cli.Run(c)
		},
		"scheduler": func() int {
			c := scheduler.NewSchedulerCommand()
			c.SetArgs(flags)
			return cli.Run(c)
		},
	}[name]
	os.Exit(cmd())
}

// serverArg is the API server's address a kubeconfig names: `--server URL`
// when given (how a booted node reaches it), else DIR's loopback address.
func serverArg(dir string, rest []string) string {
	switch {
	case len(rest) == 2 && rest[0] == "--server":
		return rest[1]
	case len(rest) != 0:
		usage()
	}
	st, err := controlplane.ReadState(dir)
	if err != nil {
		fail(err)
	}
	return st.Address()
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		fail(err)
	}
	return a
}
