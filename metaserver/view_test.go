package metaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

func jsonKV(t testing.TB, key string, v any, rev int64) kv {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return kv{key: key, value: b, modRev: rev}
}

func brokerKV(t testing.TB, k keys, group string, role protocol.BrokerRole, state protocol.GroupState, in uint32, rev int64) kv {
	return jsonKV(t, k.broker(group, role), brokerRecord{Group: group, Role: role, Kind: protocol.KindRealtime, State: state,
		BrokerID: group + role.String(), Address: "h:" + group, Load: protocol.BrokerLoad{InPerSec: in}}, rev)
}

func TestView_StatesAndCandidates(t *testing.T) {
	k := keys{"/qmq/"}
	v := newView(k, zap.NewNop())
	v.reset([]kv{
		brokerKV(t, k, "a", protocol.RoleMaster, protocol.GroupReadWrite, 50, 1),
		brokerKV(t, k, "b", protocol.RoleMaster, protocol.GroupReadWrite, 10, 2),
		brokerKV(t, k, "c", protocol.RoleMaster, protocol.GroupReadonly, 0, 3), // self-reported readonly
		brokerKV(t, k, "d", protocol.RoleSlave, protocol.GroupReadWrite, 0, 4), // slave only: unavailable
		brokerKV(t, k, "e", protocol.RoleMaster, protocol.GroupReadWrite, 0, 5),
		jsonKV(t, k.readonly("e", "orders"), readonlyRecord{}, 6), // readonly for one subject
		jsonKV(t, k.route(protocol.KindRealtime, "x"), routeRecord{Groups: []string{"e"}}, 7),
		{key: "/qmq/unknown/thing", value: []byte("{}"), modRev: 8},
		{key: "/qmq/brokers/a/boss", value: []byte("{}"), modRev: 9},
		{key: "/qmq/brokers/z/master", value: []byte("not json"), modRev: 10},
	}, 10)
	v.mu.RLock()
	defer v.mu.RUnlock()
	cases := []struct {
		group, subject string
		want           protocol.GroupState
	}{
		{"a", "", protocol.GroupReadWrite},
		{"c", "", protocol.GroupReadonly},
		{"d", "", protocol.GroupUnavailable},
		{"e", "", protocol.GroupReadWrite},
		{"e", "orders", protocol.GroupReadonly},
		{"e", "other", protocol.GroupReadWrite},
		{"nosuch", "", protocol.GroupUnavailable},
	}
	for _, c := range cases {
		if got := v.stateLocked(v.groupLocked(c.group), c.subject); got != c.want {
			t.Errorf("state of %s for %q: %v, want %v", c.group, c.subject, got, c.want)
		}
	}
	// Candidates: writable masters, fewest routes first (e has one), then
	// least load (b 10 < a 50).
	if got := fmt.Sprint(v.writableGroupsLocked(protocol.KindRealtime)); got != "[b a e]" {
		t.Fatalf("candidates %s, want [b a e]", got)
	}
	if len(v.brokers) != 5 {
		t.Fatalf("%d brokers in the view; bad keys and values must be skipped", len(v.brokers))
	}
}

func TestView_ApplyAndWait(t *testing.T) {
	k := keys{"/qmq/"}
	v := newView(k, zap.NewNop())
	v.reset(nil, 5)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- v.waitRevision(ctx, 7)
	}()
	v.apply([]kv{brokerKV(t, k, "a", protocol.RoleMaster, protocol.GroupReadWrite, 0, 6)}, 6)
	v.apply([]kv{jsonKV(t, k.route(protocol.KindRealtime, "x"), routeRecord{Groups: []string{"a"}}, 7)}, 7)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A route this server wrote at revision 9 arrives before the watch.
	v.applyRoute(protocol.KindRealtime, "x", routeRecord{Groups: []string{"a", "b"}}, 9)
	// The watch then brings the older write (8): it must not win.
	v.apply([]kv{jsonKV(t, k.route(protocol.KindRealtime, "x"), routeRecord{Groups: []string{"a"}}, 8)}, 8)
	if got := len(v.routes[routeKey{protocol.KindRealtime, "x"}].rec.Groups); got != 2 {
		t.Fatalf("route has %d groups, want the newer 2", got)
	}
	// A delete the watch applied is not undone by an older direct write.
	v.apply([]kv{{key: k.route(protocol.KindRealtime, "y"), modRev: 12}}, 12)
	v.applyRoute(protocol.KindRealtime, "y", routeRecord{Groups: []string{"a"}}, 11)
	if _, ok := v.routes[routeKey{protocol.KindRealtime, "y"}]; ok {
		t.Fatal("an older write resurrected a deleted route")
	}
	v.apply([]kv{{key: k.broker("a", protocol.RoleMaster), modRev: 13}}, 13)
	if len(v.brokers) != 0 {
		t.Fatal("delete of a broker not applied")
	}
	if rev, loaded := v.revision(); rev != 13 || !loaded {
		t.Fatalf("revision %d loaded %v", rev, loaded)
	}
}

// BenchmarkServer_RouteResponse measures a lookup answered from the view,
// without the network: the part of a lookup the meta server itself does.
func BenchmarkServer_RouteResponse(b *testing.B) {
	k := keys{"/qmq/"}
	s := &Server{view: newView(k, zap.NewNop())}
	var kvs []kv
	for i := range 8 {
		kvs = append(kvs, brokerKV(b, k, fmt.Sprintf("g%d", i), protocol.RoleMaster, protocol.GroupReadWrite, 0, int64(i+1)))
	}
	for i := range 1000 {
		kvs = append(kvs, jsonKV(b, k.route(protocol.KindRealtime, fmt.Sprintf("s%d", i)), routeRecord{Groups: []string{"g1", "g2"}}, int64(100+i)))
	}
	s.view.reset(kvs, 2000)
	req := protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "s500"}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, ok := s.routeResponse(protocol.KindRealtime, "s500", req)
			if !ok {
				b.Fatal("no route")
			}
			_ = protocol.AppendLookupResponse(buf[:0], &resp)
		}
	})
}
