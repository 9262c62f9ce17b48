package kubelet

// The command line and logging every kube-peers subcommand of this package
// shares: its usage and flag errors on stderr, --timeout bounding the whole
// run, --v the klog verbosity of the kubelet's code, whose log goes to
// stderr.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// runFlags are the flags every subcommand takes.
type runFlags struct {
	timeout   time.Duration
	verbosity int
}

// newFlagSet is the flag set of subcommand name, printing usage for -h,
// with --timeout and --v into r.
func newFlagSet(name, usage string, r *runFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	fs.DurationVar(&r.timeout, "timeout", 60*time.Second, "bound on the whole run")
	fs.IntVar(&r.verbosity, "v", 2, "klog verbosity of the kubelet's code")
	return fs
}

// parseFlags parses args with fs and checks that nothing but flags was
// given and that each of the required (string) flags, in order, is not
// empty. Its errors start with the subcommand's name.
func parseFlags(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			return fmt.Errorf("%s: --%s is required", fs.Name(), name)
		}
	}
	return nil
}

// check checks the shared flags' values; the errors start with cmd.
func (r *runFlags) check(cmd string) error {
	if r.timeout <= 0 {
		return fmt.Errorf("%s: --timeout must be positive", cmd)
	}
	return nil
}

// textSink is klog's text logger on stderr at --v.
func (r *runFlags) textSink() logr.LogSink {
	cfg := textlogger.NewConfig(textlogger.Verbosity(r.verbosity), textlogger.Output(os.Stderr))
	return textlogger.NewLogger(cfg).GetSink()
}

// start makes logger klog's logger and gives a context that carries it and
// ends at --timeout; finish cancels the context and clears klog's logger.
func (r *runFlags) start(logger logr.Logger) (ctx context.Context, finish func()) {
	klog.SetLogger(logger)
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), r.timeout)
	return ctx, func() {
		cancel()
		klog.ClearLogger()
	}
}

// runSubcommand parses args with parse and runs run on what it gives; asking
// for the usage (-h, --help) is no error.
func runSubcommand[A any](args []string, parse func([]string) (*A, error), run func(*A) error) error {
	a, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	return run(a)
}
