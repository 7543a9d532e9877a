package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Clients nobody here wrote talk to a gateway on a whole cluster: curl, a
// Python program on its standard library and a Node program on its
// built-in fetch. Each publishes (text, binary, delayed), pulls, acks,
// nacks with a retry-after and sees the retry, and sees an ack of an id it
// no longer holds refused with a problem document (testdata/roundtrip.*).
func TestClients_RoundTrip(t *testing.T) {
	cl := startCluster(t, 30*time.Second, nil)
	for _, tc := range []struct {
		name, runtime string
		args          []string
	}{
		{"curl", "bash", []string{"testdata/roundtrip.sh"}},
		{"python", "python3", []string{"testdata/roundtrip.py"}},
		{"node", "node", []string{"testdata/roundtrip.mjs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, need := range []string{tc.runtime, "curl", "python3"} {
				if need == "curl" && tc.name != "curl" || need == "python3" && tc.name == "node" {
					continue
				}
				if _, err := exec.LookPath(need); err != nil {
					t.Skipf("%s is not installed: skipping the %s client (CI installs it)", need, tc.name)
				}
			}
			args := append([]string{}, tc.args...)
			args[0], _ = filepath.Abs(args[0])
			args = append(args, cl.url, "clients."+tc.name)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			out, err := exec.CommandContext(ctx, tc.runtime, args...).CombinedOutput()
			t.Logf("%s client took %v", tc.name, time.Since(start).Round(time.Millisecond))
			if os.Getenv("QMQ_TRACE") != "" {
				t.Logf("%s", out)
			}
			if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
				t.Fatalf("%s client: %v\n%s", tc.name, err, out)
			}
		})
	}
}
