package protocol

import (
	"bytes"
	"testing"
	"time"
)

// Every decoder must return an error or a value for any input, never panic,
// and whatever decodes must re-encode to the same bytes.

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendRequest(nil, CmdPing, 1, []byte("hi")))
	f.Add(AppendResponse(nil, StatusBusy, 2, nil))
	f.Add([]byte{0x51, 0x4d, 1, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := ReadFrame(b, 1<<16)
		if err != nil {
			return
		}
		re := AppendHeader(nil, fr.Header)
		re = append(re, fr.Body...)
		if !bytes.Equal(re, b[:n]) {
			t.Fatalf("re-encoded frame differs")
		}
	})
}

func FuzzParseMessage(f *testing.F) {
	m := sampleMessage()
	m.Properties[1].Value = "short" // keep inputs small so the fuzzer runs fast
	raw, _ := AppendMessage(nil, m, DefaultLimits)
	f.Add(raw)
	small, _ := AppendMessage(nil, &Message{Subject: "s", ID: "i"}, DefaultLimits)
	f.Add(small)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseMessageNoCRC(b)
		if err != nil {
			return
		}
		_ = DefaultLimits.CheckView(&v)
		m := v.Message()
		re, err := AppendMessage(nil, m, Limits{MaxBody: 1 << 30, MaxSubject: 255, MaxID: 255, MaxTags: 255, MaxTag: 255, MaxProperties: 65535, MaxPropertyBytes: 1 << 30})
		if err != nil {
			return // parsed, but breaks a rule the encoder enforces (e.g. empty id)
		}
		if !bytes.Equal(re[4:], b[4:]) {
			t.Fatalf("re-encoded message differs")
		}
	})
}

func FuzzDecodeSendRequest(f *testing.F) {
	f.Add(AppendSendRequest(nil, 1, encodeN(f, 2, 8)))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeSendRequest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendSendRequest(nil, req.Epoch, req.Messages), b) {
			t.Fatal("re-encoded send request differs")
		}
	})
}

func FuzzDecodeSendResponse(f *testing.F) {
	f.Add(AppendSendResponse(nil, []Status{StatusOK, StatusBusy}))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeSendResponse(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendSendResponse(nil, st), b) {
			t.Fatal("re-encoded send response differs")
		}
	})
}

func FuzzDecodePullRequest(f *testing.F) {
	f.Add(AppendPullRequest(nil, &PullRequest{Subject: "s", Group: "g", ConsumerID: "c", Max: 1, Timeout: time.Second, TagMode: TagAny, Tags: []string{"x"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePullRequest(b)
		if err != nil {
			return
		}
		re := AppendPullRequest(nil, &p)
		if !bytes.Equal(re, b) {
			t.Fatal("re-encoded pull request differs")
		}
	})
}

func FuzzDecodePullResponse(f *testing.F) {
	f.Add(AppendPullResponse(nil, []PulledMessage{{1, 2, []byte("abc")}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := DecodePullResponse(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendPullResponse(nil, ms), b) {
			t.Fatal("re-encoded pull response differs")
		}
	})
}

func FuzzDecodeAckRequest(f *testing.F) {
	f.Add(AppendAckRequest(nil, &AckRequest{Subject: "s", Group: "g", ConsumerID: "c", First: 1, Last: 2}))
	f.Add(AppendAckRequest(nil, &AckRequest{Subject: "s", Group: "g", ConsumerID: "c", Flags: AckList, Seqs: []uint64{3, 4, 9}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAckRequest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendAckRequest(nil, &a), b) {
			t.Fatal("re-encoded ack request differs")
		}
	})
}
