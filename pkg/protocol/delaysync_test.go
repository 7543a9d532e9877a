package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleDelaySync() (DelayManifestRequest, DelayManifestResponse, DelayReadRequest, DelayReadResponse) {
	mq := DelayManifestRequest{Epoch: 7, Group: "dl1", Run: 0xfeed, Since: 42, Acked: 1 << 33, WaitMillis: 500, LeaseStamp: 99, SlaveID: "dl1-s"}
	mp := DelayManifestResponse{Epoch: 7, Store: 0xabc, Run: 0xfeed, Version: 43, Replayed: 1<<33 + 100, LeaseStamp: 1 << 41, Flags: DelayManifestFull, Hours: []DelayHour{
		{Hour: 490000, ScheduleSize: 4096, Records: 12, DispatchSize: 24},
		{Hour: 490001, Flags: DelayHourRemoved},
	}}
	rq := DelayReadRequest{Epoch: 7, Group: "dl1", MaxBytes: 1 << 20, Ranges: []DelayRange{
		{Hour: 490000, File: DelayScheduleFile, From: 100, To: 4096},
		{Hour: 490000, File: DelayDispatchFile, From: 0, To: 24},
	}}
	rp := DelayReadResponse{Epoch: 7, Chunks: []DelayChunk{
		{Hour: 490000, File: DelayScheduleFile, Offset: 100, Data: bytes.Repeat([]byte{9}, 50)},
		{Hour: 490000, File: DelayDispatchFile, Offset: 0, Data: []byte{}},
	}}
	return mq, mp, rq, rp
}

var sampleOrigin = DelayOrigin{Store: 11, Parent: 9, Hours: []DelayHour{{Hour: 490000, ScheduleSize: 700, DispatchSize: 36}}}

func TestDelaySyncBodies_RoundTrip(t *testing.T) {
	mq, mp, rq, rp := sampleDelaySync()
	if g, err := DecodeDelayManifestRequest(AppendDelayManifestRequest(nil, &mq)); err != nil || g != mq {
		t.Fatalf("manifest request: %+v, %v", g, err)
	}
	if g, err := DecodeDelayManifestResponse(AppendDelayManifestResponse(nil, &mp)); err != nil || !reflect.DeepEqual(g, mp) {
		t.Fatalf("manifest response: %+v, %v", g, err)
	}
	if g, err := DecodeDelayReadRequest(AppendDelayReadRequest(nil, &rq)); err != nil || !reflect.DeepEqual(g, rq) {
		t.Fatalf("read request: %+v, %v", g, err)
	}
	if g, err := DecodeDelayReadResponse(AppendDelayReadResponse(nil, &rp)); err != nil || !reflect.DeepEqual(g, rp) {
		t.Fatalf("read response: %+v, %v", g, err)
	}
	empty := DelayManifestResponse{Epoch: 1}
	if g, err := DecodeDelayManifestResponse(AppendDelayManifestResponse(nil, &empty)); err != nil || !reflect.DeepEqual(g, empty) {
		t.Fatalf("empty manifest: %+v, %v", g, err)
	}
	oq := DelayOriginRequest{Epoch: 4, Group: "dl1"}
	if g, err := DecodeDelayOriginRequest(AppendDelayOriginRequest(nil, &oq)); err != nil || g != oq {
		t.Fatalf("origin request: %+v, %v", g, err)
	}
	if g, err := DecodeDelayOrigin(AppendDelayOrigin(nil, &sampleOrigin)); err != nil || !reflect.DeepEqual(g, sampleOrigin) {
		t.Fatalf("origin: %+v, %v", g, err)
	}
	if CmdDelaySyncRead.String() != "delay-sync-read" {
		t.Fatalf("command name %q", CmdDelaySyncRead)
	}
}

func TestDelaySyncBodies_RejectBadInput(t *testing.T) {
	mq, mp, rq, rp := sampleDelaySync()
	bodies := []struct {
		name   string
		b      []byte
		decode func([]byte) error
	}{
		{"manifest request", AppendDelayManifestRequest(nil, &mq), func(b []byte) error { _, err := DecodeDelayManifestRequest(b); return err }},
		{"manifest response", AppendDelayManifestResponse(nil, &mp), func(b []byte) error { _, err := DecodeDelayManifestResponse(b); return err }},
		{"read request", AppendDelayReadRequest(nil, &rq), func(b []byte) error { _, err := DecodeDelayReadRequest(b); return err }},
		{"read response", AppendDelayReadResponse(nil, &rp), func(b []byte) error { _, err := DecodeDelayReadResponse(b); return err }},
		{"origin request", AppendDelayOriginRequest(nil, &DelayOriginRequest{Epoch: 1, Group: "g"}), func(b []byte) error { _, err := DecodeDelayOriginRequest(b); return err }},
		{"origin", AppendDelayOrigin(nil, &sampleOrigin), func(b []byte) error { _, err := DecodeDelayOrigin(b); return err }},
	}
	for _, c := range bodies {
		for n := 0; n < len(c.b); n++ {
			if err := c.decode(c.b[:n]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s cut at %d: %v", c.name, n, err)
			}
		}
		if err := c.decode(append(c.b, 0)); !errors.Is(err, ErrTrailingBytes) {
			t.Fatalf("%s with a trailing byte: %v", c.name, err)
		}
	}
	bad := mq
	bad.Acked = -2
	if _, err := DecodeDelayManifestRequest(AppendDelayManifestRequest(nil, &bad)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("acked -2: %v", err)
	}
	neg := mp
	neg.Hours = []DelayHour{{Hour: 1, ScheduleSize: -1}}
	if _, err := DecodeDelayManifestResponse(AppendDelayManifestResponse(nil, &neg)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative size: %v", err)
	}
	for _, g := range []DelayRange{{File: 3, To: 1}, {File: DelayScheduleFile, From: 5, To: 4}, {File: DelayDispatchFile, From: -1}} {
		r := rq
		r.Ranges = []DelayRange{g}
		if _, err := DecodeDelayReadRequest(AppendDelayReadRequest(nil, &r)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("range %+v: %v", g, err)
		}
	}
	negOrigin := DelayOrigin{Hours: []DelayHour{{DispatchSize: -12}}}
	if _, err := DecodeDelayOrigin(AppendDelayOrigin(nil, &negOrigin)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative origin size: %v", err)
	}
	badChunk := rp
	badChunk.Chunks = []DelayChunk{{File: 0, Data: []byte{}}}
	if _, err := DecodeDelayReadResponse(AppendDelayReadResponse(nil, &badChunk)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("chunk of file 0: %v", err)
	}
	// A count larger than the body can hold is refused before allocating.
	huge := AppendDelayManifestResponse(nil, &DelayManifestResponse{})
	huge[len(huge)-4] = 0xff
	if _, err := DecodeDelayManifestResponse(huge); !errors.Is(err, ErrTruncated) {
		t.Fatalf("huge count: %v", err)
	}
}

func FuzzDelaySyncBodies(f *testing.F) {
	mq, mp, rq, rp := sampleDelaySync()
	f.Add(AppendDelayManifestRequest(nil, &mq))
	f.Add(AppendDelayManifestResponse(nil, &mp))
	f.Add(AppendDelayReadRequest(nil, &rq))
	f.Add(AppendDelayReadResponse(nil, &rp))
	f.Add(AppendDelayOrigin(nil, &sampleOrigin))
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := DecodeDelayOriginRequest(b); err == nil && !bytes.Equal(AppendDelayOriginRequest(nil, &q), b) {
			t.Fatal("origin request re-encodes differently")
		}
		if o, err := DecodeDelayOrigin(b); err == nil && !bytes.Equal(AppendDelayOrigin(nil, &o), b) {
			t.Fatal("origin re-encodes differently")
		}
		if q, err := DecodeDelayManifestRequest(b); err == nil && !bytes.Equal(AppendDelayManifestRequest(nil, &q), b) {
			t.Fatal("manifest request re-encodes differently")
		}
		if p, err := DecodeDelayManifestResponse(b); err == nil && !bytes.Equal(AppendDelayManifestResponse(nil, &p), b) {
			t.Fatal("manifest response re-encodes differently")
		}
		if q, err := DecodeDelayReadRequest(b); err == nil && !bytes.Equal(AppendDelayReadRequest(nil, &q), b) {
			t.Fatal("read request re-encodes differently")
		}
		if p, err := DecodeDelayReadResponse(b); err == nil && !bytes.Equal(AppendDelayReadResponse(nil, &p), b) {
			t.Fatal("read response re-encodes differently")
		}
	})
}
