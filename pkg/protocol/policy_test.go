package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPolicyRequest_RoundTrip(t *testing.T) {
	for _, q := range []PolicyRequest{{}, {Version: 42, Wait: 30 * time.Second}, {Version: 1<<64 - 1, Wait: MaxPolicyWait}} {
		b := AppendPolicyRequest(nil, &q)
		if len(b) != 12 {
			t.Fatalf("request of %d bytes, want 12", len(b))
		}
		got, err := DecodePolicyRequest(b)
		if err != nil || got != q {
			t.Fatalf("round trip %+v: got %+v, %v", q, got, err)
		}
	}
	if b := AppendPolicyRequest(nil, &PolicyRequest{Wait: -time.Second}); !bytes.Equal(b[8:], []byte{0, 0, 0, 0}) {
		t.Fatalf("negative wait encoded as %v", b[8:])
	}
	for _, b := range [][]byte{nil, make([]byte, 11), make([]byte, 13)} {
		if _, err := DecodePolicyRequest(b); err == nil {
			t.Fatalf("decode %d bytes: no error", len(b))
		}
	}
	if CmdPolicy.String() != "policy" {
		t.Fatalf("CmdPolicy.String() = %q", CmdPolicy.String())
	}
}

func TestPolicyResponse_RoundTrip(t *testing.T) {
	for _, p := range []PolicyResponse{{Version: 7}, {Version: 9, Policy: []byte(`{"version":9,"identities":[]}`)}} {
		b, err := AppendPolicyResponse(nil, &p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePolicyResponse(b)
		if err != nil || got.Version != p.Version || !bytes.Equal(got.Policy, p.Policy) {
			t.Fatalf("round trip %+v: got %+v, %v", p, got, err)
		}
	}
	if _, err := AppendPolicyResponse(nil, &PolicyResponse{Policy: []byte(strings.Repeat("x", MaxPolicySize+1))}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized policy: %v", err)
	}
	for _, b := range [][]byte{nil, {0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 'x'}, {0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 'x'},
		{0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}} {
		if _, err := DecodePolicyResponse(b); err == nil {
			t.Fatalf("decode %v: no error", b)
		}
	}
}

func FuzzDecodePolicyRequest(f *testing.F) {
	f.Add(AppendPolicyRequest(nil, &PolicyRequest{Version: 3, Wait: time.Second}))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodePolicyRequest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendPolicyRequest(nil, &q), b) {
			t.Fatal("re-encoded policy request differs")
		}
	})
}

func FuzzDecodePolicyResponse(f *testing.F) {
	b, _ := AppendPolicyResponse(nil, &PolicyResponse{Version: 5, Policy: []byte(`{"version":5}`)})
	f.Add(b)
	f.Add(b[:12])
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePolicyResponse(b)
		if err != nil {
			return
		}
		again, err := AppendPolicyResponse(nil, &p)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoded policy response differs: %v", err)
		}
	})
}
