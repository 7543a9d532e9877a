package protocol

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// bodyCodec is one body type's encoder and decoder, as a round trip over any.
type bodyCodec struct {
	name   string
	sample any
	encode func(v any) []byte
	decode func(b []byte) (any, error)
}

// optionalTails are the lengths of the samples' trailers an older sender
// leaves out: without one the body decodes, as that sender's.
var optionalTails = map[string]int{"broker stats response": 4 + 2*4} // group count, two out-rates

func metaCodecs() []bodyCodec {
	ts := time.UnixMilli(1_700_000_000_123)
	return []bodyCodec{
		{"register request", RegisterRequest{Flags: RegisterLeaving, Kind: KindDelay, Role: RoleSlave, State: GroupReadonly,
			Group: "g1", BrokerID: "b-1", Address: "127.0.0.1:2000", LeaseID: -5, Load: BrokerLoad{1, 2, 3, 1 << 40, 12345, 1 << 33, 250}, Epoch: 1 << 50,
			WriteState: WriteReadonly, WriteReason: "the eligible slave is gone and the meta server is unreachable"},
			func(v any) []byte { r := v.(RegisterRequest); return AppendRegisterRequest(nil, &r) },
			func(b []byte) (any, error) { return DecodeRegisterRequest(b) }},
		{"register response", RegisterResponse{LeaseID: 77, TTL: 10 * time.Second, Version: 9, Master: "127.0.0.1:2000", Epoch: 981,
			Flags: RegisterEligible | RegisterSyncSet | RegisterHasSet, EligibleSlave: "127.0.0.1:2001"},
			func(v any) []byte { r := v.(RegisterResponse); return AppendRegisterResponse(nil, &r) },
			func(b []byte) (any, error) { return DecodeRegisterResponse(b) }},
		{"lookup request", LookupRequest{ClientType: ClientConsumer, Subject: "%RETRY%" + strings.Repeat("s", 200) + "%" + strings.Repeat("g", 100), Group: "grp", ClientID: "c@host:1",
			Wait: 9 * time.Second, Known: 0xfeedface12345678},
			func(v any) []byte { r := v.(LookupRequest); return AppendLookupRequest(nil, &r) },
			func(b []byte) (any, error) { return DecodeLookupRequest(b) }},
		{"lookup response", LookupResponse{Version: 42, Timestamp: ts, Flags: LookupConsumerOffline, Groups: []RouteGroup{
			{Group: "a", Kind: KindRealtime, State: GroupReadWrite, Master: "127.0.0.1:1", Slave: "127.0.0.1:2", Epoch: 7},
			{Group: "b", Kind: KindRealtime, State: GroupUnavailable}}},
			func(v any) []byte { r := v.(LookupResponse); return AppendLookupResponse(nil, &r) },
			func(b []byte) (any, error) { return DecodeLookupResponse(b) }},
		{"eligible request", EligibleRequest{Group: "g1", BrokerID: "b-1", Epoch: 1 << 40, Flags: RegisterSync, Slave: "b-2"},
			func(v any) []byte { r := v.(EligibleRequest); return AppendEligibleRequest(nil, &r) },
			func(b []byte) (any, error) { return DecodeEligibleRequest(b) }},
		{"eligible response", EligibleResponse{Flags: RegisterSyncSet | RegisterHasSet, Slave: "b-2"},
			func(v any) []byte { r := v.(EligibleResponse); return AppendEligibleResponse(nil, &r) },
			func(b []byte) (any, error) { return DecodeEligibleResponse(b) }},
		{"client heartbeat request", ClientHeartbeatRequest{Flags: ClientLeaving, ClientType: ClientConsumer, Subject: "s", Group: "g", ClientID: "c", LeaseID: 3},
			func(v any) []byte { r := v.(ClientHeartbeatRequest); return AppendClientHeartbeatRequest(nil, &r) },
			func(b []byte) (any, error) { return DecodeClientHeartbeatRequest(b) }},
		{"client heartbeat response", ClientHeartbeatResponse{LeaseID: 3, TTL: 1500 * time.Millisecond, Flags: LookupConsumerOffline},
			func(v any) []byte { r := v.(ClientHeartbeatResponse); return AppendClientHeartbeatResponse(nil, &r) },
			func(b []byte) (any, error) { return DecodeClientHeartbeatResponse(b) }},
	}
}

func adminCodecs() []bodyCodec {
	ts := time.UnixMilli(1_700_000_000_456)
	return []bodyCodec{
		{"consumer manage request", ConsumerManageRequest{Action: ManageResetTime, Subject: "orders", Group: "billing", Consumer: "c1", Time: ts},
			func(v any) []byte { r := v.(ConsumerManageRequest); return AppendConsumerManageRequest(nil, &r) },
			func(b []byte) (any, error) { return DecodeConsumerManageRequest(b) }},
		{"broker stats request", BrokerStatsRequest{Subject: "orders", Group: "billing"},
			func(v any) []byte { r := v.(BrokerStatsRequest); return AppendBrokerStatsRequest(nil, &r) },
			func(b []byte) (any, error) { return DecodeBrokerStatsRequest(b) }},
		{"broker stats response", BrokerStatsResponse{Time: ts, InPerSec: 10, OutPerSec: 20, StoredBytes: 30, Subjects: []SubjectStats{
			{Subject: "orders", Messages: 100, InPerSec: 5, Groups: []GroupStats{
				{Group: "billing", Cursor: 90, Backlog: 10, OutPerSec: 7, Consumers: []ConsumerStats{{Consumer: "c1", Flags: ConsumerOffline, Unacked: 2, LastSeen: ts}}},
				{Group: "audit", Cursor: 100, OutPerSec: 1 << 31}}},
			{Subject: "empty", Messages: 0}}},
			func(v any) []byte { r := v.(BrokerStatsResponse); return AppendBrokerStatsResponse(nil, &r) },
			func(b []byte) (any, error) { return DecodeBrokerStatsResponse(b) }},
		{"dead letters request", DeadLettersRequest{Action: DeadLettersRedrive, Subject: "orders", Group: "billing", After: 5, Max: 50, IDs: []string{"id1", "id2"}},
			func(v any) []byte { r := v.(DeadLettersRequest); return AppendDeadLettersRequest(nil, &r) },
			func(b []byte) (any, error) { return DecodeDeadLettersRequest(b) }},
		{"dead letters response", DeadLettersResponse{Total: 3, Affected: 1, Letters: []DeadLetter{{Seq: 1, Message: []byte("m1")}, {Seq: 2, Message: []byte{}}}},
			func(v any) []byte { r := v.(DeadLettersResponse); return AppendDeadLettersResponse(nil, &r) },
			func(b []byte) (any, error) { return DecodeDeadLettersResponse(b) }},
	}
}

func allCodecs() []bodyCodec { return append(metaCodecs(), adminCodecs()...) }

// A broker stats response without the out-rate trailer (an older broker's)
// decodes with out-rates 0.
func TestBrokerStatsResponse_WithoutOutRates(t *testing.T) {
	checked := 0
	for _, c := range allCodecs() {
		tail := optionalTails[c.name]
		if tail == 0 {
			continue
		}
		b := c.encode(c.sample)
		got, err := c.decode(b[:len(b)-tail])
		if err != nil {
			t.Fatalf("%s without its trailer: %v", c.name, err)
		}
		want := c.sample.(BrokerStatsResponse)
		want.Subjects = append([]SubjectStats(nil), want.Subjects...)
		for i := range want.Subjects {
			gs := append([]GroupStats(nil), want.Subjects[i].Groups...)
			for j := range gs {
				gs[j].OutPerSec = 0
			}
			want.Subjects[i].Groups = gs
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s without its trailer:\n got %#v\nwant %#v", c.name, got, want)
		}
		checked++
	}
	if checked != len(optionalTails) {
		t.Fatalf("checked %d codecs with an optional trailer, want %d", checked, len(optionalTails))
	}
}

func TestMetaAdminBodies_RoundTrip(t *testing.T) {
	for _, c := range allCodecs() {
		t.Run(c.name, func(t *testing.T) {
			b := c.encode(c.sample)
			got, err := c.decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, c.sample) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, c.sample)
			}
		})
	}
}

func TestMetaAdminBodies_RejectTruncatedAndTrailing(t *testing.T) {
	for _, c := range allCodecs() {
		t.Run(c.name, func(t *testing.T) {
			b := c.encode(c.sample)
			for n := 0; n < len(b); n++ {
				if tail := optionalTails[c.name]; tail > 0 && n == len(b)-tail {
					continue // an older sender's body: checked below
				}
				if _, err := c.decode(b[:n]); !errors.Is(err, ErrTruncated) {
					t.Fatalf("decode of %d/%d bytes: err %v, want ErrTruncated", n, len(b), err)
				}
			}
			if _, err := c.decode(append(b, 0)); !errors.Is(err, ErrTrailingBytes) {
				t.Fatalf("decode with a trailing byte: err %v, want ErrTrailingBytes", err)
			}
		})
	}
}

func TestAdminBodies_RejectUnknownActions(t *testing.T) {
	m := AppendConsumerManageRequest(nil, &ConsumerManageRequest{Action: 99, Subject: "s", Group: "g"})
	if _, err := DecodeConsumerManageRequest(m); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("manage action 99: err %v, want ErrBadRequest", err)
	}
	d := AppendDeadLettersRequest(nil, &DeadLettersRequest{Action: 0, Subject: "s", Group: "g"})
	if _, err := DecodeDeadLettersRequest(d); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("dead letters action 0: err %v, want ErrBadRequest", err)
	}
}

func TestLookupResponse_RejectsImpossibleCount(t *testing.T) {
	b := AppendLookupResponse(nil, &LookupResponse{Version: 1})
	b[len(b)-2], b[len(b)-1] = 0xff, 0xff // 65535 groups in 0 bytes
	if _, err := DecodeLookupResponse(b); !errors.Is(err, ErrTruncated) {
		t.Fatalf("err %v, want ErrTruncated", err)
	}
}

func TestGroupState_Access(t *testing.T) {
	cases := []struct {
		state              GroupState
		writable, readable bool
	}{
		{GroupReadWrite, true, true},
		{GroupReadonly, false, true},
		{GroupUnavailable, false, false},
		{0, false, false},
	}
	for _, c := range cases {
		if c.state.Writable() != c.writable || c.state.Readable() != c.readable {
			t.Errorf("%v: writable %v readable %v", c.state, c.state.Writable(), c.state.Readable())
		}
	}
}

// FuzzMetaAdminBodies feeds arbitrary bytes to every meta and admin body
// decoder: none may panic, and whatever decodes must encode back to bytes
// that decode to the same value.
func FuzzMetaAdminBodies(f *testing.F) {
	codecs := allCodecs()
	for i, c := range codecs {
		f.Add(uint8(i), c.encode(c.sample))
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		c := codecs[int(which)%len(codecs)]
		v, err := c.decode(b)
		if err != nil {
			return
		}
		again, err := c.decode(c.encode(v))
		if err != nil {
			t.Fatalf("%s: re-decode: %v", c.name, err)
		}
		if !reflect.DeepEqual(again, v) {
			t.Fatalf("%s: re-decode differs:\n got %#v\nwant %#v", c.name, again, v)
		}
	})
}
