package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/pkg/clock"
)

// copyStore does what a slave's sync does over the wire: it asks m for the
// hours changed since (run, since), copies the missing bytes of each file
// into r in small reads, commits, and returns the new (run, version).
func copyStore(t *testing.T, m *Store, r *Replica, run, since uint64) (uint64, uint64) {
	t.Helper()
	man := m.Manifest(run, since)
	if !man.CaughtUp {
		t.Fatal("master has not caught up with its log")
	}
	listed := map[int64]bool{}
	for _, hf := range man.Hours {
		listed[hf.Hour] = true
		if hf.Removed {
			if err := r.RemoveHour(hf.Hour); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for {
			have := r.Hour(hf.Hour)
			if have.ScheduleSize >= hf.ScheduleSize {
				break
			}
			b, err := m.ReadSchedule(hf.Hour, have.ScheduleSize, hf.ScheduleSize, 300) // a few records a read
			if err != nil || len(b) == 0 {
				t.Fatalf("read schedule %d@%d: %d bytes, %v", hf.Hour, have.ScheduleSize, len(b), err)
			}
			if err := r.WriteSchedule(hf.Hour, have.ScheduleSize, b); err != nil {
				t.Fatal(err)
			}
		}
		for {
			have := r.Hour(hf.Hour)
			if have.DispatchSize >= hf.DispatchSize {
				break
			}
			b, err := m.ReadDispatch(hf.Hour, have.DispatchSize, hf.DispatchSize, 40)
			if err != nil || len(b) == 0 {
				t.Fatalf("read dispatch %d@%d: %d bytes, %v", hf.Hour, have.DispatchSize, len(b), err)
			}
			if err := r.WriteDispatch(hf.Hour, have.DispatchSize, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if man.Full {
		for _, hf := range r.HourFiles() {
			if !listed[hf.Hour] {
				if err := r.RemoveHour(hf.Hour); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := r.Commit(man.Replayed); err != nil {
		t.Fatal(err)
	}
	return man.Run, man.Version
}

// A slave's copy, made from empty and then incrementally while the master
// takes and dispatches messages, opens as a master's store that fires every
// message the master had not dispatched, at its due time, and none that it
// had.
func TestReplica_CopyThenPromoteFiresWhatIsPending(t *testing.T) {
	clk := clock.NewFake(epoch)
	m := newHarness(t, t.TempDir(), Options{}, clk)
	var pending []string
	add := func(id string, due time.Time) {
		m.append(encode(t, id, due))
		pending = append(pending, id)
	}
	m.append(encode(t, "now", time.Time{}))
	for i, d := range []time.Duration{time.Second, 10 * time.Minute, 2 * time.Hour, 26 * time.Hour} {
		add(ids("early", 4)[i], epoch.Add(d))
	}
	m.waitCount(1) // "now" is forwarded and marked
	if err := m.store.Sync(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	r, err := OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Follow(m.store.ID()); err != nil {
		t.Fatal(err)
	}
	run, ver := copyStore(t, m.store, r, 0, 0)
	if r.Pending() != 4 {
		t.Fatalf("copy holds %d pending, want 4: %+v", r.Pending(), r.HourFiles())
	}

	// More arrives; "early-0" falls due and is dispatched on the master.
	clk.Advance(time.Second)
	m.waitCount(2)
	pending = pending[1:]
	add("late-a", epoch.Add(5*time.Minute))
	add("late-b", epoch.Add(3*time.Hour))
	m.waitFor("dispatch marks", func() bool { return m.store.Stats().Dispatched == 2 })
	if err := m.store.Sync(); err != nil {
		t.Fatal(err)
	}
	run2, ver2 := copyStore(t, m.store, r, run, ver)
	if run2 != run || ver2 <= ver {
		t.Fatalf("run %x→%x version %d→%d", run, run2, ver, ver2)
	}
	if inc := m.store.Manifest(run, ver2); inc.Full || len(inc.Hours) != 0 {
		t.Fatalf("nothing changed, yet the manifest lists %+v", inc)
	}
	want := m.store.Manifest(0, 0).Hours
	got := r.HourFiles()
	if len(got) != len(want) {
		t.Fatalf("copy has hours %+v, master %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("hour %d: copy %+v, master %+v", i, got[i], want[i])
		}
	}
	masterID := m.store.ID()
	m.close()

	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, replicaFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("replica marker left after promotion: %v", err)
	}
	p := newHarness(t, dir, Options{}, clk)
	if p.store.ID() == masterID {
		t.Fatal("the promoted store kept the master's store ID")
	}
	p.settle()
	if p.count() != 0 {
		t.Fatalf("promoted store fired %v before their time", p.order)
	}
	clk.Advance(27 * time.Hour)
	p.waitCount(len(pending))
	p.settle()
	for _, id := range pending {
		if p.times(id) != 1 {
			t.Fatalf("%s delivered %d times by the promoted store: %v", id, p.times(id), p.order)
		}
	}
	if p.count() != len(pending) {
		t.Fatalf("promoted store delivered %v, want %v", p.order, pending)
	}
	// New messages continue in the promoted store's own message log.
	p.append(encode(t, "after", clk.Now().Add(time.Second)))
	clk.Advance(time.Second)
	p.waitCount(len(pending) + 1)
}

// A copy that follows another epoch's master, or a master's own directory
// (a deposed master rejoining as a slave), is dropped; the same epoch keeps
// it.
func TestReplica_FollowDropsForeignCopies(t *testing.T) {
	clk := clock.NewFake(epoch)
	m := newHarness(t, t.TempDir(), Options{}, clk)
	m.append(encode(t, "x", epoch.Add(time.Hour)))
	dir := t.TempDir()
	r, err := OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if dropped, err := r.Follow(m.store.ID()); err != nil || dropped {
		t.Fatalf("empty copy: dropped %v, %v", dropped, err)
	}
	m.waitFor("replay", func() bool { return m.store.Manifest(0, 0).Replayed > 0 })
	copyStore(t, m.store, r, 0, 0)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err = OpenReplica(dir, zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
	if id, ok := r.Following(); !ok || id != m.store.ID() || r.Pending() != 1 {
		t.Fatalf("reopened: following %x %v, pending %d", id, ok, r.Pending())
	}
	if dropped, err := r.Follow(m.store.ID()); err != nil || dropped {
		t.Fatalf("same store: dropped %v, %v", dropped, err)
	}
	if dropped, err := r.Follow(m.store.ID() + 2); err != nil || !dropped || r.Pending() != 0 || len(r.HourFiles()) != 0 {
		t.Fatalf("another store: dropped %v, %v, %d hours left", dropped, err, len(r.HourFiles()))
	}
	r.Close()

	mdir := m.dir
	m.close()
	r, err = OpenReplica(mdir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, marked := r.Following(); marked {
		t.Fatal("a master's directory opened as a marked replica")
	}
	if dropped, err := r.Follow(1); err != nil || !dropped {
		t.Fatalf("master's directory: dropped %v, %v", dropped, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(mdir, logDir)); len(ents) != 0 {
		t.Fatalf("message log left: %v", ents)
	}
}

// Copied bytes must continue the copy and be whole valid records; a torn
// tail left by a slave that died mid-write is cut on open.
func TestReplica_RejectsMisfitsAndCutsTornTails(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteSchedule(1, 0, nil); !errors.Is(err, ErrNotFollowing) {
		t.Fatalf("write before Follow: %v", err)
	}
	r.Follow(1)
	h := hourOf(epoch.UnixMilli())
	rec := appendScheduleRecord(nil, 0, encode(t, "a", epoch))
	if err := r.WriteSchedule(h, 16, rec); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("write at the wrong offset: %v", err)
	}
	bad := append([]byte(nil), rec...)
	bad[len(bad)-1] ^= 1
	if err := r.WriteSchedule(h, 0, bad); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("corrupt record: %v", err)
	}
	if err := r.WriteSchedule(h, 0, rec[:len(rec)-1]); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("cut record: %v", err)
	}
	if err := r.WriteDispatch(h, 0, appendDispatchEntry(nil, 0)[:11]); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("cut dispatch entry: %v", err)
	}
	if err := r.WriteSchedule(h, 0, rec); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteDispatch(h, 0, appendDispatchEntry(nil, 0)); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(100); err != nil {
		t.Fatal(err)
	}
	r.Close()
	// A torn tail in each file.
	for _, sub := range []string{scheduleDir, dispatchDir} {
		f, err := os.OpenFile(filepath.Join(dir, sub, hourName(h)), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(rec[:20])
		f.Close()
	}
	r, err = OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Hour(h); got.ScheduleSize != int64(len(rec)) || got.Records != 1 || got.DispatchSize != dispatchEntrySize {
		t.Fatalf("after the torn tails: %+v", got)
	}
	// Drop: a copy that no longer lines up is removed, marker and all.
	if err := r.Drop(); err != nil {
		t.Fatal(err)
	}
	if _, marked := r.Following(); marked || len(r.HourFiles()) != 0 {
		t.Fatalf("after Drop: marked %v, hours %+v", marked, r.HourFiles())
	}
	for _, p := range []string{replicaFile, filepath.Join(scheduleDir, hourName(h)), filepath.Join(dispatchDir, hourName(h))} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after Drop: %v", p, err)
		}
	}
}

// A deposed master rejoining as its successor's slave keeps what the two
// stores share (the successor's origin: its copy's sizes when promoted)
// and drops the rest: messages and dispatch entries the successor never
// had, and hours it never knew. Then it copies the successor's newer bytes
// and ends with the same hours.
func TestReplica_RejoinKeepsWhatTheStoresShare(t *testing.T) {
	clk := clock.NewFake(epoch)
	aDir := t.TempDir()
	a := newHarness(t, aDir, Options{}, clk)
	a.append(encode(t, "now", time.Time{}), encode(t, "h1-a", epoch.Add(2*time.Hour)), encode(t, "h2-a", epoch.Add(5*time.Hour)))
	a.waitCount(1)
	if err := a.store.Sync(); err != nil {
		t.Fatal(err)
	}
	bDir := t.TempDir()
	r, err := OpenReplica(bDir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	aID := a.store.ID()
	r.Follow(aID)
	copyStore(t, a.store, r, 0, 0)
	// A takes more that its slave never copies: a message in a copied hour
	// and one in a new hour.
	a.append(encode(t, "h1-lost", epoch.Add(2*time.Hour+time.Minute)), encode(t, "h9-lost", epoch.Add(9*time.Hour)))
	if err := a.store.Sync(); err != nil {
		t.Fatal(err)
	}
	a.close()

	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	b := newHarness(t, bDir, Options{}, clk)
	if o := b.store.Origin(); o.Parent != aID || len(o.Hours) != 3 {
		t.Fatalf("promoted store's origin %+v, want parent %x and 3 hours", o, aID)
	}
	b.append(encode(t, "h1-b", epoch.Add(2*time.Hour+2*time.Minute)))
	if err := b.store.Sync(); err != nil {
		t.Fatal(err)
	}

	ra, err := OpenReplica(aDir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := ra.Rejoin(b.store.ID()+2, Origin{Parent: 12345}); err != nil || kept {
		t.Fatalf("rejoin under a store that is no child of A's: kept %v, %v", kept, err)
	}
	kept, err := ra.Rejoin(b.store.ID(), b.store.Origin())
	if err != nil || !kept {
		t.Fatalf("rejoin: kept %v, %v", kept, err)
	}
	if ra.Pending() != 2 || len(ra.HourFiles()) != 3 {
		t.Fatalf("after the rejoin A's copy holds %d pending in hours %+v; want h1-a, h2-a in A's 3 shared hours", ra.Pending(), ra.HourFiles())
	}
	copyStore(t, b.store, ra, 0, 0)
	want, got := b.store.Manifest(0, 0).Hours, ra.HourFiles()
	if len(got) != len(want) {
		t.Fatalf("A's copy %+v, B %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("hour %d: A's copy %+v, B %+v", i, got[i], want[i])
		}
	}
	if err := ra.Promote(); err != nil {
		t.Fatal(err)
	}
	b.close()
	a2 := newHarness(t, aDir, Options{}, clk)
	clk.Advance(10 * time.Hour)
	a2.waitCount(3)
	a2.settle()
	for _, id := range []string{"h1-a", "h2-a", "h1-b"} {
		if a2.times(id) != 1 {
			t.Fatalf("%s delivered %d times: %v", id, a2.times(id), a2.order)
		}
	}
	if a2.count() != 3 {
		t.Fatalf("delivered %v: the messages B never had came back", a2.order)
	}
}

// A copy that died without closing reopens from its last checkpoint (only
// the bytes after it are scanned) with every committed record counted.
func TestReplica_ReopensFromItsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Follow(7)
	h := hourOf(epoch.UnixMilli())
	off := int64(0)
	write := func(id string) {
		rec := appendScheduleRecord(nil, off, encode(t, id, epoch))
		if err := r.WriteSchedule(h, off, rec); err != nil {
			t.Fatal(err)
		}
		off += int64(len(rec))
	}
	write("a")
	write("b")
	if err := r.Commit(10); err != nil { // the first Commit checkpoints
		t.Fatal(err)
	}
	write("c")
	if err := r.Commit(20); err != nil { // within replicaCheckpointEvery: no checkpoint
		t.Fatal(err)
	}
	ckpt, found, err := readCheckpoint(filepath.Join(dir, checkpointFile))
	if err != nil || !found || len(ckpt.hours) != 1 || ckpt.hours[0].records != 2 {
		t.Fatalf("checkpoint %+v %v %v, want the first two records", ckpt, found, err)
	}
	r.closeFiles() // dies: no Close, no new checkpoint
	r, err = OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Hour(h); got.Records != 3 || got.ScheduleSize != off {
		t.Fatalf("reopened: %+v, want 3 records in %d bytes", got, off)
	}
	if r.Replayed() < 10 {
		t.Fatalf("reopened copy replayed %d, below its checkpoint's", r.Replayed())
	}
}

// A master may list dispatch entries for records a copy has not copied yet
// (forwarded between the two sizes of a manifest): the copy takes them
// only once it holds the records, so they never mark its own undispatched
// records, nor a record a promoted copy appends at that offset later.
func TestReplica_DispatchEntriesPastTheCopyDoNotHideRecords(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenReplica(dir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Follow(3)
	h := hourOf(epoch.Add(time.Minute).UnixMilli())
	rec := appendScheduleRecord(nil, 0, encode(t, "pending", epoch.Add(time.Minute)))
	if err := r.WriteSchedule(h, 0, rec); err != nil {
		t.Fatal(err)
	}
	// An entry for a record past the copy's end waits for the record.
	if err := r.WriteDispatch(h, 0, appendDispatchEntry(nil, int64(len(rec)))); err != nil {
		t.Fatal(err)
	}
	if got := r.Hour(h); got.DispatchSize != 0 {
		t.Fatalf("the copy took a dispatch entry for a record it lacks: %+v", got)
	}
	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	p := newHarness(t, dir, Options{}, clk)
	clk.Advance(time.Minute)
	p.waitCount(1)
	if p.times("pending") != 1 {
		t.Fatalf("delivered %v", p.order)
	}
}
