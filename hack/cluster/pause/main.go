// The pod sandbox's "pause" process for the local cluster's real node: what Kubernetes' build/pause/linux/pause.c
// does, in Go, so that the node builds with the Go toolchain alone (CGO off, static, no C compiler).
// It holds the pod's namespaces as PID 1, reaps the zombies that processes of the pod leave to it, and exits 0 on
// SIGINT or SIGTERM; `-v` prints its version.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

var version = "unknown" // set by the build: -X main.version=<Kubernetes version>

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause.go %s\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", s)
			os.Exit(0)
		}
		for { // every exited child, not only the one that sent this SIGCHLD (signals coalesce)
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
