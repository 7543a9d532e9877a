package protocol

import (
	"encoding/binary"
	"fmt"
)

// CmdSyncIndexRun: a slave copies its master's message-index run files
// instead of building its own (the message logs are byte-identical at the
// same offsets, so the master's runs index the copy too). The request
// names the run by the message-log offset it starts at (the end of the
// slave's last run) and a byte position in its file; the answer carries
// up to MaxSyncIndexChunk bytes of the file from there, the file's size
// and the end of the range the run covers. Size 0: no run starts there
// yet (the master still holds those entries in memory); ask again later.
// StatusNotFound: no run starts there and none will (the master's runs
// are cut elsewhere, or it keeps no index): the slave builds its own.
const CmdSyncIndexRun Command = 54

func init() { commandNames[CmdSyncIndexRun] = "sync-index-run" }

// MaxSyncIndexChunk bounds the file bytes of one answer.
const MaxSyncIndexChunk = 1 << 20

// Index run bodies, big-endian:
//
//	sync index run request   group s8 | epoch u64 | from i64 | pos i64
//	sync index run response  size i64 | to i64 | data (the rest)

// SyncIndexRunRequest asks for the bytes at Pos of the run file starting
// at message-log offset From.
type SyncIndexRunRequest struct {
	Group string
	Epoch uint64
	From  int64
	Pos   int64
}

// SyncIndexRunResponse is a piece of a run file: Data from the request's
// Pos; Size the whole file's size (0: no run there yet); To the end of the
// message-log range the run covers.
type SyncIndexRunResponse struct {
	Size int64
	To   int64
	Data []byte
}

// AppendSyncIndexRunRequest appends the body of q.
func AppendSyncIndexRunRequest(dst []byte, q *SyncIndexRunRequest) []byte {
	dst = appendString8(dst, q.Group)
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.From))
	return binary.BigEndian.AppendUint64(dst, uint64(q.Pos))
}

// DecodeSyncIndexRunRequest decodes a sync index run request body.
func DecodeSyncIndexRunRequest(body []byte) (SyncIndexRunRequest, error) {
	r := reader{b: body}
	q := SyncIndexRunRequest{Group: r.string8(), Epoch: r.u64(), From: int64(r.u64()), Pos: int64(r.u64())}
	if err := r.done(); err != nil {
		return SyncIndexRunRequest{}, fmt.Errorf("%w: sync index run request", err)
	}
	if q.From < 0 || q.Pos < 0 {
		return SyncIndexRunRequest{}, fmt.Errorf("%w: sync index run request: negative offset", ErrInvalid)
	}
	return q, nil
}

// AppendSyncIndexRunResponse appends the body of p.
func AppendSyncIndexRunResponse(dst []byte, p *SyncIndexRunResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.Size))
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.To))
	return append(dst, p.Data...)
}

// DecodeSyncIndexRunResponse decodes a sync index run response body; Data
// aliases body.
func DecodeSyncIndexRunResponse(body []byte) (SyncIndexRunResponse, error) {
	r := reader{b: body}
	p := SyncIndexRunResponse{Size: int64(r.u64()), To: int64(r.u64())}
	if r.err != nil {
		return SyncIndexRunResponse{}, fmt.Errorf("%w: sync index run response", r.err)
	}
	p.Data = body[16:]
	if p.Size < 0 || int64(len(p.Data)) > p.Size || len(p.Data) > MaxSyncIndexChunk {
		return SyncIndexRunResponse{}, fmt.Errorf("%w: sync index run response: %d bytes of a %d-byte file", ErrInvalid, len(p.Data), p.Size)
	}
	return p, nil
}
