package partition

import (
	"bufio"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// probeAck is one probe write a broker acknowledged: sent and acked are
// the client's clock around it, so the broker acknowledged it in between.
type probeAck struct {
	sent, acked time.Time
}

// ledger keeps what the client reported.
type ledger struct {
	mu       sync.Mutex
	acked    map[string]bool        // routed and probe ids acknowledged
	received map[string]bool        // ids the handler got
	early    int                    // delayed handed over early
	ackTimes map[string][]time.Time // kind ("r", "d") → ack times, in arrival order
	probes   map[string][]probeAck  // broker name → its acks
	fails    map[string]int         // kind → failed sends
	stopped  chan struct{}          // closed on the client's "S"
	lines    int
}

func newLedger() *ledger {
	return &ledger{acked: map[string]bool{}, received: map[string]bool{}, ackTimes: map[string][]time.Time{},
		probes: map[string][]probeAck{}, fails: map[string]int{}, stopped: make(chan struct{})}
}

func unixNano(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

// read takes the client's event lines until r ends.
func (l *ledger) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		l.mu.Lock()
		l.lines++
		switch {
		case f[0] == "A" && len(f) == 5:
			l.acked[f[2]] = true
			l.ackTimes[f[1]] = append(l.ackTimes[f[1]], unixNano(f[4]))
		case f[0] == "F" && len(f) == 4:
			l.fails[f[1]]++
		case f[0] == "P" && len(f) == 5:
			l.acked[f[2]] = true
			l.probes[f[1]] = append(l.probes[f[1]], probeAck{sent: unixNano(f[3]), acked: unixNano(f[4])})
		case f[0] == "R" && len(f) == 4:
			if !l.received[f[1]] && f[3] == "1" {
				l.early++
			}
			l.received[f[1]] = true
		case f[0] == "S":
			close(l.stopped)
		}
		l.mu.Unlock()
	}
}

// firstAckAfter is when kind's first acknowledgement after t arrived.
func (l *ledger) firstAckAfter(kind string, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := l.ackTimes[kind]
	i := sort.Search(len(ts), func(i int) bool { return ts[i].After(t) })
	// Arrival order is nearly time order; look a little back for an
	// earlier one that arrived late in the stream.
	best, ok := time.Time{}, false
	for j := max(0, i-64); j < len(ts); j++ {
		if ts[j].After(t) && (!ok || ts[j].Before(best)) {
			best, ok = ts[j], true
		}
		if ok && j > i+64 {
			break
		}
	}
	return best, ok
}

// lost counts acknowledged ids not received.
func (l *ledger) lost() (lost, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.acked {
		if !l.received[id] {
			lost++
		}
	}
	return lost, len(l.acked)
}

// dualMasterAcks counts acknowledgements by one broker of a pair that its
// rival's acknowledgements sandwich within window (see doc.go).
func (l *ledger) dualMasterAcks(a, b string, window time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sandwiched(l.probes[a], l.probes[b], window) + sandwiched(l.probes[b], l.probes[a], window)
}

// sandwiched counts the x in xs for which some y1, y2 in ys have
// y1.acked < x.sent and x.acked < y2.sent, with y1 and y2 within window
// of x.
func sandwiched(xs, ys []probeAck, window time.Duration) int {
	n := 0
	for _, x := range xs {
		before, after := false, false
		for _, y := range ys {
			if y.acked.Before(x.sent) && x.sent.Sub(y.acked) <= window {
				before = true
			}
			if y.sent.After(x.acked) && y.sent.Sub(x.acked) <= window {
				after = true
			}
			if before && after {
				n++
				break
			}
		}
	}
	return n
}

// maxGap is the longest time in [from, to] without an acknowledgement of
// kind (from or to count as acknowledgements' bounds).
func (l *ledger) maxGap(kind string, from, to time.Time) time.Duration {
	l.mu.Lock()
	var in []time.Time
	for _, t := range l.ackTimes[kind] {
		if t.After(from) && t.Before(to) {
			in = append(in, t)
		}
	}
	l.mu.Unlock()
	sort.Slice(in, func(i, j int) bool { return in[i].Before(in[j]) })
	prev, gap := from, time.Duration(0)
	for _, t := range append(in, to) {
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return gap
}
