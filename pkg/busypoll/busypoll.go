package busypoll

import (
	"time"

	"golang.org/x/sys/unix"
)

// Poll polls fd until it is readable (or hung up, or in error), or d has
// passed, and reports whether it became ready. It never blocks in the
// kernel.
func Poll(fd int, d time.Duration) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for {
		n, err := unix.Poll(fds[:], 0)
		switch {
		case n > 0:
			return true
		case err != nil && err != unix.EINTR, !time.Now().Before(deadline):
			return false
		}
	}
}
