//go:build !linux

package realtime

import "time"

// runQueueWait is known on Linux only.
func runQueueWait() (time.Duration, bool) { return 0, false }
