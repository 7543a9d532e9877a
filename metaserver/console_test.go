package metaserver

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// chromium drives a headless Chromium over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4), so
// the test needs no websocket client and no extra module.
type chromium struct {
	t        *testing.T
	cmd      *exec.Cmd
	toChrome *os.File
	session  string

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpReply
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type cdpMessage struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Result    json.RawMessage `json:"result"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func chromiumPath() string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func startChromium(t *testing.T) *chromium {
	t.Helper()
	bin := chromiumPath()
	if bin == "" {
		t.Skip("chromium is absent (apt-get install chromium)")
	}
	toChromeR, toChromeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChromeR, fromChromeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// Chromium's helper processes outlive its main one for a moment and
	// keep writing to the profile: its own process group is killed whole,
	// and the profile (not t.TempDir, whose removal fails on a file created
	// meanwhile) is removed once they are gone.
	profile, err := os.MkdirTemp("", "qmq-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
		"--user-data-dir="+profile, "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toChromeR, fromChromeW} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toChromeR.Close()
	fromChromeW.Close()
	c := &chromium{t: t, cmd: cmd, toChrome: toChromeW, pending: map[int]chan cdpReply{}}
	t.Cleanup(func() {
		toChromeW.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the whole group: this test started it
		_ = cmd.Wait()
		deadline := time.Now().Add(10 * time.Second)
		for err := os.RemoveAll(profile); err != nil; err = os.RemoveAll(profile) {
			if time.Now().After(deadline) {
				t.Logf("chromium profile %s left behind: %v", profile, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	go c.readLoop(bufio.NewReader(fromChromeR))
	var target struct{ TargetID string }
	c.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct{ SessionID string }
	c.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	c.session = att.SessionID
	c.call(c.session, "Page.enable", nil, nil)
	c.call(c.session, "Runtime.enable", nil, nil)
	return c
}

func (c *chromium) readLoop(r *bufio.Reader) {
	for {
		b, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if json.Unmarshal(b[:len(b)-1], &m) != nil {
			continue
		}
		if m.Method == "Page.javascriptDialogOpening" { // confirm(): accept
			go c.send(m.SessionID, "Page.handleJavaScriptDialog", map[string]any{"accept": true})
			continue
		}
		if m.ID == 0 {
			continue
		}
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- cdpReply{Result: m.Result, Error: m.Error}
		}
	}
}

func (c *chromium) send(session, method string, params any) chan cdpReply {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	ch := make(chan cdpReply, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	b, _ := json.Marshal(msg)
	_, _ = c.toChrome.Write(append(b, 0))
	return ch
}

func (c *chromium) call(session, method string, params, out any) {
	c.t.Helper()
	select {
	case r := <-c.send(session, method, params):
		if r.Error != nil {
			c.t.Fatalf("%s: %s", method, r.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(r.Result, out); err != nil {
				c.t.Fatalf("%s: %v", method, err)
			}
		}
	case <-time.After(30 * time.Second):
		c.t.Fatalf("%s: no answer from chromium in 30s", method)
	}
}

// eval evaluates a JavaScript expression in the page and returns its value
// as a string (promises are awaited).
func (c *chromium) eval(expr string) string {
	c.t.Helper()
	var out struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails any `json:"exceptionDetails"`
	}
	c.call(c.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &out)
	if out.ExceptionDetails != nil {
		c.t.Fatalf("evaluate %s: %v", expr, out.ExceptionDetails)
	}
	return fmt.Sprint(out.Result.Value)
}

func (c *chromium) navigate(url string) {
	c.t.Helper()
	c.call(c.session, "Page.navigate", map[string]any{"url": url}, nil)
}

// waitText waits until the page has rendered page name and its main text
// holds every want.
func (c *chromium) waitText(name string, want ...string) string {
	c.t.Helper()
	var text string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if c.eval("document.body && document.body.dataset.loaded || ''") == name {
			text = c.eval("document.getElementById('page').innerText")
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(text, w)
			}
			if ok {
				return text
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("page %s never showed %q; it shows:\n%s\nbody (loaded %q, hash %q):\n%s", name, want, text,
		c.eval("document.body.dataset.loaded||''"), c.eval("location.hash"), c.eval("document.body.innerText"))
	return ""
}

// screenshot saves a PNG of the page under $QMQ_CONSOLE_SCREENSHOTS, when
// set, for people to look at.
func (c *chromium) screenshot(name string) {
	dir := os.Getenv("QMQ_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	var out struct{ Data string }
	c.call(c.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &out)
	b, err := base64.StdEncoding.DecodeString(out.Data)
	if err == nil {
		_ = os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644)
	}
}

// TestConsole_InHeadlessChromium loads every console page against a
// running meta server with two (fake) brokers, checks what each renders,
// and performs admin actions through the page: refused without a
// credential, done with the admin token; then manages identities through
// the Identities page and logs in as a read-only admin, whose change
// buttons are disabled and whose changes the server refuses anyway.
func TestConsole_InHeadlessChromium(t *testing.T) {
	t.Parallel()
	if chromiumPath() == "" {
		t.Skip("chromium is absent (apt-get install chromium)")
	}
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = time.Minute }) // nothing heartbeats here
	c := newClient(t)
	b1, b2 := ordersOnTwoGroups(t, s, c)
	if _, err := c.heartbeat(s, protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*fakeBroker{b1, b2} {
		b.stats = protocol.BrokerStatsResponse{Subjects: []protocol.SubjectStats{{Subject: "orders", Messages: 50, Groups: []protocol.GroupStats{{Group: "billing", Cursor: 45, Backlog: 5, OutPerSec: 12,
			Consumers: []protocol.ConsumerStats{{Consumer: "c1", Unacked: 2, LastSeen: time.Now()}}}}}}}
		b.addDeadLetter(t, 1, "orders", "dl-"+b.group, "payload of "+b.group)
	}
	eventually(t, 5*time.Second, "consumer registered", func() bool {
		s.view.mu.RLock()
		defer s.view.mu.RUnlock()
		return len(s.view.consumers) == 1
	})

	ch := startChromium(t)
	base := "http://" + s.HTTPAddr().String() + "/"
	ch.navigate(base + "#overview")
	ch.waitText("overview", "meta servers", "brokers", "subjects", s.Addr().String())
	if n := ch.eval("document.getElementById('n-groups').textContent"); n != "2" {
		t.Fatalf("overview shows %s groups", n)
	}
	ch.screenshot("overview")
	ch.navigate(base + "#groups")
	ch.waitText("groups", "g1", "g2", "rw", b1.addr())
	ch.screenshot("groups")
	ch.navigate(base + "#subjects")
	ch.waitText("subjects", "orders", "realtime", "g1", "g2")
	ch.navigate(base + "#consumers")
	ch.waitText("consumers", "billing", "c1", "online", "g1: 5")
	if got := ch.eval("document.querySelector('tr[data-group=billing] .backlog').textContent"); got != "10" {
		t.Fatalf("consumers page shows backlog %s, want 10", got)
	}
	ch.screenshot("consumers")
	ch.eval("document.querySelector('tr[data-group=billing] a[href=\"#subject/orders\"]').click()")
	ch.waitText("subject", "Subject orders", "billing", "c1", "online", "g1: 5 of 50")
	for sel, want := range map[string]string{"#subject-messages": "100", "tr[data-consumer=c1] .unacked": "4", "tr[data-group=billing] .backlog": "10", "tr[data-group=billing] .out-rate": "24"} {
		if got := ch.eval("document.querySelector('" + sel + "').textContent"); got != want {
			t.Fatalf("subject page: %s shows %q, want %q", sel, got, want)
		}
	}
	if got := ch.eval("document.querySelector('tr[data-consumer=c1] .last-pull').textContent"); got == "-" || got == "" {
		t.Fatalf("subject page: c1's last pull shows %q", got)
	}
	ch.screenshot("subject")
	ch.navigate(base + "#dead/orders/billing")
	if text := ch.waitText("dead", "dl-g1", "dl-g2", "hidden (needs read bodies)", "2 dead letters"); strings.Contains(text, "payload of") {
		t.Fatalf("the dead-letter page shows bodies without a credential:\n%s", text)
	}

	// Mark g1 readonly through the page: first without a token (refused,
	// nothing changes), then with it.
	ch.navigate(base + "#groups")
	ch.waitText("groups", "g1")
	ch.eval("localStorage.removeItem('qmq.token')")
	ch.eval("document.querySelector('button[data-action=mark-readonly][data-group=g1]').click()")
	eventually(t, 10*time.Second, "the page to report the refusal", func() bool {
		return strings.Contains(ch.eval("(document.getElementById('flash-err')||{}).textContent||''"), "unauthorized")
	})
	if g := s.group("g1"); g.State != "rw" {
		t.Fatalf("g1 is %s after a refused action", g.State)
	}
	ch.eval("document.getElementById('token').value = '" + testToken + "'")
	ch.eval("document.querySelector('#token-form button').click()")
	ch.eval("document.querySelector('button[data-action=mark-readonly][data-group=g1]').click()")
	eventually(t, 10*time.Second, "g1 readonly in the meta server", func() bool { return s.group("g1").State == "readonly" })
	ch.waitText("groups", "readonly", "Unmark readonly")
	ch.screenshot("groups-readonly")

	// Re-drive a dead letter through the page.
	ch.navigate(base + "#dead/orders/billing")
	ch.waitText("dead", "dl-g1", "payload of g1")
	ch.screenshot("dead")
	ch.eval("document.querySelector('tr[data-id=dl-g1] button[data-action=redrive]').click()")
	eventually(t, 10*time.Second, "the dead letter re-driven on g1", func() bool {
		b1.mu.Lock()
		defer b1.mu.Unlock()
		return len(b1.redriven) == 1
	})
	ch.waitText("dead", "1 dead letters")

	// Reset an offset through the page: a group no broker has is refused
	// (a typo), and made when "create" is ticked.
	manageCount := func() int { return len(b1.manageRequests()) + len(b2.manageRequests()) }
	manageBefore := manageCount()
	ch.navigate(base + "#consumers")
	ch.waitText("consumers", "Reset a group's offset", "create the group if it is new")
	resetForm := func(group string, create bool) {
		ch.eval("document.getElementById('flash').replaceChildren()")
		ch.eval("document.getElementById('reset-subject').value = 'orders'")
		ch.eval("document.getElementById('reset-group').value = '" + group + "'")
		ch.eval("document.getElementById('reset-to').value = 'latest'")
		ch.eval(fmt.Sprintf("document.getElementById('reset-create').checked = %v", create))
		ch.eval("document.querySelector('#reset-form button[type=submit]').click()")
	}
	resetForm("newgroup", false)
	eventually(t, 10*time.Second, "the page to report the unknown group", func() bool {
		return strings.Contains(ch.eval("(document.getElementById('flash-err')||{}).textContent||''"), "create")
	})
	if n := manageCount(); n != manageBefore {
		t.Fatalf("a refused reset reached the brokers (%d manage requests, %d before)", n, manageBefore)
	}
	ch.navigate(base + "#consumers")
	ch.waitText("consumers", "Reset a group's offset")
	resetForm("newgroup", true)
	eventually(t, 10*time.Second, "the reset with create relayed to both brokers", func() bool { return manageCount() == manageBefore+2 })
	// The page reports it and draws itself again: wait for both, so that
	// no drawing is left to replace the next page's form.
	eventually(t, 10*time.Second, "the page to report the reset", func() bool {
		return strings.Contains(ch.eval("(document.getElementById('flash-ok')||{}).textContent||''"), "create orders/newgroup")
	})
	eventually(t, 10*time.Second, "the page drawn", func() bool { return ch.eval("String(!rendering && !renderAgain)") == "true" })

	// Identities, as the admin: add a read-only admin and an application,
	// grant, rotate, disable.
	ch.navigate(base + "#identities")
	ch.waitText("identities", "admin", "Add an identity")
	newCreds := func(what string) string {
		t.Helper()
		var creds string
		eventually(t, 10*time.Second, what, func() bool {
			creds = ch.eval("(document.getElementById('new-credentials')||{}).textContent||''")
			return creds != ""
		})
		ch.eval("document.getElementById('flash').replaceChildren()")
		return creds
	}
	ch.eval("document.getElementById('id-name').value = 'viewer'; document.getElementById('id-kind').value = 'admin'; document.getElementById('id-admin').value = 'read'")
	ch.eval("document.querySelector('#identity-form button[type=submit]').click()")
	viewer := newCreds("the viewer's credentials")
	if !strings.HasPrefix(viewer, "viewer:") {
		t.Fatalf("credentials shown: %q", viewer)
	}
	ch.waitText("identities", "viewer") // the page drawn again after the change: its form is fresh
	ch.eval("document.getElementById('id-name').value = 'billing'; document.getElementById('id-kind').value = 'app'; document.getElementById('id-admin').value = 'none'")
	ch.eval("document.querySelector('#identity-form button[type=submit]').click()")
	billing := newCreds("billing's credentials")
	ch.waitText("identities", "viewer", "billing", "read")
	ch.eval("document.getElementById('grant-identity').value = 'billing'; document.getElementById('grant-publish').value = 'orders, invoice'")
	ch.eval("document.querySelector('#grant-form button[data-action=grant]').click()")
	ch.waitText("identities", "orders, invoice")
	if p, err := s.Authority().Authenticate("billing", strings.TrimPrefix(billing, "billing:")); err != nil || !p.CanPublish("invoice") {
		t.Fatalf("billing after the console's grant: %v", err)
	}
	ch.eval("document.querySelector('tr[data-identity=billing] button[data-action=rotate]').click()")
	rotated := newCreds("billing's new credentials")
	if rotated == billing {
		t.Fatal("rotation showed the old secret")
	}
	ch.eval("document.querySelector('tr[data-identity=billing] button[data-action=disable]').click()")
	eventually(t, 10*time.Second, "billing disabled", func() bool {
		e, _, _ := s.view.identity("billing")
		return e.Disabled
	})
	ch.screenshot("identities")

	// A read-only admin sees everything, with change buttons disabled; the
	// server refuses a change it sends anyway.
	ch.eval("document.getElementById('token').value = '" + viewer + "'")
	ch.eval("document.querySelector('#token-form button').click()")
	eventually(t, 10*time.Second, "logged in as viewer", func() bool {
		return strings.Contains(ch.eval("document.getElementById('token-state').textContent"), "admin:viewer (admin read)")
	})
	ch.waitText("identities", "billing", "disabled")
	eventually(t, 10*time.Second, "every button of the identities page disabled for a read-only admin", func() bool {
		return ch.eval("String(document.querySelectorAll('#page button').length)") != "0" &&
			ch.eval("String(document.querySelectorAll('#page button:not([disabled])').length)") == "0"
	})
	ch.navigate(base + "#groups")
	ch.waitText("groups", "g1", "g2")
	eventually(t, 10*time.Second, "the unmark button disabled for a read-only admin", func() bool {
		return ch.eval("String((document.querySelector('button[data-action=unmark-readonly][data-group=g1]')||{}).disabled)") == "true"
	})
	before := snapshot(t, s)
	got := ch.eval("fetch('/api/v1/groups/g1/readonly', {method: 'DELETE', headers: {Authorization: 'Bearer " + viewer + "'}}).then(r => String(r.status))")
	if got != "403" {
		t.Fatalf("a read-only admin's change: HTTP %s, want 403", got)
	}
	if after := snapshot(t, s); after != before || s.group("g1").State != "readonly" {
		t.Fatal("a refused change changed something")
	}
	ch.screenshot("groups-read-only")
	ch.eval("document.getElementById('token').value = 'viewer:wrong-secret-000000'")
	ch.eval("document.querySelector('#token-form button').click()")
	eventually(t, 10*time.Second, "a refused login reported", func() bool {
		return strings.Contains(ch.eval("document.getElementById('token-state').textContent"), "refused")
	})
}
