package protocol

import (
	"encoding/binary"
	"fmt"
)

// Replication bodies (CmdSyncLog): a slave asks its master for the raw bytes
// of the master's logs past its own ends, big-endian:
//
//	sync request   epoch u64 | group s8 | message offset i64 | action offset i64 |
//	               message durable i64 |
//	               message segment size i64 | action segment size i64 |
//	               max bytes u32 | wait ms u32
//	sync response  epoch u64 | message chunk | action chunk
//	chunk          start i64 | end i64 | offset i64 | data len u32 | data
//
// group is the slave's broker group (a master refuses a slave of another
// group). The request's offsets are where to read from: the ends of what
// the slave has received (it may fetch the next chunk while it writes the
// last one); message durable is the end of its message log that is on its
// disk, its acknowledgement (at most message offset). Max bytes 0 asks for
// no data: an acknowledgement only (sent one-way). The segment sizes must equal the master's so the
// copies line up byte for byte; max bytes bounds each chunk's data (the
// first record is sent whole even when larger); wait is how long the master
// may hold the request when it has nothing new. A chunk is whole records
// copied from one segment of the log: start is the first offset the master
// still keeps, end its committed end, offset where data starts (the offset
// asked for, the next segment's base past a segment's padding, or start
// when the master no longer keeps the offset asked for). epoch is the
// group's epoch (0 until automatic failover assigns epochs); a master
// refuses a request from an older epoch with StatusStaleEpoch.

// SyncRequest asks a master for its logs past the slave's ends.
type SyncRequest struct {
	Epoch              uint64
	Group              string
	MessageOffset      int64
	ActionOffset       int64
	MessageDurable     int64
	MessageSegmentSize int64
	ActionSegmentSize  int64
	MaxBytes           uint32
	WaitMillis         uint32
}

// SyncChunk is a run of whole log records.
type SyncChunk struct {
	Start, End, Offset int64
	Data               []byte
}

// SyncResponse carries a chunk of each log.
type SyncResponse struct {
	Epoch   uint64
	Message SyncChunk
	Action  SyncChunk
}

// AppendSyncRequest appends the body of q.
func AppendSyncRequest(dst []byte, q *SyncRequest) []byte {
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	dst = appendString8(dst, q.Group)
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.MessageOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.ActionOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.MessageDurable))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.MessageSegmentSize))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.ActionSegmentSize))
	dst = binary.BigEndian.AppendUint32(dst, q.MaxBytes)
	return binary.BigEndian.AppendUint32(dst, q.WaitMillis)
}

// DecodeSyncRequest decodes a sync request body. Negative offsets or
// segment sizes are rejected.
func DecodeSyncRequest(body []byte) (SyncRequest, error) {
	r := reader{b: body}
	q := SyncRequest{
		Epoch:              r.u64(),
		Group:              r.string8(),
		MessageOffset:      int64(r.u64()),
		ActionOffset:       int64(r.u64()),
		MessageDurable:     int64(r.u64()),
		MessageSegmentSize: int64(r.u64()),
		ActionSegmentSize:  int64(r.u64()),
		MaxBytes:           r.u32(),
		WaitMillis:         r.u32(),
	}
	if err := r.done(); err != nil {
		return SyncRequest{}, fmt.Errorf("%w: sync request", err)
	}
	if q.MessageOffset < 0 || q.ActionOffset < 0 || q.MessageSegmentSize <= 0 || q.ActionSegmentSize <= 0 {
		return SyncRequest{}, fmt.Errorf("%w: sync request with a negative offset or segment size", ErrInvalid)
	}
	if q.MessageDurable < 0 || q.MessageDurable > q.MessageOffset {
		return SyncRequest{}, fmt.Errorf("%w: sync request acknowledges %d, past its offset %d", ErrInvalid, q.MessageDurable, q.MessageOffset)
	}
	return q, nil
}

func appendSyncChunk(dst []byte, c *SyncChunk) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.End))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Offset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Data)))
	return append(dst, c.Data...)
}

// AppendSyncResponseHead appends a sync response up to the message chunk's
// data, so a server can write the data from its own buffers after it (the
// action chunk follows with AppendSyncChunkHead).
func AppendSyncResponseHead(dst []byte, epoch uint64, message *SyncChunk) []byte {
	dst = binary.BigEndian.AppendUint64(dst, epoch)
	return AppendSyncChunkHead(dst, message)
}

// AppendSyncChunkHead appends a chunk's fields up to its data.
func AppendSyncChunkHead(dst []byte, c *SyncChunk) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.End))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Offset))
	return binary.BigEndian.AppendUint32(dst, uint32(len(c.Data)))
}

// AppendSyncResponse appends the body of p.
func AppendSyncResponse(dst []byte, p *SyncResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
	dst = appendSyncChunk(dst, &p.Message)
	return appendSyncChunk(dst, &p.Action)
}

func (r *reader) syncChunk() SyncChunk {
	return SyncChunk{Start: int64(r.u64()), End: int64(r.u64()), Offset: int64(r.u64()), Data: r.bytes32()}
}

// DecodeSyncResponse decodes a sync response body; the chunks' data alias
// body. A chunk whose offsets are inconsistent (offset below start or past
// end, data reaching past end) is rejected.
func DecodeSyncResponse(body []byte) (SyncResponse, error) {
	r := reader{b: body}
	p := SyncResponse{Epoch: r.u64()}
	p.Message = r.syncChunk()
	p.Action = r.syncChunk()
	if err := r.done(); err != nil {
		return SyncResponse{}, fmt.Errorf("%w: sync response", err)
	}
	for _, c := range []*SyncChunk{&p.Message, &p.Action} {
		if c.Start < 0 || c.Offset < c.Start || c.Offset > c.End || c.Offset+int64(len(c.Data)) > c.End {
			return SyncResponse{}, fmt.Errorf("%w: sync chunk start %d offset %d (%d bytes) end %d", ErrInvalid, c.Start, c.Offset, len(c.Data), c.End)
		}
	}
	return p, nil
}
