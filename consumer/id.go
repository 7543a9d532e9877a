package consumer

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
)

// defaultConsumerID is stable across restarts of the same program on the
// same host: host@hash(executable path, working directory).
func defaultConsumerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	exe, _ := os.Executable()
	wd, _ := os.Getwd()
	sum := sha256.Sum256([]byte(exe + "\x00" + wd))
	return sanitize(host) + "@" + hex.EncodeToString(sum[:6])
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, s)
}
