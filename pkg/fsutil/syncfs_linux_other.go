//go:build linux && !amd64 && !arm64

package fsutil

// sysSyncfs is unknown here: SyncFS reports errors.ErrUnsupported and
// callers fsync each file.
const sysSyncfs = -1
