//go:build race

package store

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// tests of allocation counts skip.
const raceEnabled = true
