package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a store goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
