//go:build race

package realtime_test

const raceEnabled = true
