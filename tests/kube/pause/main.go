// pause is the first process of a booted node's pod sandboxes (containerd's
// sandbox image, vp2p's own; a node here pulls no image from a registry). It
// holds the pod's namespaces, reaps the orphans reparented to it, and exits
// on SIGINT or SIGTERM, which is what a container runtime asks of it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
