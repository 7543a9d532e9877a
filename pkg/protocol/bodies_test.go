package protocol

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func encodeN(t testing.TB, n, size int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		m := &Message{Subject: "bench.subject", ID: "01JDX3YQ4W6V1Z2A7B8C9D0E1F", Body: make([]byte, size), Created: time.UnixMilli(1)}
		b, err := AppendMessage(nil, m, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func TestSendRequest_RoundTrip(t *testing.T) {
	msgs := encodeN(t, 3, 10)
	body := AppendSendRequest(nil, 42, msgs)
	req, err := DecodeSendRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	if req.Epoch != 42 || !reflect.DeepEqual(req.Messages, msgs) {
		t.Fatalf("got %+v", req)
	}
	var batch SendBatch
	batch.Reset(42)
	for _, m := range msgs {
		v, _ := ParseMessage(m)
		if err := batch.Add(v.Message(), DefaultLimits); err != nil {
			t.Fatal(err)
		}
	}
	if string(batch.Bytes()) != string(body) || batch.Len() != 3 {
		t.Fatal("SendBatch encodes differently from AppendSendRequest")
	}
	if err := batch.Add(&Message{Subject: "bad subject", ID: "x"}, DefaultLimits); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad message accepted: %v", err)
	}
	if string(batch.Bytes()) != string(body) {
		t.Fatal("a rejected message changed the batch")
	}
	for n := 0; n < len(body); n++ {
		if _, err := DecodeSendRequest(body[:n]); err == nil {
			t.Fatalf("prefix of %d bytes decoded", n)
		}
	}
	if _, err := DecodeSendRequest(append(body, 1)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("trailing: %v", err)
	}
}

// A SendRequest decoded again reuses its Messages: a server decoding one
// request after another allocates nothing, and a bad body leaves it zero.
func TestSendRequest_DecodeReuses(t *testing.T) {
	three := AppendSendRequest(nil, 7, encodeN(t, 3, 10))
	one := AppendSendRequest(nil, 8, encodeN(t, 1, 20))
	var req SendRequest
	if err := req.Decode(three); err != nil || req.Epoch != 7 || len(req.Messages) != 3 {
		t.Fatalf("three: %v %+v", err, req)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := req.Decode(one); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Decode of a smaller request allocated %.0f times", allocs)
	}
	if req.Epoch != 8 || len(req.Messages) != 1 || len(req.Messages[0]) != len(encodeN(t, 1, 20)[0]) {
		t.Fatalf("one: %+v", req)
	}
	if err := req.Decode(three[:len(three)-1]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated body: %v", err)
	}
	if req.Epoch != 0 || len(req.Messages) != 0 {
		t.Fatalf("a failed Decode left %+v", req)
	}
}

func TestSendResponse_RoundTrip(t *testing.T) {
	in := []Status{StatusOK, StatusDuplicate, StatusTooLarge}
	got, err := DecodeSendResponse(AppendSendResponse(nil, in))
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("got %v %v", got, err)
	}
	if _, err := DecodeSendResponse([]byte{0, 0, 0, 2, 0, 0}); err == nil {
		t.Fatal("short response decoded")
	}
}

func TestPullRequest_RoundTrip(t *testing.T) {
	in := PullRequest{Subject: "s", Group: "g", ConsumerID: "c@1", Max: 64, Timeout: 2500 * time.Millisecond,
		Flags: PullBroadcast | PullEarliest | PullPipelined, KnownPullSeq: -1, TagMode: TagAll, Tags: []string{"a", "b"}}
	body := AppendPullRequest(nil, &in)
	got, err := DecodePullRequest(body)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("got %+v %v", got, err)
	}
	for n := 0; n < len(body); n++ {
		if _, err := DecodePullRequest(body[:n]); err == nil {
			t.Fatalf("prefix of %d bytes decoded", n)
		}
	}
	in.Flags = PullEarliest | 1<<5
	if _, err := DecodePullRequest(AppendPullRequest(nil, &in)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("unknown flag: %v", err)
	}
	in.Flags = 0
	in.TagMode = 7
	if _, err := DecodePullRequest(AppendPullRequest(nil, &in)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad tag mode: %v", err)
	}
}

func TestPullResponse_RoundTrip(t *testing.T) {
	msgs := encodeN(t, 3, 5)
	in := []PulledMessage{{1, 10, msgs[0]}, {2, 11, msgs[1]}, {3, 15, msgs[2]}}
	body := AppendPullResponse(nil, in)
	got, err := DecodePullResponse(body)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("got %+v %v", got, err)
	}
	for n := 0; n < len(body); n++ {
		if _, err := DecodePullResponse(body[:n]); err == nil {
			t.Fatalf("prefix of %d bytes decoded", n)
		}
	}
}

func TestAckRequest_RoundTrip(t *testing.T) {
	in := AckRequest{Subject: "s", Group: "g", ConsumerID: "c", Flags: 1, First: 5, Last: 9}
	body := AppendAckRequest(nil, &in)
	got, err := DecodeAckRequest(body)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("got %+v %v", got, err)
	}
	if _, err := DecodeAckRequest(body[:len(body)-1]); err == nil {
		t.Fatal("truncated ack decoded")
	}
	list := AckRequest{Subject: "s", Group: "g", ConsumerID: "c", Flags: AckList, Seqs: []uint64{7, 8, 10}}
	body = AppendAckRequest(nil, &list)
	if got, err := DecodeAckRequest(body); err != nil || !reflect.DeepEqual(got, list) {
		t.Fatalf("list: got %+v %v", got, err)
	}
	if _, err := DecodeAckRequest(body[:len(body)-1]); err == nil {
		t.Fatal("truncated list ack decoded")
	}
	for _, n := range []int{0, MaxAckList + 1} {
		bad := AckRequest{Subject: "s", Group: "g", ConsumerID: "c", Flags: AckList, Seqs: make([]uint64, n)}
		if _, err := DecodeAckRequest(AppendAckRequest(nil, &bad)); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("list of %d: %v", n, err)
		}
	}
}

func BenchmarkSendRequest(b *testing.B) {
	for _, n := range []int{1, 200} {
		b.Run(map[int]string{1: "1x256B", 200: "200x256B"}[n], func(b *testing.B) {
			msgs := encodeN(b, n, 256)
			buf := AppendSendRequest(nil, 0, msgs)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendSendRequest(buf[:0], 0, msgs)
				req, err := DecodeSendRequest(buf)
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range req.Messages {
					if _, err := ParseMessage(m); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func BenchmarkPullResponse(b *testing.B) {
	for _, n := range []int{1, 200} {
		b.Run(map[int]string{1: "1x256B", 200: "200x256B"}[n], func(b *testing.B) {
			raw := encodeN(b, n, 256)
			msgs := make([]PulledMessage, n)
			for i := range msgs {
				msgs[i] = PulledMessage{PullSeq: uint64(i), ConsumeSeq: uint64(i), Message: raw[i]}
			}
			buf := AppendPullResponse(nil, msgs)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendPullResponse(buf[:0], msgs)
				if _, err := DecodePullResponse(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
