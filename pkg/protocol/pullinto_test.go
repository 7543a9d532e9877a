package protocol

import (
	"bytes"
	"testing"
)

func TestDecodePullResponseInto_RoundTrip(t *testing.T) {
	in := []PulledMessage{{1, 10, []byte("first")}, {2, 11, nil}, {7, 12, []byte("third message")}}
	body := AppendPullResponse(nil, in)
	reused := make([]PulledMessage, 0, 1) // grows once, then is reused
	for round := range 3 {
		got, err := DecodePullResponseInto(reused, body)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(got) != len(in) {
			t.Fatalf("round %d: %d entries, want %d", round, len(got), len(in))
		}
		for i := range in {
			if got[i].PullSeq != in[i].PullSeq || got[i].ConsumeSeq != in[i].ConsumeSeq || !bytes.Equal(got[i].Message, in[i].Message) {
				t.Fatalf("round %d entry %d: %+v, want %+v", round, i, got[i], in[i])
			}
		}
		reused = got
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := DecodePullResponseInto(reused, body); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per decode into a large enough slice, want 0", allocs)
	}
	for n := range len(body) {
		if got, err := DecodePullResponseInto(reused, body[:n]); err == nil || len(got) != 0 {
			t.Fatalf("truncated at %d: %d entries, err %v", n, len(got), err)
		}
	}
	if _, err := DecodePullResponseInto(reused, append(body[:len(body):len(body)], 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

func FuzzDecodePullResponseInto(f *testing.F) {
	f.Add(AppendPullResponse(nil, []PulledMessage{{1, 2, []byte("abc")}}))
	f.Add(AppendPullResponse(nil, []PulledMessage{{1, 2, []byte("abc")}, {3, 4, nil}}))
	reused := make([]PulledMessage, 0, 4)
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := DecodePullResponseInto(reused, b)
		want, wantErr := DecodePullResponse(b)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("Into: %v, DecodePullResponse: %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if len(ms) != len(want) || !bytes.Equal(AppendPullResponse(nil, ms), b) {
			t.Fatal("re-encoded response differs")
		}
		reused = ms
	})
}
