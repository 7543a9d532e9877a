package metaserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qmq-go/qmq/metaserver/ctl"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// snapshot returns every key under the prefix but metaservers/ with its
// mod revision and value, as one string to compare.
func snapshot(t testing.TB, s *Server) string {
	t.Helper()
	resp, err := s.etcd.Get(context.Background(), s.keys.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		if strings.HasPrefix(string(kv.Key), s.keys.prefix+dirMetaServers) {
			continue
		}
		fmt.Fprintf(&b, "%s@%d=%s\n", kv.Key, kv.ModRevision, kv.Value)
	}
	return b.String()
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// tokenFlag writes token to a file only its owner reads and returns the
// qmqctl flag naming it.
func tokenFlag(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return "--token-file=" + path
}

// qmqctlRunner returns a function that runs qmqctl in process against the
// meta server at meta (HTTP host:port), fails the test unless it exits
// with want, and returns its output.
func qmqctlRunner(t *testing.T, meta string) func(want int, args ...string) string {
	return func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		code := ctl.Main(append([]string{"--meta-http=" + meta}, args...), &out, &errOut)
		if code != want {
			t.Fatalf("qmqctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
}
