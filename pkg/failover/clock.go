package failover

import "time"

// clockBase is the origin of Now's readings.
var clockBase = time.Now()

// Now is the process's monotonic clock in nanoseconds (since the package
// was loaded): what leases, lease stamps and the gate's deadline are
// measured in. It never goes back, whatever the wall clock does; readings
// of two processes are not comparable (a lease stamp is only ever compared
// by the process that made it).
func Now() int64 { return int64(time.Since(clockBase)) }

// At returns the time.Time of a Now reading (with its monotonic clock).
func At(ns int64) time.Time { return clockBase.Add(time.Duration(ns)) }

// Since returns how long ago a Now reading was.
func Since(ns int64) time.Duration { return time.Duration(Now() - ns) }
