package metaserver_test

import (
	"os"
	"path/filepath"
	"testing"
)

// tokenFlag writes token to a file only its owner reads and returns the
// qmqctl flag naming it (qmqctl takes no secret on its command line).
func tokenFlag(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return "--token-file=" + path
}
