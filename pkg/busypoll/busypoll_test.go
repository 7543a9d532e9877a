package busypoll

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPoll(t *testing.T) {
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	start := time.Now()
	if Poll(p[0], 2*time.Millisecond) {
		t.Fatal("an empty pipe polled readable")
	}
	if waited := time.Since(start); waited < 2*time.Millisecond {
		t.Fatalf("gave up after %v, before the 2ms budget", waited)
	}
	go func() {
		time.Sleep(time.Millisecond)
		unix.Write(p[1], []byte("x"))
	}()
	if !Poll(p[0], 5*time.Second) {
		t.Fatal("bytes written during the spin were not seen")
	}
	unix.Close(p[1])
	var b [1]byte
	unix.Read(p[0], b[:])
	if !Poll(p[0], 5*time.Second) {
		t.Fatal("a hung-up pipe did not poll ready")
	}
}

// TestBudget: spins go on while they catch, stop after GiveUp misses in a
// row, come back once every Probe chances as a probe, and resume for good
// when a probe catches.
func TestBudget(t *testing.T) {
	var b Budget
	for i := range GiveUp {
		if !b.Should() {
			t.Fatalf("no spin after %d misses", i)
		}
		b.Record(false)
	}
	for round := range 3 {
		for i := 1; i < Probe; i++ {
			if b.Should() {
				t.Fatalf("round %d: spun %d chances after giving up", round, i)
			}
		}
		if !b.Should() {
			t.Fatalf("round %d: no probe after %d chances", round, Probe)
		}
		b.Record(false) // the probe missed too
	}
	for i := 1; i < Probe; i++ {
		b.Should()
	}
	if !b.Should() {
		t.Fatal("no probe")
	}
	b.Record(true) // the probe caught bytes
	for i := range 2 * Probe {
		if !b.Should() {
			t.Fatalf("no spin %d chances after a probe caught bytes", i)
		}
		b.Record(true)
	}
}
