package realtime

import (
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/realtime/store"
)

// syncStream is the master's record of the slave's pipelined fetches
// (protocol.CmdSyncLogAhead): the fetches of the latest sync connection
// since its latest CmdSyncLog, answered one after the other in the order
// they arrived, each from where the one before ended. A slave so keeps a
// fetch parked here while it takes in the answer before, and a record is
// sent as soon as it is written instead of waiting for the slave's next
// request (see "Replication: pipelined fetches" in NOTES.md). Once one of
// its answers is a cut, every later fetch of the stream is answered with
// that cut: they were sent before the slave heard of it, and the slave
// drops their answers and restarts the stream from the cut with a
// CmdSyncLog, so a fetch that clears a pending cut (sync.go) always
// comes after every answer before it on its connection. Guarded by
// syncService.mu.
type syncStream struct {
	conn *netserver.Conn
	id   uint64        // counts the CmdSyncLog fetches that restarted it
	tail chan struct{} // closed once its latest fetch has been answered
	// msg and act are where its next answer reads from (the ends of the
	// answer before, as the slave counts them); -1: from the request's
	// offsets (none answered yet).
	msg, act int64
	cutAt    int64 // -1, or the cut an answer of the stream told
}

// streamTurn is one fetch's place in a stream: it reads once prev is
// closed and closes mine once it has answered.
type streamTurn struct {
	id         uint64
	prev, mine chan struct{}
}

// restart begins a new stream on conn with a CmdSyncLog fetch, which reads
// from its own offsets and waits for no earlier fetch.
func (s *syncStream) restart(conn *netserver.Conn) streamTurn {
	s.id++
	s.conn, s.msg, s.act, s.cutAt = conn, -1, -1, -1
	s.tail = make(chan struct{})
	return streamTurn{id: s.id, mine: s.tail}
}

// join queues a CmdSyncLogAhead fetch after the stream's latest one.
func (s *syncStream) join() streamTurn {
	t := streamTurn{id: s.id, prev: s.tail, mine: make(chan struct{})}
	s.tail = t.mine
	return t
}

// from returns where the fetch of turn t reads: its request's offsets, or
// past them where the answer before in its stream ended.
func (s *syncStream) from(t streamTurn, msg, act int64) (int64, int64) {
	if s.id != t.id || s.msg < 0 {
		return msg, act
	}
	return max(msg, s.msg), max(act, s.act)
}

// answered records the ends of turn t's answer (read from msgFrom and
// actFrom) as the slave will count them (replica.follow): a message chunk
// that restarts the copy at the master's first kept offset counts up to
// the committed end only.
func (s *syncStream) answered(t streamTurn, msgFrom, actFrom int64, mc, ac store.LogChunk) {
	if s.id != t.id {
		return // a stale fetch of an earlier stream
	}
	n := int64(len(mc.Data))
	if mc.Offset == mc.Start && mc.Offset > msgFrom && n > mc.End-mc.Offset {
		n = max(mc.End-mc.Offset, 0)
	}
	s.msg, s.act = msgFrom, actFrom
	if n > 0 {
		s.msg = mc.Offset + n
	}
	if len(ac.Data) > 0 {
		s.act = ac.Offset + int64(len(ac.Data))
	}
}

// cut records that turn t's answer told the slave to cut back to off.
func (s *syncStream) cut(t streamTurn, off int64) {
	if s.id == t.id && s.cutAt < 0 {
		s.cutAt = off
	}
}

// cutTold returns the cut an earlier answer of turn t's stream told (-1
// none): t's answer is that cut again.
func (s *syncStream) cutTold(t streamTurn) int64 {
	if s.id != t.id {
		return -1
	}
	return s.cutAt
}
