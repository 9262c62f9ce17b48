package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrRunning says DIR already has a live control plane.
var ErrRunning = errors.New("already running")

// How long a component may take to answer its health check.
const startTimeout = 4 * time.Minute

func readyPath(dir string) string   { return filepath.Join(dir, "ready") }
func holdPath(dir, c string) string { return filepath.Join(dir, "hold-"+c) }

// alive says whether pid is a live process.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// Running returns DIR's state when its supervisor is alive.
func Running(dir string) (*State, bool) {
	st, err := ReadState(dir)
	if err != nil || !alive(st.Supervisor) {
		return st, false
	}
	return st, true
}

type child struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

// Supervise runs the control plane of DIR in the foreground: certificates
// and ports, then etcd, the API server, the controller manager and the
// scheduler as child processes of this binary, each waited for until it
// answers its health check; then DIR/admin.kubeconfig, DIR/address and
// DIR/ready. It stops them (in reverse) on SIGTERM or SIGINT, or when the
// process watchPid (if not 0) is gone. A component stopped with
// [StopComponent] stays down until [StartComponent]; any other exit of a
// component stops the whole control plane with an error.
func Supervise(dir string, watchPid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if st, ok := Running(dir); ok {
		return fmt.Errorf("%s: %w (supervisor pid %d, API server %s)", dir, ErrRunning, st.Supervisor, st.Address())
	}
	os.Remove(readyPath(dir))
	for _, c := range Components {
		os.Remove(holdPath(dir, c))
	}
	if err := ensurePKI(filepath.Join(dir, "pki")); err != nil {
		return fmt.Errorf("certificates in %s: %w", dir, err)
	}
	st, err := ReadState(dir)
	if err != nil {
		// A new directory: five free loopback ports. A directory used before
		// keeps its ports, which etcd's member record names.
		ports, err := freePorts(5)
		if err != nil {
			return err
		}
		st = &State{EtcdClientPort: ports[0], EtcdPeerPort: ports[1], APIServerPort: ports[2],
			SchedulerPort: ports[3], ControllerManagerPort: ports[4]}
	}
	st.Supervisor = os.Getpid()
	st.Pids = map[string]int{}
	if err := st.write(dir); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	children := map[string]*child{}
	shutdown := func() {
		os.Remove(readyPath(dir))
		for i := len(Components) - 1; i >= 0; i-- {
			if c := children[Components[i]]; c != nil {
				terminate(c)
			}
		}
		st.Pids = map[string]int{}
		st.write(dir)
	}
	defer shutdown()
	spawnChild := func(name string) (*child, error) {
		c, err := spawn(self, dir, name)
		if err != nil {
			return nil, err
		}
		children[name] = c
		st.Pids[name] = c.cmd.Process.Pid
		return c, st.write(dir)
	}
	for _, name := range Components {
		c, err := spawnChild(name)
		if err != nil {
			return err
		}
		if err := waitHealthy(ctx, dir, st, c); err != nil {
			return err
		}
	}
	if err := WriteKubeconfig(dir, AdminKubeconfig(dir), "vp2p-admin",
		filepath.Join(dir, "pki", "admin.crt"), filepath.Join(dir, "pki", "admin.key"), ""); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "address"), []byte(st.Address()+"\n"), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	os.Remove(filepath.Join(bin, "kubectl"))
	if err := os.Symlink(self, filepath.Join(bin, "kubectl")); err != nil {
		return err
	}
	if err := os.WriteFile(readyPath(dir), []byte(st.Address()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "kube-peers: control plane up in %s: API server %s\n", dir, st.Address())
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if watchPid != 0 && !alive(watchPid) {
			return nil
		}
		for _, name := range Components {
			c := children[name]
			held := exists(holdPath(dir, name))
			if c == nil {
				if !held {
					// StartComponent waits for its health; the supervisor
					// goes on watching, so that a component stopped again
					// while it starts is a hold, not a failure.
					fmt.Fprintf(os.Stderr, "kube-peers: starting %s again\n", name)
					if _, err := spawnChild(name); err != nil {
						return err
					}
				}
				continue
			}
			select {
			case err := <-c.done:
				children[name] = nil
				delete(st.Pids, name)
				st.write(dir)
				if !held {
					return fmt.Errorf("%s exited (%v); its log is %s", name, err,
						filepath.Join(dir, "logs", name+".log"))
				}
				fmt.Fprintf(os.Stderr, "kube-peers: %s stopped (held)\n", name)
			default:
			}
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func spawn(self, dir, name string) (*child, error) {
	log, err := logFile(dir, name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, name, dir)
	cmd.Stdout = log
	cmd.Stderr = log
	// The component goes with its supervisor, however the supervisor ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() {
		c.done <- cmd.Wait()
		log.Close()
	}()
	return c, nil
}

func terminate(c *child) {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		// The whole plane goes: an API server's wait for its watches
		// (up to its 60 s request timeout) serves nobody.
		c.cmd.Process.Kill()
		<-c.done
	}
}

// The health URL of a component and whether it is served with DIR's CA.
func healthURL(st *State, name string) (string, bool) {
	switch name {
	case "etcd":
		return fmt.Sprintf("http://127.0.0.1:%d/health", st.EtcdClientPort), false
	case "apiserver":
		return st.Address() + "/readyz", true
	case "scheduler":
		return fmt.Sprintf("https://127.0.0.1:%d/healthz", st.SchedulerPort), false
	default:
		return fmt.Sprintf("https://127.0.0.1:%d/healthz", st.ControllerManagerPort), false
	}
}

// adminClient is an HTTP client that trusts DIR's CA and presents the admin
// certificate, for the API server's /readyz.
func adminClient(dir string) (*http.Client, error) {
	pki := filepath.Join(dir, "pki")
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

func waitHealthy(ctx context.Context, dir string, st *State, c *child) error {
	url, withCA := healthURL(st, c.name)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The scheduler's and controller manager's serving certificates are
		// self-signed at start; only their health is asked.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	if withCA {
		var err error
		if client, err = adminClient(dir); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(startTimeout)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case err := <-c.done:
			c.done <- err
			return fmt.Errorf("%s exited while starting (%v); its log is %s", c.name, err,
				filepath.Join(dir, "logs", c.name+".log"))
		case <-ctx.Done():
			return fmt.Errorf("stopped while %s was starting", c.name)
		case <-time.After(250 * time.Millisecond):
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body[:n])))
	}
	return fmt.Errorf("%s not healthy within %s (last answer: %s); its log is %s", c.name, startTimeout, last,
		filepath.Join(dir, "logs", c.name+".log"))
}

// StopComponent stops one component of the running control plane of DIR
// and keeps it down (the others stay up) until [StartComponent]: SIGTERM,
// or SIGKILL when kill is set (a crash). A graceful API server waits for its
// open watches up to its request timeout (60 s) before it exits.
func StopComponent(dir, name string, kill bool) error {
	st, ok := Running(dir)
	if !ok {
		return fmt.Errorf("%s: no control plane runs", dir)
	}
	pid := st.Pids[name]
	if pid == 0 {
		return fmt.Errorf("%s: %s is not running", dir, name)
	}
	if err := os.WriteFile(holdPath(dir, name), nil, 0o644); err != nil {
		return err
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	syscall.Kill(pid, sig)
	return waitFor(fmt.Sprintf("%s to stop", name), 90*time.Second, func() bool {
		st, err := ReadState(dir)
		return err == nil && st.Pids[name] == 0 && !alive(pid)
	})
}

// StartComponent starts again a component stopped by [StopComponent] and
// waits until it answers its health check.
func StartComponent(dir, name string) error {
	st, ok := Running(dir)
	if !ok {
		return fmt.Errorf("%s: no control plane runs", dir)
	}
	if err := os.Remove(holdPath(dir, name)); err != nil {
		return fmt.Errorf("%s: %s was not stopped by stop-component: %w", dir, name, err)
	}
	if err := waitFor(fmt.Sprintf("%s to start", name), 30*time.Second, func() bool {
		st, err := ReadState(dir)
		return err == nil && st.Pids[name] != 0
	}); err != nil {
		return err
	}
	url, withCA := healthURL(st, name)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if withCA {
		var err error
		if client, err = adminClient(dir); err != nil {
			return err
		}
	}
	return waitFor(name+" to answer "+url, startTimeout, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func waitFor(what string, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// Up starts `control-plane DIR` in the background (a session of its own,
// output in DIR/logs/control-plane.log) and waits until it is ready.
func Up(dir string) (*State, error) {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if st, ok := Running(dir); ok {
		return st, fmt.Errorf("%s: %w (supervisor pid %d, API server %s)", dir, ErrRunning, st.Supervisor, st.Address())
	}
	os.Remove(readyPath(dir))
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	log, err := logFile(dir, "control-plane")
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(self, "control-plane", dir)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(2*startTimeout + time.Minute)
	for !exists(readyPath(dir)) {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the control plane stopped while starting (%v); see %s", err,
				filepath.Join(dir, "logs", "control-plane.log"))
		case <-deadline:
			return nil, fmt.Errorf("the control plane was not ready in time; see %s",
				filepath.Join(dir, "logs", "control-plane.log"))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return ReadState(dir)
}

// Down stops the control plane of DIR and waits until its processes are gone.
func Down(dir string) error {
	st, ok := Running(dir)
	if !ok {
		return fmt.Errorf("%s: no control plane runs", dir)
	}
	syscall.Kill(st.Supervisor, syscall.SIGTERM)
	return waitFor("the control plane to stop", 90*time.Second, func() bool {
		if alive(st.Supervisor) {
			return false
		}
		for _, pid := range st.Pids {
			if alive(pid) {
				return false
			}
		}
		return true
	})
}
