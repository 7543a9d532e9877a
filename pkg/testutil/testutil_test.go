package testutil

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckFor(t *testing.T) {
	var n atomic.Int32
	CheckFor(t, time.Second, time.Millisecond, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n.Load() != 3 {
		t.Fatalf("fn called %d times", n.Load())
	}
	Eventually(t, time.Second, "counter", func() bool { return n.Add(1) > 5 })
}
