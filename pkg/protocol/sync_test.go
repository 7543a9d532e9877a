package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleSync() (SyncRequest, SyncResponse) {
	q := SyncRequest{Epoch: 3, Group: "rt1", MessageOffset: 1 << 33, ActionOffset: 4096, MessageDurable: 1 << 32, MessageSegmentSize: 1 << 30,
		ActionSegmentSize: 64 << 20, MaxBytes: 1 << 20, WaitMillis: 500, Generation: 2,
		LeaseStamp: 1<<40 + 7, SlaveID: "127.0.0.1:20882"}
	p := SyncResponse{Epoch: 3, Generation: 2, Cut: -1, LeaseStamp: 1<<40 + 9,
		Message: SyncChunk{Start: 0, End: 200, Offset: 100, Data: bytes.Repeat([]byte{7}, 100)},
		Action:  SyncChunk{Start: 64, End: 64, Offset: 64, Data: []byte{}}}
	return q, p
}

func TestSyncBodies_RoundTrip(t *testing.T) {
	q, p := sampleSync()
	gq, err := DecodeSyncRequest(AppendSyncRequest(nil, &q))
	if err != nil || gq != q {
		t.Fatalf("request: %+v, %v", gq, err)
	}
	body := AppendSyncResponse(nil, &p)
	gp, err := DecodeSyncResponse(body)
	if err != nil || !reflect.DeepEqual(gp, p) {
		t.Fatalf("response: %+v, %v", gp, err)
	}
	// The head + data form a server writes is the same body.
	split := AppendSyncResponseHead(nil, &p)
	split = append(split, p.Message.Data...)
	split = AppendSyncChunkHead(split, &p.Action)
	split = append(split, p.Action.Data...)
	if !bytes.Equal(split, body) {
		t.Fatal("head + data differs from AppendSyncResponse")
	}
}

func TestSyncBodies_RejectBadInput(t *testing.T) {
	q, p := sampleSync()
	req := AppendSyncRequest(nil, &q)
	resp := AppendSyncResponse(nil, &p)
	for n := 0; n < len(req); n++ {
		if _, err := DecodeSyncRequest(req[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("request cut at %d: %v", n, err)
		}
	}
	if _, err := DecodeSyncRequest(append(req, 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("request with trailing bytes: %v", err)
	}
	for n := 0; n < len(resp); n++ {
		if _, err := DecodeSyncResponse(resp[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("response cut at %d: %v", n, err)
		}
	}
	if _, err := DecodeSyncResponse(append(resp, 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("response with trailing bytes: %v", err)
	}
	neg := q
	neg.MessageOffset = -1
	if _, err := DecodeSyncRequest(AppendSyncRequest(nil, &neg)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative offset: %v", err)
	}
	ahead := q
	ahead.MessageDurable = q.MessageOffset + 1
	if _, err := DecodeSyncRequest(AppendSyncRequest(nil, &ahead)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("acknowledgement past the offset: %v", err)
	}
	zero := q
	zero.ActionSegmentSize = 0
	if _, err := DecodeSyncRequest(AppendSyncRequest(nil, &zero)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero segment size: %v", err)
	}
	past := p
	past.Action = SyncChunk{Start: 0, End: 150, Offset: 100, Data: bytes.Repeat([]byte{7}, 100)} // data reaches past the committed end
	if _, err := DecodeSyncResponse(AppendSyncResponse(nil, &past)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("action chunk past its end: %v", err)
	}
	// A message chunk may carry records written but not yet durable on the
	// master: past its end, from an offset past it.
	tentative := p
	tentative.Message = SyncChunk{Start: 0, End: 150, Offset: 160, Data: bytes.Repeat([]byte{7}, 100)}
	if got, err := DecodeSyncResponse(AppendSyncResponse(nil, &tentative)); err != nil || !reflect.DeepEqual(got, tentative) {
		t.Fatalf("tentative message chunk: %+v, %v", got, err)
	}
	cut := p
	cut.Cut = 64
	if _, err := DecodeSyncResponse(AppendSyncResponse(nil, &cut)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a cut with data: %v", err)
	}
	cut.Message.Data, cut.Action.Data = []byte{}, []byte{}
	if got, err := DecodeSyncResponse(AppendSyncResponse(nil, &cut)); err != nil || got.Cut != 64 {
		t.Fatalf("a cut: %+v, %v", got, err)
	}
	cut.Cut = -2
	if _, err := DecodeSyncResponse(AppendSyncResponse(nil, &cut)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cut -2: %v", err)
	}
	below := p
	below.Message.Start = 120 // offset below start
	if _, err := DecodeSyncResponse(AppendSyncResponse(nil, &below)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("chunk below its start: %v", err)
	}
}

func FuzzSyncBodies(f *testing.F) {
	q, p := sampleSync()
	f.Add(AppendSyncRequest(nil, &q))
	f.Add(AppendSyncResponse(nil, &p))
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := DecodeSyncRequest(b); err == nil {
			if !bytes.Equal(AppendSyncRequest(nil, &q), b) {
				t.Fatal("sync request re-encodes differently")
			}
		}
		if p, err := DecodeSyncResponse(b); err == nil {
			if !bytes.Equal(AppendSyncResponse(nil, &p), b) {
				t.Fatal("sync response re-encodes differently")
			}
		}
	})
}

// A pipelined fetch has its own command (an older master answers it
// StatusUnknownCommand) and the same bodies.
func TestSyncLogAhead_Name(t *testing.T) {
	if CmdSyncLogAhead.String() != "sync-log-ahead" || CmdSyncLogAhead == CmdSyncLog || CmdSyncLogAhead == CmdSyncEpoch {
		t.Fatalf("CmdSyncLogAhead = %d %q", CmdSyncLogAhead, CmdSyncLogAhead.String())
	}
}
