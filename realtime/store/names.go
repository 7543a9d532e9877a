package store

import (
	"crypto/sha256"
	"encoding/hex"
)

// dirName turns a subject, group or consumer id into a directory name. Names
// are made of [A-Za-z0-9._-] (subjects may also hold %, consumer ids : and
// @), so they are safe in paths once prefixed ("." and ".." become "n-." and
// "n-.."); names too long for a file name are hashed.
func dirName(name string) string {
	if len(name) <= 200 {
		return "n-" + name
	}
	sum := sha256.Sum256([]byte(name))
	return "h-" + hex.EncodeToString(sum[:16])
}
