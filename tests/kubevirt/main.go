// kubevirt-hook-client calls a domain hook through KubeVirt v1.9.0's own
// client code, the code virt-launcher runs, and prints what virt-launcher
// would define.
//
//	kubevirt-hook-client plugin  --socket PATH --domain FILE --vmi FILE
//	                             [--plugin FILE] [--context Boot] [--again]
//	kubevirt-hook-client sidecar --socket PATH --domain FILE --vmi FILE
//	kubevirt-hook-client shim    --dir DIR -- SHIM [ARG...]
//
// plugin: a VEP 190 plugin's DomainHookService (vp2p's `p2p-host kubevirt
// plugin-hook`) through plugins.ApplyDomainHooks
// (pkg/virt-launcher/virtwrap/plugins/pipeline.go), which converts the
// DomainSpec to libvirtxml, calls MutateDomain (sidecar.go, callSidecarHook)
// and converts the answer back; util.SetDomainSpecStrWithHooks
// (pkg/virt-launcher/virtwrap/util/libvirt_helper.go) defines the XML it
// returns and keeps the DomainSpec it returns. With --again it defines a
// second time from that DomainSpec as it is in memory, as virt-launcher's
// allocateHotplugPorts does after adding root ports on q35 (the printed
// "spec" is no substitute: encoding/xml reads no <qemu:commandline> back into
// a DomainSpec, while the one in memory keeps it, translate.FromLibvirtDomain
// transferQEMUCommandline). The Plugin is the first
// `kind: Plugin` document of --plugin (a manifest), else one named vp2p with
// failureStrategy Fail and one sidecar hook on
// /var/run/kubevirt-plugin/vp2p/<the socket's file name>.
//
// sidecar: a hook sidecar (KubeVirt's sidecar-shim) through the hook
// manager (pkg/hooks/manager.go: Collect, then OnDefineDomain), followed by
// what util.ApplySidecarHooks does with the answer (unmarshal into a
// DomainSpec; that package itself needs libvirt's C library).
//
// The domain file is read into virt-launcher's DomainSpec
// (pkg/virt-launcher/virtwrap/api) as virt-launcher reads a domain back from
// libvirt; the VMI file into a v1.VirtualMachineInstance, which KubeVirt
// marshals again for the hook.
//
// KubeVirt's client code finds the hooks at fixed paths: a plugin's socket
// must be the Plugin's socketPath, under /var/run/kubevirt-plugin/<plugin>/
// (validateSocketPath), and the hook manager reads
// /var/run/kubevirt-hooks/<dir>/<socket>; the shim listens in
// /var/run/kubevirt-hooks. So that nothing is written on the host, the
// program runs itself again in a mount namespace of its own (and a user
// namespace unless it runs as root) with a tmpfs over /var/run and the given
// socket (plugin), the socket's directory (sidecar) or DIR (shim) bound
// there.
//
// plugin and sidecar print one JSON object: "sent" (the domain the hook
// gets), "defined" (the domain virt-launcher would define), "spec" (the
// DomainSpec virt-launcher keeps, marshalled with encoding/xml) and "error"
// (the error virt-launcher would see; then the exit status is 2); with
// --again, "again" holds the same four for the second define.
package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	v1 "kubevirt.io/api/core/v1"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"

	"kubevirt.io/kubevirt/pkg/hooks"
	api "kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/translate"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/plugins"
)

const usage = `usage:
  kubevirt-hook-client plugin  --socket PATH --domain FILE --vmi FILE [--plugin FILE] [--context Boot|MigrationTarget|MigrationSource] [--again]
  kubevirt-hook-client sidecar --socket PATH --domain FILE --vmi FILE
  kubevirt-hook-client shim    --dir DIR -- SHIM [ARG...]`

// nsEnv marks the run inside the namespace; its value is the binds, JSON.
const nsEnv = "KUBEVIRT_HOOK_CLIENT_BINDS"

// The hook manager's directory for the one sidecar (virt-launcher's pod
// mounts each sidecar's emptyDir at /var/run/kubevirt-hooks/hook-sidecar-N).
const sidecarDir = hooks.HookSocketsSharedDirectory + "/hook-sidecar-0"

// inNS: this run is the one in the namespace.
var inNS bool

type result struct {
	Sent    string  `json:"sent"`
	Defined string  `json:"defined"`
	Spec    string  `json:"spec"`
	Error   string  `json:"error"`
	Again   *result `json:"again,omitempty"`
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "kubevirt-hook-client: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail("%s", usage)
	}
	if s := os.Getenv(nsEnv); s != "" {
		var b []bind
		if err := json.Unmarshal([]byte(s), &b); err != nil {
			fail("%s: %v", nsEnv, err)
		}
		os.Unsetenv(nsEnv)
		inNS = true
		if err := mountBinds(b); err != nil {
			fail("in the mount namespace: %v", err)
		}
	}
	switch os.Args[1] {
	case "plugin":
		pluginCmd(os.Args[2:])
	case "sidecar":
		sidecarCmd(os.Args[2:])
	case "shim":
		shimCmd(os.Args[2:])
	default:
		fail("unknown command %q\n%s", os.Args[1], usage)
	}
}

type inputs struct {
	socket, domain, vmi string
}

func readInputs(fs *flag.FlagSet, args []string) (inputs, *api.DomainSpec, *v1.VirtualMachineInstance) {
	var in inputs
	fs.StringVar(&in.socket, "socket", "", "the hook's unix socket")
	fs.StringVar(&in.domain, "domain", "", "the domain, libvirt XML")
	fs.StringVar(&in.vmi, "vmi", "", "the VirtualMachineInstance, JSON")
	if err := fs.Parse(args); err != nil {
		os.Exit(1)
	}
	if in.socket == "" || in.domain == "" || in.vmi == "" || fs.NArg() != 0 {
		fail("%s", usage)
	}
	d, err := os.ReadFile(in.domain)
	if err != nil {
		fail("%v", err)
	}
	spec := &api.DomainSpec{}
	if err := xml.Unmarshal(d, spec); err != nil {
		fail("%s is not a domain virt-launcher reads: %v", in.domain, err)
	}
	// encoding/xml does not read xmlns:qemu into DomainSpec.XmlNS (the tag
	// names no namespace); virt-launcher's own DomainSpec has it from its
	// defaults (api/defaults.go) whenever it was declared.
	if ns := rootQEMUNamespace(d); ns != "" {
		spec.XmlNS = ns
	}
	j, err := os.ReadFile(in.vmi)
	if err != nil {
		fail("%v", err)
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(j, vmi); err != nil {
		fail("%s is not a VirtualMachineInstance: %v", in.vmi, err)
	}
	return in, spec, vmi
}

func pluginCmd(args []string) {
	fs := flag.NewFlagSet("plugin", flag.ContinueOnError)
	manifest := fs.String("plugin", "", "a manifest whose first `kind: Plugin` document is the Plugin")
	context := fs.String("context", string(pluginv1alpha1.InvocationContextBoot), "the invocation context")
	again := fs.Bool("again", false, "define a second time from the DomainSpec kept in memory")
	in, spec, vmi := readInputs(fs, args)

	var p pluginv1alpha1.Plugin
	if *manifest != "" {
		p = readPlugin(*manifest)
	} else {
		p = pluginv1alpha1.Plugin{}
		p.Name = "vp2p"
		p.Spec.FailureStrategy = pluginv1alpha1.FailureStrategyFail
		p.Spec.DomainHooks = []pluginv1alpha1.DomainHook{{Sidecar: &pluginv1alpha1.SidecarDomainHook{
			SocketPath: "/var/run/kubevirt-plugin/vp2p/" + filepath.Base(in.socket),
		}}}
	}
	var hookSocket string
	for _, h := range p.Spec.DomainHooks {
		if h.Sidecar != nil {
			hookSocket = h.Sidecar.SocketPath
			break
		}
	}
	if hookSocket == "" {
		fail("the Plugin %s has no sidecar domain hook", p.Name)
	}
	if filepath.Clean(in.socket) != hookSocket && !inNS {
		reexec([]bind{{Src: in.socket, Dst: hookSocket}})
	}

	// As virt-launcher: the store holds the Plugins virt-handler sent,
	// SetDomainSpecStrWithHooks takes them from it.
	plugins.SetPlugins([]pluginv1alpha1.Plugin{p})
	ctx := pluginv1alpha1.InvocationContext(*context)
	r, kept := definePlugin(vmi, spec, ctx)
	if *again && r.Error == "" {
		a, _ := definePlugin(vmi, kept, ctx)
		r.Again = &a
		if a.Error != "" {
			r.Error = "again: " + a.Error
		}
	}
	emit(r)
}

// definePlugin: one define through the plugin pipeline, and the DomainSpec
// virt-launcher keeps (SetDomainSpecStrWithHooks copies it into its own).
func definePlugin(vmi *v1.VirtualMachineInstance, spec *api.DomainSpec, ctx pluginv1alpha1.InvocationContext) (result, *api.DomainSpec) {
	var r result
	if d, err := translate.ToLibvirtDomain(spec); err != nil {
		r.Error = err.Error()
		return r, nil
	} else if s, err := d.Marshal(); err != nil {
		r.Error = err.Error()
		return r, nil
	} else {
		r.Sent = s
	}
	updated, defined, err := plugins.ApplyDomainHooks(plugins.GetPlugins(), vmi, spec, ctx)
	if err != nil {
		r.Error = err.Error()
		return r, nil
	}
	r.Defined = defined
	r.Spec = marshalSpec(updated)
	return r, updated
}

func sidecarCmd(args []string) {
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	in, spec, vmi := readInputs(fs, args)
	if filepath.Dir(filepath.Clean(in.socket)) != sidecarDir && !inNS {
		reexec([]bind{{Src: filepath.Dir(in.socket), Dst: sidecarDir, Dir: true}})
	}

	var r result
	sent, _ := xml.MarshalIndent(spec, "", "\t")
	r.Sent = string(sent)
	// As virt-launcher: Collect when it starts (cmd/virt-launcher), then
	// OnDefineDomain in ApplySidecarHooks.
	m := hooks.GetManager()
	if err := m.Collect(1, 30*time.Second); err != nil {
		r.Error = err.Error()
		emit(r)
	}
	defined, err := m.OnDefineDomain(spec, vmi)
	if err != nil {
		r.Error = err.Error()
		emit(r)
	}
	// util.ApplySidecarHooks: the answer into the DomainSpec virt-launcher keeps.
	kept := &api.DomainSpec{}
	if err := xml.Unmarshal([]byte(defined), kept); err != nil {
		r.Error = err.Error()
		emit(r)
	}
	r.Defined = defined
	r.Spec = marshalSpec(kept)
	emit(r)
}

func shimCmd(args []string) {
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	dir := fs.String("dir", "", "the directory the shim sees as /var/run/kubevirt-hooks")
	if err := fs.Parse(args); err != nil {
		os.Exit(1)
	}
	if *dir == "" || fs.NArg() == 0 {
		fail("%s", usage)
	}
	if !inNS {
		reexec([]bind{{Src: *dir, Dst: hooks.HookSocketsSharedDirectory, Dir: true}})
	}
	shim, err := exec.LookPath(fs.Arg(0))
	if err != nil {
		fail("%v", err)
	}
	err = syscall.Exec(shim, fs.Args(), os.Environ())
	fail("exec %s: %v", shim, err)
}

func readPlugin(path string) pluginv1alpha1.Plugin {
	text, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	for _, doc := range strings.Split("\n"+string(text), "\n---") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			fail("%s: %v", path, err)
		}
		if meta.Kind != "Plugin" {
			continue
		}
		var p pluginv1alpha1.Plugin
		if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			fail("%s: the Plugin: %v", path, err)
		}
		return p
	}
	fail("%s has no kind: Plugin", path)
	panic("unreachable")
}

// rootQEMUNamespace: the value of xmlns:qemu on the root element, if any.
func rootQEMUNamespace(doc []byte) string {
	dec := xml.NewDecoder(strings.NewReader(string(doc)))
	for {
		t, err := dec.RawToken()
		if err != nil {
			return ""
		}
		if se, ok := t.(xml.StartElement); ok {
			for _, a := range se.Attr {
				if a.Name.Space == "xmlns" && a.Name.Local == "qemu" {
					return a.Value
				}
			}
			return ""
		}
	}
}

func marshalSpec(s *api.DomainSpec) string {
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return "marshal: " + err.Error()
	}
	return string(b)
}

func emit(r result) {
	b, _ := json.MarshalIndent(r, "", "  ")
	fmt.Println(string(b))
	if r.Error != "" {
		os.Exit(2)
	}
	os.Exit(0)
}

// bind: Src (a path outside) is mounted at Dst inside the namespace.
type bind struct {
	Src string
	Dst string
	Dir bool
}

// reexec runs this program again with the same arguments in a new mount
// namespace (and user namespace, mapping the caller to root, unless it is
// root already) and exits with its status.
func reexec(binds []bind) {
	for i := range binds {
		abs, err := filepath.Abs(binds[i].Src)
		if err != nil {
			fail("%v", err)
		}
		binds[i].Src = abs
	}
	b, _ := json.Marshal(binds)
	self, err := os.Executable()
	if err != nil {
		fail("%v", err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), nsEnv+"="+string(b))
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGTERM}
	if os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr
	// Signals go on to the child, which this process waits for (and reaps);
	// Pdeathsig covers a SIGKILL of this one.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fail("a mount namespace for KubeVirt's fixed hook paths (needs root or unprivileged user namespaces): %v", err)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fail("%v", err)
	}
	os.Exit(0)
}

// mountBinds: a private tmpfs over /var/run with each bind on it.
func mountBinds(binds []bind) error {
	// The sources are opened first: one under /run would be hidden by the tmpfs.
	fds := make([]int, len(binds))
	for i, b := range binds {
		fd, err := unix.Open(b.Src, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", b.Src, err)
		}
		fds[i] = fd
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	run, err := filepath.EvalSymlinks("/var/run")
	if err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", run, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", run, err)
	}
	for i, b := range binds {
		if b.Dir {
			if err := os.MkdirAll(b.Dst, 0o755); err != nil {
				return err
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(b.Dst), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(b.Dst, nil, 0o600); err != nil {
				return err
			}
		}
		src := fmt.Sprintf("/proc/self/fd/%d", fds[i])
		if err := syscall.Mount(src, b.Dst, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s at %s: %w", b.Src, b.Dst, err)
		}
		syscall.Close(fds[i])
	}
	return nil
}
