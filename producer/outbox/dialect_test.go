package outbox

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// doc.go shows the DDL that DDL returns, statement for statement.
func TestDocShowsDDL(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "//\t"); ok {
			doc.WriteString(rest + "\n")
		}
	}
	for _, d := range []Dialect{Postgres, MySQL, SQLite} {
		stmts, err := DDL(d, DefaultTable)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stmts {
			if !strings.Contains(doc.String(), s+";\n") {
				t.Errorf("doc.go does not show the %s statement:\n%s;", d, s)
			}
		}
	}
}

func TestDDL(t *testing.T) {
	if _, err := DDL("oracle", "t"); !errors.Is(err, ErrDialect) {
		t.Fatalf("unknown dialect: %v", err)
	}
	for _, bad := range []string{"", "1t", "t; DROP TABLE x", "a.b.c", "t-1", strings.Repeat("t", 64)} {
		if _, err := DDL(Postgres, bad); !errors.Is(err, ErrTableName) {
			t.Errorf("table %q: %v", bad, err)
		}
	}
	pg, err := DDL(Postgres, "app.events")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pg[1], "CREATE INDEX IF NOT EXISTS events_due ON app.events") {
		t.Fatalf("schema-qualified PostgreSQL index: %s", pg[1])
	}
	lite, err := DDL(SQLite, "aux.events")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lite[1], "CREATE INDEX IF NOT EXISTS aux.events_due ON events") {
		t.Fatalf("schema-qualified SQLite index: %s", lite[1])
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]Option{
		"table":    WithTable("x y"),
		"delay":    WithDelay(0),
		"interval": WithScanInterval(-time.Second),
		"batch":    WithBatch(0),
		"timeout":  WithSendTimeout(0),
		"backoff":  WithRetryBackoff(time.Second, time.Millisecond),
		"stats":    WithStatsInterval(0),
	} {
		c := defaultConfig()
		o(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: bad option accepted", name)
		}
	}
	c := defaultConfig()
	if err := c.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := New(nil, Postgres, nil); err == nil {
		t.Fatal("New without a database accepted")
	}
	if _, err := New(nil, "db2", nil); !errors.Is(err, ErrDialect) {
		t.Fatalf("New with an unknown dialect: %v", err)
	}
}

func TestStatementsPlaceholders(t *testing.T) {
	pg := newStatements(Postgres, "t")
	if want := "INSERT INTO t (id, subject, message, created_ms, due_ms) VALUES ($1,$2,$3,$4,$5)"; pg.insert != want {
		t.Fatalf("insert %q", pg.insert)
	}
	if got := pg.delete(3); got != "DELETE FROM t WHERE id IN ($1,$2,$3)" {
		t.Fatalf("delete %q", got)
	}
	my := newStatements(MySQL, "t")
	if got := my.exists(2); got != "SELECT id FROM t WHERE id IN (?,?)" {
		t.Fatalf("exists %q", got)
	}
	if !strings.Contains(my.claim, "FOR UPDATE SKIP LOCKED") || !strings.Contains(pg.claim, "FOR UPDATE SKIP LOCKED") {
		t.Fatal("claim does not skip locked rows")
	}
	lite := newStatements(SQLite, "t")
	if !strings.Contains(lite.claim, "RETURNING") || lite.deleteClaimed(2) != "DELETE FROM t WHERE id IN (?,?) AND claimed_by = ?" {
		t.Fatalf("sqlite claim %q / delete %q", lite.claim, lite.deleteClaimed(2))
	}
}

func TestBackoff(t *testing.T) {
	o := &Outbox{cfg: defaultConfig()}
	o.cfg.retryMin, o.cfg.retryMax = 100*time.Millisecond, time.Second
	for n, base := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond,
		5: time.Second, 50: time.Second} {
		for range 100 {
			d := o.backoff(n)
			if d < base/2 || d >= base*3/2 {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v)", n, d, base/2, base*3/2)
			}
		}
	}
}

func TestErrorText(t *testing.T) {
	long := strings.Repeat("é", 600) // 1,200 bytes
	got := errorText(errors.New(long))
	if len(got) > 1000 || !strings.HasPrefix(long, got) || len(got) < 998 {
		t.Fatalf("cut to %d bytes", len(got))
	}
	if errorText(errors.New("short")) != "short" {
		t.Fatal("short message changed")
	}
}

func TestInListPadsToPowersOfTwo(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 5: 8, 100: 128, 500: 512} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = string(rune('a' + i%26))
		}
		got := inList(ids)
		if len(got) != want {
			t.Fatalf("%d ids: %d arguments, want %d", n, len(got), want)
		}
		for i, a := range got {
			if i < n && a != ids[i] || i >= n && a != ids[n-1] {
				t.Fatalf("%d ids: argument %d is %v", n, i, a)
			}
		}
	}
}
