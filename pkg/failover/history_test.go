package failover

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/qmq-go/qmq/pkg/protocol"
)

func TestHistory_FileRoundTripAndDamage(t *testing.T) {
	dir := t.TempDir()
	if h, err := LoadHistory(dir); err != nil || len(h) != 0 {
		t.Fatalf("no file: %v, %v", h, err)
	}
	h := WithEpoch(nil, 7, 100, 10)
	h = WithEpoch(h, 9, 250, 40)
	if again := WithEpoch(h, 9, 300, 50); !reflect.DeepEqual(again, h) {
		t.Fatalf("re-adding the last epoch changed the history: %+v", again)
	}
	if err := SaveHistory(dir, h); err != nil {
		t.Fatal(err)
	}
	got, err := LoadHistory(dir)
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("loaded %+v, %v; want %+v", got, err, h)
	}
	path := filepath.Join(dir, HistoryFile)
	b, _ := os.ReadFile(path)
	for _, i := range []int{0, 6, 20, len(b) - 1} {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x40
		os.WriteFile(path, bad, 0o644)
		if _, err := LoadHistory(dir); !errors.Is(err, ErrHistoryDamaged) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	os.WriteFile(path, b[:len(b)-3], 0o644)
	if _, err := LoadHistory(dir); !errors.Is(err, ErrHistoryDamaged) {
		t.Fatalf("cut file: %v", err)
	}
	if err := SaveHistory(dir, []protocol.EpochStart{{Epoch: 5}, {Epoch: 4}}); err == nil {
		t.Fatal("a decreasing history was saved")
	}
}

func TestHistory_Divergence(t *testing.T) {
	e := func(epoch uint64, m, a int64) protocol.EpochStart {
		return protocol.EpochStart{Epoch: epoch, MessageStart: m, ActionStart: a}
	}
	h := func(es ...protocol.EpochStart) []protocol.EpochStart { return es }
	cases := []struct {
		name          string
		master, slave []protocol.EpochStart
		wantM, wantA  int64
	}{
		{"same epoch: the master's ends", h(e(3, 0, 0)), h(e(3, 0, 0)), 1000, 100},
		{"old master rejoins the slave it lost to", h(e(3, 0, 0), e(8, 600, 60)), h(e(3, 0, 0)), 600, 60},
		{"fresh slave", h(e(3, 0, 0), e(8, 600, 60)), nil, 0, 0},
		{"data from before epochs", h(e(3, 500, 50)), nil, 500, 50},
		{"slave of a newer epoch the master never had", h(e(3, 0, 0), e(9, 700, 70)), h(e(3, 0, 0), e(8, 600, 60)), 600, 60},
		{"two epochs apart", h(e(3, 0, 0), e(8, 600, 60), e(12, 900, 90)), h(e(3, 0, 0), e(8, 600, 60)), 900, 90},
		{"master re-elected itself", h(e(3, 0, 0), e(5, 800, 80)), h(e(3, 0, 0), e(4, 650, 65)), 650, 65},
	}
	for _, c := range cases {
		m, a := Divergence(c.master, c.slave, 1000, 100)
		if m != c.wantM || a != c.wantA {
			t.Errorf("%s: (%d, %d), want (%d, %d)", c.name, m, a, c.wantM, c.wantA)
		}
	}
}
