package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// MountTmpfs mounts a tmpfs of the given size (mount's size option, such
// as "8m") on a new temporary directory, unmounts it when the test ends and
// returns the directory: a real file system that fills up. It skips the
// test when not run as root or when the mount fails.
func MountTmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	return mnt
}
