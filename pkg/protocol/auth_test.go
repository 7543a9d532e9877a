package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestAuthRequest_RoundTrip(t *testing.T) {
	for _, q := range []AuthRequest{
		{Name: "billing", Secret: "s3cret"},
		{Name: strings.Repeat("n", 255), Secret: strings.Repeat("s", MaxAuthSecret)},
		{Name: "x"},
	} {
		b, err := AppendAuthRequest(nil, &q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAuthRequest(b)
		if err != nil {
			t.Fatalf("%q: %v", q.Name, err)
		}
		if got != q {
			t.Fatalf("round trip: got %+v, want %+v", got, q)
		}
	}
	if CmdAuth.String() != "auth" {
		t.Fatalf("CmdAuth.String() = %q", CmdAuth.String())
	}
}

func TestAuthRequest_Refuses(t *testing.T) {
	for _, q := range []AuthRequest{{}, {Name: strings.Repeat("n", 256)}, {Name: "a", Secret: strings.Repeat("s", MaxAuthSecret+1)}} {
		if _, err := AppendAuthRequest(nil, &q); !errors.Is(err, ErrInvalid) {
			t.Fatalf("name %d bytes, secret %d bytes: err %v, want ErrInvalid", len(q.Name), len(q.Secret), err)
		}
	}
	for _, b := range [][]byte{nil, {0, 0, 0}, {3, 'a'}, {1, 'a', 0, 1}, {1, 'a', 0, 0, 9}} {
		if _, err := DecodeAuthRequest(b); err == nil {
			t.Fatalf("decode %v: no error", b)
		}
	}
}

func TestAuthResponse_RoundTrip(t *testing.T) {
	for _, a := range []AuthResponse{{Name: "rt1", Kind: 2, Group: "rt1"}, {Name: "alice", Kind: 3}} {
		got, err := DecodeAuthResponse(AppendAuthResponse(nil, &a))
		if err != nil || got != a {
			t.Fatalf("round trip %+v: got %+v, %v", a, got, err)
		}
	}
}

func TestStatus_AuthNames(t *testing.T) {
	if StatusUnauthenticated.String() != "unauthenticated" || StatusForbidden.String() != "forbidden" {
		t.Fatal("auth statuses are not named")
	}
	if StatusUnauthenticated.Retryable() || StatusForbidden.Retryable() {
		t.Fatal("an auth refusal must not be retried")
	}
	if !errors.Is(Errorf(StatusForbidden, "publish order.x"), ErrForbidden) {
		t.Fatal("errors.Is(forbidden) does not hold")
	}
}

func FuzzDecodeAuthRequest(f *testing.F) {
	b, _ := AppendAuthRequest(nil, &AuthRequest{Name: "app", Secret: "secret"})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeAuthRequest(b)
		if err != nil {
			return
		}
		again, err := AppendAuthRequest(nil, &q)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoded auth request differs: %v", err)
		}
	})
}

func FuzzDecodeAuthResponse(f *testing.F) {
	f.Add(AppendAuthResponse(nil, &AuthResponse{Name: "rt1", Kind: 2, Group: "rt1"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAuthResponse(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendAuthResponse(nil, &a), b) {
			t.Fatal("re-encoded auth response differs")
		}
	})
}
