// Command svcproxy is a drop-in replacement for kube-proxy.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/svcproxy/svcproxy/internal/app"
)

func main() {
	os.Exit(run())
}

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.NewCommand().ExecuteContext(ctx); err != nil {
		return 1
	}
	return 0
}
