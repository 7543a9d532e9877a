package protocol

import (
	"encoding/binary"
	"fmt"
)

// Delay-group replication (a delay slave copies its master's hour files).
// A delay store keeps one schedule file and one dispatch file per hour of
// due time; both only grow (retention removes whole hours). The slave asks
// what changed (CmdDelaySyncManifest), then reads the missing bytes of each
// file (CmdDelaySyncRead) and writes them at the same offsets. Big-endian:
//
//	manifest request   epoch u64 | group s8 | run u64 | since u64 |
//	                   acked i64 | wait ms u32 | lease stamp u64 | slave id s8
//	manifest response  epoch u64 | store u64 | run u64 | version u64 | replayed i64 |
//	                   lease stamp u64 | flags u8 | count u32 |
//	                   count × (hour i64 | hour flags u8 | schedule size i64 |
//	                            records i64 | dispatch size i64)
//	read request       epoch u64 | group s8 | max bytes u32 | count u16 |
//	                   count × (hour i64 | file u8 | from i64 | to i64)
//	read response      epoch u64 | count u16 |
//	                   count × (hour i64 | file u8 | offset i64 | data len u32 | data)
//
// store names the master's store: its data, from its creation on (a
// promoted slave's store gets a new name); a copy of another store may hold
// what this one never had, so the slave drops it and copies from empty.
// run names one run of the master's store (it changes when the master
// restarts); version counts the changes of that run. A manifest request
// with the master's run and a version asks for the hours changed after it
// (long-polling up to wait when none did); any other run, or since 0, asks
// for every hour (flags bit0, DelayManifestFull, in the response: hours the
// slave holds that are not listed are gone). acked is the slave's
// acknowledgement: the master's replayed message-log position (replayed in a
// manifest response) that the slave's copy durably holds, -1 for none.
// An hour entry with flags bit0 (DelayHourRemoved) says retention removed
// the hour. A read asks for the bytes [from, to) of hour files (file 1 =
// schedule, 2 = dispatch); the answer holds whole records, at most max
// bytes in all (the first range is answered with at least one record), and
// may cover less than asked (ask again from where it ends). epoch is the
// group's epoch as the sender knows it: a master refuses a request from a
// newer epoch than its own with StatusStaleEpoch (it has been deposed).
// lease stamp and slave id serve failover as in CmdSyncLog (sync.go): the
// response's stamp is the master's clock when it sent it, the request
// echoes the latest one the slave received, and slave id is the slave's
// registered broker id.

// Delay replication commands (the 50–69 replication range).
const (
	// CmdDelaySyncManifest asks a delay master which hour files changed.
	CmdDelaySyncManifest Command = 60
	// CmdDelaySyncRead asks a delay master for bytes of its hour files.
	CmdDelaySyncRead Command = 61
	// CmdDelaySyncOrigin asks a delay master where its store came from.
	CmdDelaySyncOrigin Command = 62
)

func init() {
	commandNames[CmdDelaySyncManifest] = "delay-sync-manifest"
	commandNames[CmdDelaySyncRead] = "delay-sync-read"
	commandNames[CmdDelaySyncOrigin] = "delay-sync-origin"
}

// Origin (CmdDelaySyncOrigin), big-endian:
//
//	origin request   epoch u64 | group s8
//	origin response  store u64 | parent u64 | count u32 |
//	                 count × (hour i64 | schedule size i64 | dispatch size i64)
//
// A store made by promoting a slave's copy names the store it copied
// (parent; 0 for a store created empty) and the size of every hour file of
// the copy when it was promoted: the bytes the new store shares with its
// parent. A deposed master rejoining as the slave keeps that much of each
// of its own files (the parent's bytes, the same on both) and drops the
// rest, instead of copying everything again.

// DelayOriginRequest asks a delay master for its store's origin.
type DelayOriginRequest struct {
	Epoch uint64
	Group string
}

// DelayOrigin is a store's origin: its parent and the hour sizes it shares
// with it (Hours' Flags and Records are not carried).
type DelayOrigin struct {
	Store  uint64
	Parent uint64
	Hours  []DelayHour
}

const delayOriginHourSize = 8 + 8 + 8

// AppendDelayOriginRequest appends the body of q.
func AppendDelayOriginRequest(dst []byte, q *DelayOriginRequest) []byte {
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	return appendString8(dst, q.Group)
}

// DecodeDelayOriginRequest decodes an origin request body.
func DecodeDelayOriginRequest(body []byte) (DelayOriginRequest, error) {
	r := reader{b: body}
	q := DelayOriginRequest{Epoch: r.u64(), Group: r.string8()}
	if err := r.done(); err != nil {
		return DelayOriginRequest{}, fmt.Errorf("%w: delay origin request", err)
	}
	return q, nil
}

// AppendDelayOrigin appends the body of an origin response.
func AppendDelayOrigin(dst []byte, o *DelayOrigin) []byte {
	dst = binary.BigEndian.AppendUint64(dst, o.Store)
	dst = binary.BigEndian.AppendUint64(dst, o.Parent)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(o.Hours)))
	for _, h := range o.Hours {
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.Hour))
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.ScheduleSize))
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.DispatchSize))
	}
	return dst
}

// DecodeDelayOrigin decodes an origin response body. Negative sizes are
// rejected.
func DecodeDelayOrigin(body []byte) (DelayOrigin, error) {
	r := reader{b: body}
	o := DelayOrigin{Store: r.u64(), Parent: r.u64()}
	n := r.u32()
	if r.err == nil && uint64(n)*delayOriginHourSize > uint64(len(body)-r.off) {
		r.err = ErrTruncated
	}
	if r.err == nil && n > 0 {
		o.Hours = make([]DelayHour, n)
		for i := range o.Hours {
			o.Hours[i] = DelayHour{Hour: int64(r.u64()), ScheduleSize: int64(r.u64()), DispatchSize: int64(r.u64())}
		}
	}
	if err := r.done(); err != nil {
		return DelayOrigin{}, fmt.Errorf("%w: delay origin", err)
	}
	for _, h := range o.Hours {
		if h.ScheduleSize < 0 || h.DispatchSize < 0 {
			return DelayOrigin{}, fmt.Errorf("%w: delay origin hour %d with a negative size", ErrInvalid, h.Hour)
		}
	}
	return o, nil
}

// Flags of the delay replication bodies.
const (
	// DelayManifestFull in DelayManifestResponse.Flags: every hour is listed.
	DelayManifestFull uint8 = 1 << 0
	// DelayHourRemoved in DelayHour.Flags: the hour is gone (retention).
	DelayHourRemoved uint8 = 1 << 0
)

// DelayFile names one of an hour's files.
type DelayFile uint8

const (
	// DelayScheduleFile holds the messages due in the hour.
	DelayScheduleFile DelayFile = 1
	// DelayDispatchFile records which of them were forwarded.
	DelayDispatchFile DelayFile = 2
)

// String returns "schedule" or "dispatch".
func (f DelayFile) String() string {
	switch f {
	case DelayScheduleFile:
		return "schedule"
	case DelayDispatchFile:
		return "dispatch"
	}
	return fmt.Sprintf("file(%d)", uint8(f))
}

// DelayManifestRequest asks a delay master what changed since a version.
type DelayManifestRequest struct {
	Epoch      uint64
	Group      string
	Run        uint64
	Since      uint64
	Acked      int64
	WaitMillis uint32
	LeaseStamp uint64
	SlaveID    string
}

// DelayHour is the state of one hour's files on the master.
type DelayHour struct {
	Hour         int64 // hours since the Unix epoch
	Flags        uint8
	ScheduleSize int64
	Records      int64
	DispatchSize int64
}

// DelayManifestResponse lists hours changed since the request's version.
type DelayManifestResponse struct {
	Epoch      uint64
	Store      uint64
	Run        uint64
	Version    uint64
	Replayed   int64
	LeaseStamp uint64
	Flags      uint8
	Hours      []DelayHour
}

// DelayRange asks for the bytes [From, To) of one hour file.
type DelayRange struct {
	Hour     int64
	File     DelayFile
	From, To int64
}

// DelayReadRequest asks for bytes of hour files.
type DelayReadRequest struct {
	Epoch    uint64
	Group    string
	MaxBytes uint32
	Ranges   []DelayRange
}

// DelayChunk is whole records of one hour file starting at Offset.
type DelayChunk struct {
	Hour   int64
	File   DelayFile
	Offset int64
	Data   []byte
}

// DelayReadResponse carries the chunks read.
type DelayReadResponse struct {
	Epoch  uint64
	Chunks []DelayChunk
}

const (
	delayHourSize  = 8 + 1 + 8 + 8 + 8
	delayRangeSize = 8 + 1 + 8 + 8
	delayChunkHead = 8 + 1 + 8 + 4
)

// AppendDelayManifestRequest appends the body of q.
func AppendDelayManifestRequest(dst []byte, q *DelayManifestRequest) []byte {
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	dst = appendString8(dst, q.Group)
	dst = binary.BigEndian.AppendUint64(dst, q.Run)
	dst = binary.BigEndian.AppendUint64(dst, q.Since)
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.Acked))
	dst = binary.BigEndian.AppendUint32(dst, q.WaitMillis)
	dst = binary.BigEndian.AppendUint64(dst, q.LeaseStamp)
	return appendString8(dst, q.SlaveID)
}

// DecodeDelayManifestRequest decodes a manifest request body.
func DecodeDelayManifestRequest(body []byte) (DelayManifestRequest, error) {
	r := reader{b: body}
	q := DelayManifestRequest{Epoch: r.u64(), Group: r.string8(), Run: r.u64(), Since: r.u64(), Acked: int64(r.u64()), WaitMillis: r.u32(),
		LeaseStamp: r.u64(), SlaveID: r.string8()}
	if err := r.done(); err != nil {
		return DelayManifestRequest{}, fmt.Errorf("%w: delay manifest request", err)
	}
	if q.Acked < -1 {
		return DelayManifestRequest{}, fmt.Errorf("%w: delay manifest request acknowledges %d", ErrInvalid, q.Acked)
	}
	return q, nil
}

// AppendDelayManifestResponse appends the body of p.
func AppendDelayManifestResponse(dst []byte, p *DelayManifestResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, p.Store)
	dst = binary.BigEndian.AppendUint64(dst, p.Run)
	dst = binary.BigEndian.AppendUint64(dst, p.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.Replayed))
	dst = binary.BigEndian.AppendUint64(dst, p.LeaseStamp)
	dst = append(dst, p.Flags)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Hours)))
	for _, h := range p.Hours {
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.Hour))
		dst = append(dst, h.Flags)
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.ScheduleSize))
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.Records))
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.DispatchSize))
	}
	return dst
}

// DecodeDelayManifestResponse decodes a manifest response body. Negative
// sizes are rejected.
func DecodeDelayManifestResponse(body []byte) (DelayManifestResponse, error) {
	r := reader{b: body}
	p := DelayManifestResponse{Epoch: r.u64(), Store: r.u64(), Run: r.u64(), Version: r.u64(), Replayed: int64(r.u64()), LeaseStamp: r.u64(), Flags: r.u8()}
	n := r.u32()
	if r.err == nil && uint64(n)*delayHourSize > uint64(len(body)-r.off) {
		r.err = ErrTruncated
	}
	if r.err == nil && n > 0 {
		p.Hours = make([]DelayHour, n)
		for i := range p.Hours {
			p.Hours[i] = DelayHour{Hour: int64(r.u64()), Flags: r.u8(), ScheduleSize: int64(r.u64()), Records: int64(r.u64()), DispatchSize: int64(r.u64())}
		}
	}
	if err := r.done(); err != nil {
		return DelayManifestResponse{}, fmt.Errorf("%w: delay manifest response", err)
	}
	if p.Replayed < 0 {
		return DelayManifestResponse{}, fmt.Errorf("%w: delay manifest with replayed position %d", ErrInvalid, p.Replayed)
	}
	for _, h := range p.Hours {
		if h.ScheduleSize < 0 || h.Records < 0 || h.DispatchSize < 0 {
			return DelayManifestResponse{}, fmt.Errorf("%w: delay manifest hour %d with a negative size", ErrInvalid, h.Hour)
		}
	}
	return p, nil
}

// AppendDelayReadRequest appends the body of q.
func AppendDelayReadRequest(dst []byte, q *DelayReadRequest) []byte {
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	dst = appendString8(dst, q.Group)
	dst = binary.BigEndian.AppendUint32(dst, q.MaxBytes)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(q.Ranges)))
	for _, g := range q.Ranges {
		dst = binary.BigEndian.AppendUint64(dst, uint64(g.Hour))
		dst = append(dst, uint8(g.File))
		dst = binary.BigEndian.AppendUint64(dst, uint64(g.From))
		dst = binary.BigEndian.AppendUint64(dst, uint64(g.To))
	}
	return dst
}

func validDelayFile(f DelayFile) bool { return f == DelayScheduleFile || f == DelayDispatchFile }

// DecodeDelayReadRequest decodes a read request body. Unknown files and
// ranges that are negative or end before they start are rejected.
func DecodeDelayReadRequest(body []byte) (DelayReadRequest, error) {
	r := reader{b: body}
	q := DelayReadRequest{Epoch: r.u64(), Group: r.string8(), MaxBytes: r.u32()}
	n := r.u16()
	if r.err == nil && int(n)*delayRangeSize > len(body)-r.off {
		r.err = ErrTruncated
	}
	if r.err == nil && n > 0 {
		q.Ranges = make([]DelayRange, n)
		for i := range q.Ranges {
			q.Ranges[i] = DelayRange{Hour: int64(r.u64()), File: DelayFile(r.u8()), From: int64(r.u64()), To: int64(r.u64())}
		}
	}
	if err := r.done(); err != nil {
		return DelayReadRequest{}, fmt.Errorf("%w: delay read request", err)
	}
	for _, g := range q.Ranges {
		if !validDelayFile(g.File) || g.From < 0 || g.To < g.From {
			return DelayReadRequest{}, fmt.Errorf("%w: delay read range %s of hour %d [%d, %d)", ErrInvalid, g.File, g.Hour, g.From, g.To)
		}
	}
	return q, nil
}

// AppendDelayReadResponseHead appends a read response's epoch and chunk
// count; each chunk follows with AppendDelayChunkHead and its data.
func AppendDelayReadResponseHead(dst []byte, epoch uint64, chunks int) []byte {
	dst = binary.BigEndian.AppendUint64(dst, epoch)
	return binary.BigEndian.AppendUint16(dst, uint16(chunks))
}

// AppendDelayChunkHead appends a chunk's fields up to its data.
func AppendDelayChunkHead(dst []byte, c *DelayChunk) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Hour))
	dst = append(dst, uint8(c.File))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Offset))
	return binary.BigEndian.AppendUint32(dst, uint32(len(c.Data)))
}

// AppendDelayReadResponse appends the body of p.
func AppendDelayReadResponse(dst []byte, p *DelayReadResponse) []byte {
	dst = AppendDelayReadResponseHead(dst, p.Epoch, len(p.Chunks))
	for i := range p.Chunks {
		dst = AppendDelayChunkHead(dst, &p.Chunks[i])
		dst = append(dst, p.Chunks[i].Data...)
	}
	return dst
}

// DecodeDelayReadResponse decodes a read response body; the chunks' data
// alias body.
func DecodeDelayReadResponse(body []byte) (DelayReadResponse, error) {
	r := reader{b: body}
	p := DelayReadResponse{Epoch: r.u64()}
	n := r.u16()
	if r.err == nil && int(n)*delayChunkHead > len(body)-r.off {
		r.err = ErrTruncated
	}
	if r.err == nil && n > 0 {
		p.Chunks = make([]DelayChunk, n)
		for i := range p.Chunks {
			p.Chunks[i] = DelayChunk{Hour: int64(r.u64()), File: DelayFile(r.u8()), Offset: int64(r.u64()), Data: r.bytes32()}
		}
	}
	if err := r.done(); err != nil {
		return DelayReadResponse{}, fmt.Errorf("%w: delay read response", err)
	}
	for _, c := range p.Chunks {
		if !validDelayFile(c.File) || c.Offset < 0 {
			return DelayReadResponse{}, fmt.Errorf("%w: delay chunk %s of hour %d at %d", ErrInvalid, c.File, c.Hour, c.Offset)
		}
	}
	return p, nil
}
