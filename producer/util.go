package producer

import (
	"context"
	"os"
	"time"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// clientName names this process to the meta server when WithMetaServers
// makes the producer's metaclient: kind@host.
func clientName(kind string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return kind + "@" + host
}
