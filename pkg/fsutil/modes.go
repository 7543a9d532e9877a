package fsutil

import (
	"io/fs"
	"os"
)

// Modes of everything a server stores: message logs, indexes, checkpoints,
// metadata, locks and caches are readable by the server's user only, and so
// are the directories that hold them (a broker's data is its users'
// messages). The process umask can only narrow them.
const (
	// FileMode is the mode of every data file a server creates.
	FileMode fs.FileMode = 0o600
	// DirMode is the mode of every data directory a server creates.
	DirMode fs.FileMode = 0o700
)

// MkdirPrivate creates dir (and its parents) with DirMode and narrows an
// existing dir to DirMode: a server's data directory, made beforehand by
// an operator's mkdir with the usual 0755, holds nothing others may read.
func MkdirPrivate(fsys FS, dir string) error {
	if err := fsys.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&^DirMode != 0 {
		return os.Chmod(dir, DirMode)
	}
	return nil
}
