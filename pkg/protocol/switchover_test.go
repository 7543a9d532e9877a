package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSwitchoverRequest_RoundTrip(t *testing.T) {
	cases := []SwitchoverRequest{
		{Group: "g1"},
		{Group: "rt-" + strings.Repeat("x", 252), Epoch: 1 << 40, Timeout: 30 * time.Second},
		{Group: "g", Epoch: 7, Timeout: MaxSwitchoverTimeout},
	}
	for _, q := range cases {
		b := AppendSwitchoverRequest(nil, &q)
		got, err := DecodeSwitchoverRequest(b)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		if got != q {
			t.Fatalf("round trip: got %+v, want %+v", got, q)
		}
	}
	if CmdSwitchover.String() != "switchover" {
		t.Fatalf("CmdSwitchover.String() = %q", CmdSwitchover.String())
	}
}

func TestSwitchoverRequest_ClampsTimeout(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{-time.Second, 0},
		{1500 * time.Microsecond, time.Millisecond},
		{MaxSwitchoverTimeout + time.Hour, MaxSwitchoverTimeout},
	} {
		got, err := DecodeSwitchoverRequest(AppendSwitchoverRequest(nil, &SwitchoverRequest{Group: "g", Timeout: c.in}))
		if err != nil {
			t.Fatal(err)
		}
		if got.Timeout != c.want {
			t.Errorf("timeout %v: decoded %v, want %v", c.in, got.Timeout, c.want)
		}
	}
}

func TestSwitchoverRequest_RejectsBadBodies(t *testing.T) {
	good := AppendSwitchoverRequest(nil, &SwitchoverRequest{Group: "g1", Epoch: 3, Timeout: time.Second})
	for n := range len(good) {
		if _, err := DecodeSwitchoverRequest(good[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%d of %d bytes: err %v, want ErrTruncated", n, len(good), err)
		}
	}
	if _, err := DecodeSwitchoverRequest(append(good, 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("trailing byte: err %v, want ErrTrailingBytes", err)
	}
	empty := AppendSwitchoverRequest(nil, &SwitchoverRequest{Epoch: 3})
	if _, err := DecodeSwitchoverRequest(empty); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty group: err %v, want ErrBadRequest", err)
	}
}

// FuzzDecodeSwitchoverRequest: no input may panic the decoder, and whatever
// decodes must encode back to the same bytes.
func FuzzDecodeSwitchoverRequest(f *testing.F) {
	f.Add(AppendSwitchoverRequest(nil, &SwitchoverRequest{Group: "g1", Epoch: 12, Timeout: 30 * time.Second}))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeSwitchoverRequest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendSwitchoverRequest(nil, &q), b) {
			t.Fatalf("re-encoded switchover request differs")
		}
	})
}
