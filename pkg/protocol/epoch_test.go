package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleEpoch() (SyncEpochRequest, SyncEpochResponse) {
	h := []EpochStart{{Epoch: 0}, {Epoch: 7, MessageStart: 1 << 33, ActionStart: 4096}, {Epoch: 19, MessageStart: 1 << 33, ActionStart: 8192}}
	return SyncEpochRequest{Group: "rt1", History: h[:2]}, SyncEpochResponse{TruncateMessage: 1 << 33, TruncateAction: 4096, History: h}
}

func TestEpochBodies_RoundTrip(t *testing.T) {
	q, p := sampleEpoch()
	gq, err := DecodeSyncEpochRequest(AppendSyncEpochRequest(nil, &q))
	if err != nil || !reflect.DeepEqual(gq, q) {
		t.Fatalf("request: %+v, %v", gq, err)
	}
	gp, err := DecodeSyncEpochResponse(AppendSyncEpochResponse(nil, &p))
	if err != nil || !reflect.DeepEqual(gp, p) {
		t.Fatalf("response: %+v, %v", gp, err)
	}
	if CmdSyncEpoch.String() != "sync-epoch" {
		t.Fatalf("command name %q", CmdSyncEpoch)
	}
}

func TestEpochBodies_RejectBadInput(t *testing.T) {
	q, p := sampleEpoch()
	qb, pb := AppendSyncEpochRequest(nil, &q), AppendSyncEpochResponse(nil, &p)
	for n := 0; n < len(qb); n++ {
		if _, err := DecodeSyncEpochRequest(qb[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("request cut at %d: %v", n, err)
		}
	}
	for n := 0; n < len(pb); n++ {
		if _, err := DecodeSyncEpochResponse(pb[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("response cut at %d: %v", n, err)
		}
	}
	if _, err := DecodeSyncEpochRequest(append(qb, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if _, err := DecodeSyncEpochResponse(append(pb, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	bad := [][]EpochStart{
		{{Epoch: 5}, {Epoch: 5, MessageStart: 10}},                  // epoch repeats
		{{Epoch: 5, MessageStart: 10}, {Epoch: 6, MessageStart: 9}}, // start goes back
		{{Epoch: 5, ActionStart: -1}},                               // negative
	}
	for _, h := range bad {
		b := AppendSyncEpochRequest(nil, &SyncEpochRequest{Group: "g", History: h})
		if _, err := DecodeSyncEpochRequest(b); !errors.Is(err, ErrInvalid) {
			t.Fatalf("history %+v: %v", h, err)
		}
	}
	neg := AppendSyncEpochResponse(nil, &SyncEpochResponse{TruncateMessage: -1})
	if _, err := DecodeSyncEpochResponse(neg); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative truncation point: %v", err)
	}
}

func FuzzDecodeSyncEpoch(f *testing.F) {
	q, p := sampleEpoch()
	f.Add(AppendSyncEpochRequest(nil, &q))
	f.Add(AppendSyncEpochResponse(nil, &p))
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := DecodeSyncEpochRequest(b); err == nil {
			if !bytes.Equal(AppendSyncEpochRequest(nil, &q), b) {
				t.Fatal("re-encoded request differs")
			}
		}
		if p, err := DecodeSyncEpochResponse(b); err == nil {
			if !bytes.Equal(AppendSyncEpochResponse(nil, &p), b) {
				t.Fatal("re-encoded response differs")
			}
		}
	})
}
