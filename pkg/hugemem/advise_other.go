//go:build !linux

package hugemem

// advise does nothing: huge pages are asked for on Linux only.
func advise([]byte) {}
