// Command fakecri serves the CRI fake runtime of k8s.io/cri-client on a unix socket: a container
// runtime for a real kubelet in tests, where nothing may run containers. It keeps sandboxes and
// containers in memory and reports them running.
//
//	fakecri unix:///tmp/cri.sock
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	fakeremote "k8s.io/cri-client/pkg/fake"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fakecri unix:///path/to/cri.sock")
		os.Exit(2)
	}
	runtime := fakeremote.NewFakeRemoteRuntime()
	// A pulled image gets its name as ID; the kubelet refuses to start containers of an image whose
	// size is 0, the fake's default.
	runtime.ImageService.SetFakeImageSize(1 << 20)
	if err := runtime.Start(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "fakecri:", err)
		os.Exit(1)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	runtime.Stop()
}
