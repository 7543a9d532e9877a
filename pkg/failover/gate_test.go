package failover

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
)

// The gate lets writes through in the writable and alone states only, a
// lease's writes only until its deadline, and refuses with the status
// producers act on: readonly (go elsewhere) or not master.
func TestGate_StatesAndRefusals(t *testing.T) {
	g := NewGate("g1")
	if g.Open() || !errors.Is(g.Err(), protocol.ErrNotMaster) {
		t.Fatalf("a new gate: open %v, err %v", g.Open(), g.Err())
	}
	for _, s := range []protocol.WriteState{protocol.WriteWritable, protocol.WriteAlone} {
		g.set(s, 0, "ok")
		if !g.Open() || g.Err() != nil || g.State() != s {
			t.Fatalf("state %v: open %v, err %v", s, g.Open(), g.Err())
		}
	}
	g.set(protocol.WriteReadonly, 0, "the slave is gone")
	if g.Open() || !errors.Is(g.Err(), protocol.ErrReadonly) {
		t.Fatalf("readonly: open %v, err %v", g.Open(), g.Err())
	}
	for _, s := range []protocol.WriteState{protocol.WriteFenced, protocol.WriteDeposed, protocol.WriteHandingOver} {
		g.set(s, 0, "no")
		if g.Open() || !errors.Is(g.Err(), protocol.ErrNotMaster) {
			t.Fatalf("state %v: open %v, err %v", s, g.Open(), g.Err())
		}
	}
	// A lease: writable until its deadline, fenced after, without the loop.
	g.set(protocol.WriteWritable, Now()+int64(50*time.Millisecond), "leased")
	if !g.Open() {
		t.Fatal("a leased gate is closed before its deadline")
	}
	time.Sleep(60 * time.Millisecond)
	if g.Open() || g.State() != protocol.WriteFenced || !errors.Is(g.Err(), protocol.ErrNotMaster) {
		t.Fatalf("past the lease: open %v, state %v, err %v", g.Open(), g.State(), g.Err())
	}
	g.setLeader("127.0.0.1:9")
	if err := g.Err(); err == nil || !strings.Contains(err.Error(), "master 127.0.0.1:9") {
		t.Fatalf("a refusal does not name the master: %v", err)
	}
	if o := OpenGate("g1"); !o.Open() {
		t.Fatal("an open gate is closed")
	}
}

// The master's view of its slave: the slave lease runs from the latest
// stamp the slave echoes (never from stamps of another term, nor from the
// future), and a slave is connected while a request is open or one came
// within the suspicion time, and disconnected at once when its connection
// closes.
func TestSlaveWatch_LeaseAndConnection(t *testing.T) {
	const lease, suspect = time.Second, 200 * time.Millisecond
	w := NewSlaveWatch(lease, suspect)
	if id, conn, until := w.Status(); id != "" || conn || until != 0 {
		t.Fatalf("a new watch: %q %v %d", id, conn, until)
	}
	old := Stamp() - uint64(time.Second) // before Reset: another term's
	w.Reset()
	w.Request("s1", old)
	if _, _, until := w.Status(); until != 0 {
		t.Fatal("a stamp from before the term counted")
	}
	w.Request("s1", Stamp()+uint64(time.Hour))
	if _, _, until := w.Status(); until != 0 {
		t.Fatal("a stamp from the future counted")
	}
	stamp := Stamp()
	w.Request("s1", stamp)
	id, conn, until := w.Status()
	if id != "s1" || !conn || until != int64(stamp)+int64(lease-leaseMargin(lease)) {
		t.Fatalf("after a request: %q %v %d", id, conn, until)
	}
	w.Request("s1", stamp-1) // an older echo never shortens it
	if _, _, u := w.Status(); u != until {
		t.Fatal("an older stamp moved the lease back")
	}
	time.Sleep(suspect + 50*time.Millisecond)
	if _, conn, _ := w.Status(); conn {
		t.Fatal("a silent slave is connected")
	}
	end := w.Begin()
	if _, conn, _ := w.Status(); !conn {
		t.Fatal("a slave with a long poll open is not connected")
	}
	end(false)
	done := make(chan struct{})
	w.Request("s1", 0)
	w.Conn(done)
	close(done)
	deadline := time.Now().Add(time.Second)
	for {
		if _, conn, _ := w.Status(); !conn {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a slave whose connection closed is still connected")
		}
		time.Sleep(time.Millisecond)
	}
}

// A slave's copy is failing after an error that says the master cannot be
// reached, not after a refusal, and heard again with the next answer; a
// request waiting for its answer is dated from its first send.
func TestCopyWatch_Failing(t *testing.T) {
	var c CopyWatch
	c.Failed(protocol.Errorf(protocol.StatusStaleEpoch, "an answer"))
	if _, _, failing := c.Status(); failing {
		t.Fatal("a refusal made the copy failing")
	}
	c.Failed(fmt.Errorf("sync: %w", transport.ErrDial))
	if _, _, failing := c.Status(); !failing {
		t.Fatal("an unreachable master did not make the copy failing")
	}
	c.Asking()
	_, asked, _ := c.Status()
	time.Sleep(time.Millisecond)
	c.Asking() // a second request while the first waits keeps the first's date
	if _, again, _ := c.Status(); asked == 0 || again != asked {
		t.Fatalf("asked %d, then %d", asked, again)
	}
	c.Heard()
	if heard, asked, failing := c.Status(); failing || heard == 0 || asked != 0 {
		t.Fatalf("after an answer: heard %d, asked %d, failing %v", heard, asked, failing)
	}
}
