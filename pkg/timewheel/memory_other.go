//go:build !unix

package timewheel

import "errors"

// mapMemory is not available here: slots stay on the Go heap.
func mapMemory(int) ([]byte, error) {
	return nil, errors.New("timewheel: no mapped memory on this system")
}

func unmapMemory([]byte) {}

func dropMemory([]byte) {}
