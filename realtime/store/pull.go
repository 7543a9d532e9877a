package store

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

// PullRequest asks for up to Max messages for one consumer of a group.
type PullRequest struct {
	Subject  string
	Group    string
	Consumer string
	// Max is the most messages to return (at least 1).
	Max int
	// KnownPullSeq is the highest pull sequence the consumer still holds or
	// has acked (-1 for none). Un-acked entries above max(KnownPullSeq, the
	// acked position) are re-delivered before new ones are taken.
	KnownPullSeq int64
	// Broadcast pulls for a broadcast subscriber: Consumer has its own
	// cursor, no pull log, and pull sequences equal consume sequences.
	Broadcast bool
	// Earliest starts a group that does not exist yet at the oldest kept
	// message instead of the latest.
	Earliest bool
	// TagMode and Tags filter messages (protocol.TagNone takes all). Entries
	// that do not match are skipped and never delivered to this group.
	TagMode protocol.TagMode
	Tags    []string
	// HoldUntilDue stops at the first new entry whose deliver-at time is
	// still in the future; PullResult.NextDue then says when it is due.
	HoldUntilDue bool
	// Pipelined says the consumer has earlier pulls in flight: entries
	// above KnownPullSeq may be on their way to it, so none is
	// re-delivered and only new entries are taken. KnownPullSeq still
	// voids pull sequences the store lost (see "Consumer groups").
	Pipelined bool
}

// MaxPull caps PullRequest.Max (as QMQ caps a pull's request count).
const MaxPull = 10000

// Pulled is one delivered message.
type Pulled struct {
	// PullSeq is the consumer's sequence for this delivery (what it acks).
	PullSeq int64
	// ConsumeSeq is the message's sequence in the subject's consume log.
	ConsumeSeq int64
	// Timestamp is when the message was appended (Unix ms).
	Timestamp int64
	// DeliverAt is the message's deliver-at time (Unix ms, 0 = now).
	DeliverAt int64
	// Message is the message exactly as its producer encoded it. It is a
	// slice of a buffer of the PullResult: valid until the result's
	// Release (if it is called; otherwise the caller keeps it).
	Message []byte
}

// PullResult is what a pull returns.
type PullResult struct {
	Messages []Pulled
	// Redelivered is set when Messages are re-deliveries of entries the
	// consumer had pulled before.
	Redelivered bool
	// NextDue is the deliver-at time (Unix ms) of the entry that stopped a
	// HoldUntilDue pull, or 0.
	NextDue int64
	// Expired counts entries skipped because retention had deleted them.
	Expired int64

	buf *pullBuffer // holds Messages and their bytes; nil when empty
}

// Release hands the result's buffers back for reuse by later pulls: after
// it, Messages and every Pulled.Message are invalid. Calling it is
// optional (a result that is not released is garbage collected); a server
// calls it once the reply holds a copy of the messages, which saves a
// zeroed allocation of the messages' bytes per pull.
func (r *PullResult) Release() {
	pb := r.buf
	if pb == nil {
		return
	}
	r.buf, r.Messages = nil, nil
	for _, c := range pb.held {
		c.release()
	}
	clear(pb.held)
	pb.held = pb.held[:0]
	clear(pb.out)
	pb.out = pb.out[:0]
	if cap(pb.data) > maxPooledPullBytes {
		pb.data = nil
	}
	if cap(pb.out) > MaxPull {
		pb.out = nil
	}
	pullBuffers.Put(pb)
}

// pullBuffer is the storage of one PullResult: the messages' bytes and the
// Pulled slice, lent by pullBuffers.
type pullBuffer struct {
	data []byte
	out  []Pulled
	held []*aheadChunk // read-ahead chunks Messages view into
}

// maxPooledPullBytes caps the byte buffer a released result gives back;
// larger ones go to the garbage collector.
const maxPooledPullBytes = 4 << 20

var pullBuffers = sync.Pool{New: func() any { return new(pullBuffer) }}

// filter matches a pull's tags against a message.
type filter struct {
	mode  protocol.TagMode
	tags  [][]byte
	masks []uint64
}

func newFilter(mode protocol.TagMode, tags []string) filter {
	f := filter{mode: mode}
	if mode == protocol.TagNone || len(tags) == 0 {
		f.mode = protocol.TagNone
		return f
	}
	for _, t := range tags {
		f.tags = append(f.tags, []byte(t))
		f.masks = append(f.masks, tagBloom([]byte(t)))
	}
	return f
}

func (f *filter) all() bool { return f.mode == protocol.TagNone }

// mayMatch checks the entry's bloom: false means the message cannot match.
func (f *filter) mayMatch(bloom uint64) bool {
	switch f.mode {
	case protocol.TagAny:
		for _, m := range f.masks {
			if bloom&m == m {
				return true
			}
		}
		return false
	case protocol.TagAll:
		for _, m := range f.masks {
			if bloom&m != m {
				return false
			}
		}
		return true
	}
	return true
}

// matches checks the message's tags.
func (f *filter) matches(msg []byte) bool {
	v, err := protocol.ParseMessageNoCRC(msg)
	if err != nil {
		return false
	}
	switch f.mode {
	case protocol.TagAny:
		for _, t := range f.tags {
			if v.HasTag(t) {
				return true
			}
		}
		return false
	case protocol.TagAll:
		for _, t := range f.tags {
			if !v.HasTag(t) {
				return false
			}
		}
		return true
	}
	return true
}

// delivery is an entry chosen for a pull; msg is set when it was already
// read (to check tags).
type delivery struct {
	pullSeq int64
	seq     int64
	e       entry
	msg     []byte
}

func (s *Store) checkNames(subject, group, consumer string, broadcast bool) error {
	if err := s.opts.Limits.CheckView(&protocol.View{Subject: []byte(subject), ID: []byte("x")}); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if !broadcast {
		if err := s.opts.Limits.CheckGroup(group); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
	}
	if err := protocol.CheckConsumerID(consumer); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	return nil
}

// Pull hands out up to req.Max messages to req.Consumer: first its own
// un-acked entries above max(KnownPullSeq, acked), otherwise entries handed
// back by dead consumers of the group and then new entries from the group's
// cursor. It never blocks on other groups or on the appender; long polling
// is the caller's (see Options.OnAppend).
func (s *Store) Pull(req PullRequest) (PullResult, error) {
	if err := s.errIfReplica(); err != nil {
		return PullResult{}, err
	}
	if err := s.checkNames(req.Subject, req.Group, req.Consumer, req.Broadcast); err != nil {
		return PullResult{}, err
	}
	if req.Max < 1 {
		return PullResult{}, fmt.Errorf("%w: Max must be at least 1", ErrInvalidRequest)
	}
	req.Max = min(req.Max, MaxPull)
	if s.isClosed() {
		return PullResult{}, ErrClosed
	}
	key := groupKey{subject: req.Subject, group: req.Group}
	if req.Broadcast {
		key = groupKey{subject: req.Subject, group: req.Consumer, broadcast: true}
	}
	g, _, err := s.groupFor(key, true, req.Earliest)
	if err != nil {
		return PullResult{}, err
	}
	f := newFilter(req.TagMode, req.Tags)
	var res PullResult
	var ds []delivery
	sc := pullScratches.Get().(*pullScratch)
	defer sc.put()
	behind := false
	g.mu.Lock()
	c, err := s.consumerFor(g, req.Consumer)
	if err == nil {
		c.seen = s.opts.Clock()
		if req.Broadcast {
			ds, err = s.pullBroadcastLocked(g, c, &req, &f, &res, sc)
		} else {
			ds, err = s.pullLocked(g, c, &req, &f, &res, sc)
		}
		_, visible := g.subj.bounds()
		behind = g.cursor < visible
	}
	g.mu.Unlock()
	if err != nil {
		return PullResult{}, err
	}
	// Messages are read ahead only for a group with a backlog left after
	// this pull: a group that has caught up reads its few messages
	// directly and holds no read-ahead buffer (256 KiB each, for every
	// group of a quiet subject otherwise).
	ra := &g.msgAhead
	if !behind {
		ra.release()
		ra = nil
	}
	res.Messages, res.buf = s.readDeliveries(g.subj, ds, ra)
	s.stats.pulled.Add(int64(len(res.Messages)))
	return res, nil
}

func (s *Store) pullLocked(g *group, c *consumer, req *PullRequest, f *filter, res *PullResult, sc *pullScratch) ([]delivery, error) {
	sj := g.subj
	known := max(req.KnownPullSeq, c.acked)
	if known >= c.next {
		if known-c.next >= maxVoid {
			return nil, fmt.Errorf("%w: known pull seq %d, consumer %s has pulled %d", ErrInvalidRequest, known, c.id, c.next)
		}
		// The consumer holds pull sequences this store does not know: their
		// actions were lost in a crash, and the entries went back to the
		// cursor. Void them so they can never name other messages.
		if err := c.writeVoids(c.next, known+1-c.next); err != nil {
			return nil, err
		}
		if err := s.record(g, &action{kind: actVoid, consumer: c.id, seq: known + 1}); err != nil {
			return nil, err
		}
	}
	if c.next-1 > known && !req.Pipelined {
		// Re-deliver un-acked entries the consumer no longer holds.
		n := min(c.next-1-known, int64(req.Max))
		seqs, err := c.readPullLog(known+1, n)
		if err != nil {
			return nil, err
		}
		ds := make([]delivery, 0, len(seqs))
		for i, seq := range seqs {
			if seq == voidEntry {
				continue
			}
			e, ok, err := s.entryAt(sj, seq)
			if err != nil {
				return nil, err
			}
			if !ok {
				res.Expired++
				continue
			}
			ds = append(ds, delivery{pullSeq: known + 1 + int64(i), seq: seq, e: e})
		}
		if len(ds) > 0 {
			res.Redelivered = true
			return ds, nil
		}
		// Nothing left to re-deliver there: if it starts at the acked
		// position, ack it so it is not looked at again.
		if known == c.acked {
			if err := s.record(g, &action{kind: actAck, consumer: c.id, seq: known + n}); err != nil {
				return nil, err
			}
		}
		if c.next-1 > known+n {
			return nil, nil
		}
	}
	ds, taken, cursor, err := s.takeNew(g, req, f, res, sc)
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 && taken == 0 && cursor == g.cursor {
		return nil, nil
	}
	seqs := sc.seqsFor(len(ds))
	for i := range ds {
		ds[i].pullSeq = c.next + int64(i)
		seqs[i] = ds[i].seq
	}
	if err := c.writePullLog(c.next, seqs); err != nil {
		return nil, err
	}
	a := &action{kind: actPull, consumer: c.id, seq: c.next, taken: uint32(taken), cursor: cursor, runs: toRuns(seqs), runCount: int64(len(seqs))}
	if err := s.record(g, a); err != nil {
		return nil, err
	}
	return ds, nil
}

func (s *Store) pullBroadcastLocked(g *group, c *consumer, req *PullRequest, f *filter, res *PullResult, sc *pullScratch) ([]delivery, error) {
	sj := g.subj
	known := max(req.KnownPullSeq, c.acked)
	if known+1 < g.cursor && !req.Pipelined {
		// Re-deliver what the subscriber pulled and no longer holds: the
		// consume log is its pull log.
		var ds []delivery
		seq := max(known+1, 0)
		for scanned := 0; seq < g.cursor && len(ds) < req.Max && scanned < s.opts.MaxScan; scanned++ {
			e, ok, err := s.entryAt(sj, seq)
			if err != nil {
				return nil, err
			}
			if ok {
				d := delivery{pullSeq: seq, seq: seq, e: e}
				if s.filterEntry(sj, f, &d) {
					ds = append(ds, d)
				}
			} else {
				res.Expired++
			}
			seq++
		}
		if len(ds) > 0 {
			res.Redelivered = true
			return ds, nil
		}
		if seq < g.cursor {
			// Nothing in the window matched: nothing there to re-deliver, so
			// ack it and let the next pull look further.
			return nil, s.record(g, &action{kind: actAck, consumer: c.id, seq: seq - 1})
		}
	}
	ds, _, cursor, err := s.takeNew(g, req, f, res, sc)
	if err != nil || cursor == g.cursor {
		return nil, err
	}
	for i := range ds {
		ds[i].pullSeq = ds[i].seq
	}
	if err := s.record(g, &action{kind: actPull, consumer: c.id, cursor: cursor}); err != nil {
		return nil, err
	}
	return ds, nil
}

// filterEntry reports whether d passes f, reading its message when the
// entry's bloom says it may match. A message that cannot be read never
// passes.
func (s *Store) filterEntry(sj *subject, f *filter, d *delivery) bool {
	if f.all() {
		return true
	}
	if !f.mayMatch(d.e.bloom) {
		return false
	}
	msg := s.readMessage(sj, d.seq, d.e)
	if msg == nil || !f.matches(msg) {
		return false
	}
	d.msg = msg
	return true
}

// pullScratch is the working memory of one Pull, lent by pullScratches: the
// chosen deliveries, their sequences and a buffer for consume-log entries.
// Nothing of it outlives the Pull, except an entries buffer that a group
// behind its subject's end takes over (readAhead).
type pullScratch struct {
	ds      []delivery
	seqs    []int64
	entries []byte
}

var pullScratches = sync.Pool{New: func() any { return new(pullScratch) }}

// deliveriesFor returns an empty delivery slice with room for n.
func (sc *pullScratch) deliveriesFor(n int) []delivery {
	if cap(sc.ds) < n {
		sc.ds = make([]delivery, 0, n)
	}
	return sc.ds[:0]
}

// seqsFor returns a sequence slice of length n.
func (sc *pullScratch) seqsFor(n int) []int64 {
	if cap(sc.seqs) < n {
		sc.seqs = make([]int64, n)
	}
	return sc.seqs[:n]
}

// entriesFor returns a buffer for n consume-log entries.
func (sc *pullScratch) entriesFor(n int) []byte {
	if cap(sc.entries) < n*entryWidth {
		sc.entries = make([]byte, n*entryWidth)
	}
	return sc.entries[:n*entryWidth]
}

// giveEntries takes a buffer a group gave up, unless the scratch has one.
func (sc *pullScratch) giveEntries(b []byte) {
	if sc.entries == nil && cap(b) <= maxScratchEntries*entryWidth {
		sc.entries = b[:0]
	}
}

// maxScratchEntries bounds the entries buffer a pooled scratch keeps.
const maxScratchEntries = 2 * readAheadEntries

// put gives the scratch back; oversized slices go to the garbage collector.
func (sc *pullScratch) put() {
	clear(sc.ds[:cap(sc.ds)]) // drop references to messages read for tags
	if cap(sc.ds) > MaxPull {
		sc.ds = nil
	}
	if cap(sc.seqs) > MaxPull {
		sc.seqs = nil
	}
	if cap(sc.entries) > maxScratchEntries*entryWidth {
		sc.entries = nil
	}
	pullScratches.Put(sc)
}

// takeNew chooses up to req.Max entries from the group's returned queue and
// then from its cursor, without changing the group; it returns them, how
// many returned entries it consumed and where the cursor ends.
func (s *Store) takeNew(g *group, req *PullRequest, f *filter, res *PullResult, sc *pullScratch) ([]delivery, int, int64, error) {
	sj := g.subj
	limit := req.Max
	lo, visible := sj.bounds()
	ds := sc.deliveriesFor(int(min(int64(limit), max(visible-g.cursor, 0)+runsLen(g.returned))))
	taken, scanned := 0, 0
	for _, r := range g.returned {
		for k := int64(0); k < int64(r.count) && len(ds) < limit && scanned < s.opts.MaxScan; k++ {
			seq := r.start + k
			taken++
			e, ok, err := s.entryAt(sj, seq)
			if err != nil {
				return nil, 0, g.cursor, err
			}
			if !ok {
				res.Expired++
				scanned++
				continue
			}
			d := delivery{seq: seq, e: e}
			if s.filterEntry(sj, f, &d) {
				ds = append(ds, d)
			} else {
				scanned++
			}
		}
		if len(ds) >= limit || scanned >= s.opts.MaxScan {
			break
		}
	}
	cursor := g.cursor
	if cursor < lo {
		res.Expired += lo - cursor
		cursor = lo
	}
	var now int64
	if req.HoldUntilDue {
		now = s.opts.Clock().UnixMilli()
	}
scan:
	for len(ds) < limit && cursor < visible && scanned < s.opts.MaxScan {
		want := min(limit-len(ds), readAheadEntries)
		if !f.all() {
			want = min(256, s.opts.MaxScan-scanned)
		}
		want = int(min(int64(want), visible-cursor))
		buf, err := g.ahead.entries(sj, cursor, want, sc)
		if err != nil {
			return nil, 0, g.cursor, err
		}
		n := len(buf) / entryWidth
		if n == 0 {
			break
		}
		for i := 0; i < n && len(ds) < limit; i++ {
			e, ok := decodeEntry(buf[i*entryWidth:])
			seq := cursor
			if ok && req.HoldUntilDue && e.deliverAt > now {
				res.NextDue = e.deliverAt
				break scan
			}
			cursor++
			if !ok {
				scanned++
				s.stats.corruptReads.Add(1)
				s.lg.Error("consume-log entry fails its crc; skipped", zap.String("subject", sj.name), zap.Int64("seq", seq))
				continue
			}
			if e.size == 0 {
				scanned++
				continue
			}
			d := delivery{seq: seq, e: e}
			if s.filterEntry(sj, f, &d) {
				ds = append(ds, d)
			} else {
				scanned++
			}
		}
	}
	return ds, taken, cursor, nil
}

// entryAt returns the consume-log entry seq; ok is false when it was deleted
// by retention, is a hole, or fails its CRC.
func (s *Store) entryAt(sj *subject, seq int64) (entry, bool, error) {
	var b [entryWidth]byte
	n, err := sj.readEntries(seq, b[:])
	if err != nil || n == 0 {
		return entry{}, false, err
	}
	e, ok := decodeEntry(b[:])
	if !ok {
		s.stats.corruptReads.Add(1)
		s.lg.Error("consume-log entry fails its crc; skipped", zap.String("subject", sj.name), zap.Int64("seq", seq))
		return entry{}, false, nil
	}
	return e, e.size != 0, nil
}

// readMessage reads and validates one message; nil means it cannot be served
// (logged and counted).
func (s *Store) readMessage(sj *subject, seq int64, e entry) []byte {
	rec := make([]byte, e.size)
	err := s.msgLog.ReadAt(rec, e.offset)
	var msg []byte
	if err == nil {
		msg, err = s.parseMessageRecord(rec, e.offset, seq)
	}
	if err != nil {
		s.stats.corruptReads.Add(1)
		s.lg.Error("message cannot be read; not served", zap.String("subject", sj.name), zap.Int64("seq", seq), zap.Int64("offset", e.offset), zap.Error(err))
		return nil
	}
	return msg
}

// parseMessageRecord checks rec, the whole message-log record read at off
// for sequence seq, and returns its message. A record this process wrote
// (at or after the message-log end that Open found) is trusted to hold what
// was written: its header, kind, length and sequence are checked but not
// its CRC, which the writer computed over the very bytes it wrote (see
// "Reads" in doc.go). Any other record is verified in full.
func (s *Store) parseMessageRecord(rec []byte, off, seq int64) ([]byte, error) {
	var payload []byte
	var err error
	if off < s.recoveredMsgEnd {
		var kind uint8
		var n int
		kind, payload, n, err = segment.ParseRecord(rec)
		if err == nil && (n != len(rec) || kind != recordMessage) {
			err = fmt.Errorf("%w: record of kind %d and %d bytes, expected a message of %d", ErrCorrupt, kind, n, len(rec))
		}
	} else {
		payload, err = writtenRecordPayload(rec)
	}
	if err != nil {
		return nil, err
	}
	got, _, msg, err := parseRecordPayload(payload)
	if err == nil && got != seq {
		err = fmt.Errorf("%w: record holds sequence %d", ErrCorrupt, got)
	}
	return msg, err
}

// writtenRecordPayload checks the header of a message record this process
// wrote, without its CRC, and returns the payload.
func writtenRecordPayload(rec []byte) ([]byte, error) {
	if len(rec) < segment.HeaderSize ||
		binary.BigEndian.Uint16(rec[0:]) != segment.Magic || rec[2] != segment.Version || rec[3] != recordMessage ||
		int(binary.BigEndian.Uint32(rec[4:])) != len(rec)-segment.HeaderSize {
		return nil, fmt.Errorf("%w: bad message record header at a written offset", ErrCorrupt)
	}
	return rec[segment.HeaderSize:], nil
}

// readDeliveries reads the messages of ds with one read per run of adjacent
// records (viewed in ra's buffer when not nil, otherwise into one pooled
// buffer), validates every record
// (parseMessageRecord) and drops (with a log line) any that fails.
func (s *Store) readDeliveries(sj *subject, ds []delivery, ra *messageReadAhead) ([]Pulled, *pullBuffer) {
	if len(ds) == 0 {
		return nil, nil
	}
	total := 0
	lo, hi := int64(-1), int64(0)
	for i := range ds {
		if ds[i].msg == nil {
			total += int(ds[i].e.size)
			if lo < 0 || ds[i].e.offset < lo {
				lo = ds[i].e.offset
			}
			hi = max(hi, ds[i].e.offset+int64(ds[i].e.size))
		}
	}
	if int64(total)*4 < hi-lo {
		// The records are sparse in the message log (their subject is a
		// small part of the traffic): reading ahead would read mostly other
		// subjects' records.
		ra = nil
	}
	pb := pullBuffers.Get().(*pullBuffer)
	var buf []byte // for direct reads, taken at the first
	out := pb.out[:0]
	pos := 0
	for i := 0; i < len(ds); {
		if ds[i].msg != nil {
			out = append(out, Pulled{PullSeq: ds[i].pullSeq, ConsumeSeq: ds[i].seq, Timestamp: ds[i].e.timestamp, DeliverAt: ds[i].e.deliverAt, Message: ds[i].msg})
			i++
			continue
		}
		// A run of adjacent records.
		j := i + 1
		size := int(ds[i].e.size)
		for j < len(ds) && ds[j].msg == nil && ds[j].e.offset == ds[j-1].e.offset+int64(ds[j-1].e.size) {
			size += int(ds[j].e.size)
			j++
		}
		var chunk []byte
		var err error
		if ra != nil {
			var held *aheadChunk
			if chunk, held, err = s.viewMessages(ra, size, ds[i].e.offset); held != nil {
				pb.held = append(pb.held, held)
			}
		}
		if chunk == nil {
			if buf == nil {
				if cap(pb.data) < total {
					pb.data = make([]byte, total)
				}
				buf = pb.data[:total]
			}
			chunk = buf[pos : pos+size]
			pos += size
			err = s.msgLog.ReadAt(chunk, ds[i].e.offset)
		}
		if err != nil {
			s.stats.corruptReads.Add(int64(j - i))
			s.lg.Error("messages cannot be read; not served", zap.String("subject", sj.name), zap.Int64("seq", ds[i].seq), zap.Error(err))
			i = j
			continue
		}
		for ; i < j; i++ {
			d := &ds[i]
			rec := chunk[:d.e.size]
			chunk = chunk[d.e.size:]
			msg, err := s.parseMessageRecord(rec, d.e.offset, d.seq)
			if err != nil {
				s.stats.corruptReads.Add(1)
				s.lg.Error("message cannot be read; not served", zap.String("subject", sj.name), zap.Int64("seq", d.seq), zap.Int64("offset", d.e.offset), zap.Error(err))
				continue
			}
			out = append(out, Pulled{PullSeq: d.pullSeq, ConsumeSeq: d.seq, Timestamp: d.e.timestamp, DeliverAt: d.e.deliverAt, Message: msg})
		}
	}
	pb.out = out
	return out, pb
}
