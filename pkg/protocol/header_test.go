package protocol

import (
	"errors"
	"testing"
)

func TestHeader_RoundTrip(t *testing.T) {
	h := Header{Version: Version, Flags: FlagResponse, Code: uint16(StatusReadonly), RequestID: 1<<63 + 5, BodyLen: 1234}
	b := AppendHeader(nil, h)
	if len(b) != HeaderSize {
		t.Fatalf("header is %d bytes, want %d", len(b), HeaderSize)
	}
	got, err := ParseHeader(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Fatalf("got %+v want %+v", got, h)
	}
	if !got.IsResponse() || got.IsOneWay() || got.Status() != StatusReadonly {
		t.Fatal("accessors disagree with flags")
	}
}

func TestParseHeader_Rejects(t *testing.T) {
	good := AppendHeader(nil, Header{Version: Version, Code: uint16(CmdPing), RequestID: 1, BodyLen: 10})
	tests := []struct {
		name   string
		mutate func(b []byte)
		max    int
		want   error
	}{
		{"bad magic", func(b []byte) { b[0] = 'X' }, 0, ErrBadMagic},
		{"unknown version", func(b []byte) { b[2] = 9 }, 0, ErrUnknownVersion},
		{"unknown flags", func(b []byte) { b[3] = 0x80 }, 0, ErrBadFlags},
		{"oversized", func(b []byte) { b[14], b[15] = 0xff, 0xff }, 0, ErrFrameTooLarge},
		{"over configured max", func(b []byte) {}, 9, ErrFrameTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			tc.mutate(b)
			if _, err := ParseHeader(b, tc.max); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := ParseHeader(good[:HeaderSize-1], 0); !errors.Is(err, ErrShortHeader) {
		t.Fatalf("short header: %v", err)
	}
}

func TestReadFrame_SplitsPipelinedFrames(t *testing.T) {
	var stream []byte
	for i := range 5 {
		stream = AppendRequest(stream, CmdPing, uint64(i), make([]byte, i*7))
	}
	for i := range 5 {
		f, n, err := ReadFrame(stream, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.Header.RequestID != uint64(i) || len(f.Body) != i*7 || f.Header.Command() != CmdPing {
			t.Fatalf("frame %d: %+v", i, f.Header)
		}
		// A partial frame asks for more bytes.
		if n > HeaderSize {
			if _, _, err := ReadFrame(stream[:n-1], 0); !errors.Is(err, ErrShortFrame) {
				t.Fatalf("partial frame: %v", err)
			}
		}
		stream = stream[n:]
	}
}

func TestErrorResponse_CarriesStatus(t *testing.T) {
	b := AppendErrorResponse(nil, 7, Errorf(StatusTooLarge, "body is 5 MiB"))
	f, _, err := ReadFrame(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.Status() != StatusTooLarge || string(f.Body) == "" {
		t.Fatalf("got %v %q", f.Header.Status(), f.Body)
	}
	if string(f.Body) != "body is 5 MiB" {
		t.Fatalf("body %q repeats the status prefix", f.Body)
	}
	rebuilt := StatusError(f.Header.Status(), string(f.Body))
	if !errors.Is(rebuilt, ErrTooLarge) || errors.Is(rebuilt, ErrReadonly) {
		t.Fatalf("errors.Is mismatch for %v", rebuilt)
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want Status
	}{
		{nil, StatusOK},
		{ErrReadonly, StatusReadonly},
		{errors.Join(errors.New("ctx"), Errorf(StatusBusy, "x")), StatusBusy},
		{ErrTruncated, StatusBadRequest},
		{ErrChecksum, StatusInvalid},
		{errors.New("disk on fire"), StatusInternal},
	}
	for _, tc := range tests {
		if got := StatusOf(tc.err); got != tc.want {
			t.Errorf("StatusOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !StatusReadonly.Retryable() || StatusTooLarge.Retryable() || !StatusDuplicate.Success() {
		t.Fatal("Retryable/Success")
	}
	if Command(999).String() != "command(999)" || CmdSend.String() != "send" || Status(999).String() != "status(999)" {
		t.Fatal("String")
	}
}
