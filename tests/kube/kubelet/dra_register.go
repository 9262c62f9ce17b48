package kubelet

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// draHandler stands between the plugin manager and the DRA manager's
// handler: every call goes through unchanged, and what the plugin watcher
// passed and what the DRA manager answered are kept.
type draHandler struct {
	cache.PluginHandler

	mu    sync.Mutex
	calls []draCall
}

// draCall is one ValidatePlugin, RegisterPlugin or DeRegisterPlugin call.
type draCall struct {
	call     string
	name     string
	endpoint string
	versions []string
	err      error
}

func (h *draHandler) record(c draCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

func (h *draHandler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := h.PluginHandler.ValidatePlugin(ctx, name, endpoint, versions)
	h.record(draCall{"ValidatePlugin", name, endpoint, slices.Clone(versions), err})
	return err
}

func (h *draHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	h.record(draCall{"RegisterPlugin", name, endpoint, slices.Clone(versions), err})
	return err
}

func (h *draHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(ctx, name, endpoint)
	h.record(draCall{call: "DeRegisterPlugin", name: name, endpoint: endpoint})
}

// registered is the last successful RegisterPlugin of name not followed by
// a DeRegisterPlugin of its endpoint.
func (h *draHandler) registered(name string) *draCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.calls) - 1; i >= 0; i-- {
		c := h.calls[i]
		if c.name != name {
			continue
		}
		switch {
		case c.call == "DeRegisterPlugin":
			return nil
		case c.call == "RegisterPlugin" && c.err == nil:
			return &c
		}
	}
	return nil
}

// refused is the first failed ValidatePlugin or RegisterPlugin of name.
func (h *draHandler) refused(name string) *draCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.calls {
		if c.name == name && c.err != nil {
			return &c
		}
	}
	return nil
}

// names lists the plugins the watcher handed over, with what became of them.
func (h *draHandler) names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range h.calls {
		s := fmt.Sprintf("%s %s at %s", c.call, c.name, c.endpoint)
		if c.err != nil {
			s += fmt.Sprintf(": %v", c.err)
		}
		out = append(out, s)
	}
	return out
}

// draRecorder keeps the errors the kubelet's code logs, with the file:line
// of the Kubernetes source that logged them.
type draRecorder struct {
	mu   sync.Mutex
	errs []string
}

func (r *draRecorder) strings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string{}, r.errs...)
}

// draRecordingSink passes everything to klog's text logger and records errors.
type draRecordingSink struct {
	logr.LogSink
	rec *draRecorder
}

func (s draRecordingSink) Error(err error, msg string, kv ...any) {
	text := msg
	if err != nil {
		text += fmt.Sprintf(": %v", err)
	}
	text += " (" + logCaller() + ")"
	if len(kv) > 0 {
		text += fmt.Sprintf(" %v", kv)
	}
	s.rec.mu.Lock()
	s.rec.errs = append(s.rec.errs, text)
	s.rec.mu.Unlock()
	s.LogSink.Error(err, msg, kv...)
}

// logCaller is the file:line of the first frame outside the logging
// packages (klog, logr) and this one: the Kubernetes code that logged.
func logCaller() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if !strings.Contains(f.File, "/klog/") && !strings.Contains(f.File, "/go-logr/") &&
			!strings.Contains(f.Function, "vp2p/tests/kube") {
			file := f.File
			if i := strings.Index(file, "k8s.io/"); i >= 0 {
				file = file[i:]
			}
			return fmt.Sprintf("%s:%d", file, f.Line)
		}
		if !more {
			return "?"
		}
	}
}

func (s draRecordingSink) WithValues(kv ...any) logr.LogSink {
	return draRecordingSink{s.LogSink.WithValues(kv...), s.rec}
}

func (s draRecordingSink) WithName(name string) logr.LogSink {
	return draRecordingSink{s.LogSink.WithName(name), s.rec}
}
