package controlplane

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// State is what `control-plane` recorded in DIR/state.json: the ports it
// chose and the processes it runs. Components read their flags from it.
type State struct {
	// EtcdClientPort is etcd's client port on 127.0.0.1.
	EtcdClientPort int `json:"etcd_client_port"`
	// EtcdPeerPort is etcd's peer port on 127.0.0.1.
	EtcdPeerPort int `json:"etcd_peer_port"`
	// APIServerPort is the API server's secure port on 127.0.0.1.
	APIServerPort int `json:"apiserver_port"`
	// SchedulerPort is kube-scheduler's health port.
	SchedulerPort int `json:"scheduler_port"`
	// ControllerManagerPort is kube-controller-manager's health port.
	ControllerManagerPort int `json:"controller_manager_port"`
	// Supervisor is the pid of the `control-plane` process.
	Supervisor int `json:"supervisor_pid"`
	// Pids maps each component to its process.
	Pids map[string]int `json:"pids"`
}

// Address is the API server's URL.
func (s *State) Address() string {
	return fmt.Sprintf("https://127.0.0.1:%d", s.APIServerPort)
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// ReadState reads DIR/state.json.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(dir), err)
	}
	return &s, nil
}

func (s *State) write(dir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, statePath(dir))
}

// NodeNetworkFile is where a run that boots nodes puts the address those
// nodes reach the API server at (QEMU's user network gives guests the host's
// loopback as 10.0.2.2), before the control plane starts.
func NodeNetworkFile(dir string) string { return filepath.Join(dir, "node-network") }

// NodeNetwork is the address in DIR/node-network, and whether there is one.
func NodeNetwork(dir string) (string, bool, error) {
	b, err := os.ReadFile(NodeNetworkFile(dir))
	if os.IsNotExist(err) {
		return "", false, nil
	} else if err != nil {
		return "", false, err
	}
	addr := strings.TrimSpace(string(b))
	if net.ParseIP(addr) == nil {
		return "", false, fmt.Errorf("%s: %q is not an IP address", NodeNetworkFile(dir), addr)
	}
	return addr, true, nil
}

// freePorts asks the kernel for n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// WriteKubeconfig writes a kubeconfig for the API server of DIR that
// authenticates with a client certificate, or with a bearer token when
// token is not empty.
func WriteKubeconfig(dir, path, user, cert, key, token string) error {
	st, err := ReadState(dir)
	if err != nil {
		return err
	}
	return WriteKubeconfigFor(dir, st.Address(), path, user, cert, key, token)
}

// WriteKubeconfigFor is WriteKubeconfig for the API server at server (the
// address a booted node reaches it at).
func WriteKubeconfigFor(dir, server, path, user, cert, key, token string) error {
	var err error
	ca, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil {
		return err
	}
	auth := &clientcmdapi.AuthInfo{Token: token}
	if token == "" {
		if auth.ClientCertificateData, err = os.ReadFile(cert); err != nil {
			return err
		}
		if auth.ClientKeyData, err = os.ReadFile(key); err != nil {
			return err
		}
	}
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{
			"vp2p": {Server: server, CertificateAuthorityData: ca},
		},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{user: auth},
		Contexts: map[string]*clientcmdapi.Context{
			"vp2p": {Cluster: "vp2p", AuthInfo: user},
		},
		CurrentContext: "vp2p",
	}
	return clientcmd.WriteToFile(cfg, path)
}

// kubeconfigOf writes DIR/pki/NAME.kubeconfig for the certificate NAME.
func kubeconfigOf(dir, name, user string) (string, error) {
	pki := filepath.Join(dir, "pki")
	path := filepath.Join(pki, name+".kubeconfig")
	err := WriteKubeconfig(dir, path, user,
		filepath.Join(pki, name+".crt"), filepath.Join(pki, name+".key"), "")
	return path, err
}

// AdminKubeconfig is the path of DIR's admin kubeconfig (system:masters).
func AdminKubeconfig(dir string) string { return filepath.Join(dir, "admin.kubeconfig") }
