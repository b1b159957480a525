// Command naradcheck drives the original Narad Go client (narad-go),
// unchanged and only through its public API, against one of our broker
// nodes, and checks every answer.
//
//	NARAD_ADDR=127.0.0.1:17950 go run .
//
// Against a node that has users, give an admin's credentials in
// NARAD_USER and NARAD_PASSWORD: every check then runs through
// narad.WithAuth. Give also a user whose only grant is produce, in
// NARAD_PRODUCER_USER and NARAD_PRODUCER_PASSWORD, its grant on the topics
// NARAD_PRODUCER_TOPICS names ("naradcheck.auth.*"), and the auth checks
// run too: no credentials is ErrUnauthenticated (401), a wrong password
// ErrUnauthenticated (or ErrThrottled), and that user's consume, create
// and delete, and its produce outside its grant, ErrForbidden (403).
//
// Every check prints PASS or FAIL. A failure also prints the last HTTP
// exchanges the client made (recorded by a wrapping transport), so a
// mismatch can be traced to the exact request and reply. It exits 1 when
// any check failed. run.sh in this directory starts a node and runs it.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	narad "github.com/debanganthakuria/narad-go"
)

// exchange is one HTTP request and its reply, as the client saw them.
type exchange struct {
	method, url, reqBody string
	status               int
	respBody             string
	challenge            string // WWW-Authenticate, when the reply has one
	err                  error
}

func (e exchange) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "    > %s %s", e.method, e.url)
	if e.reqBody != "" {
		fmt.Fprintf(&b, "\n    > body: %s", e.reqBody)
	}
	if e.err != nil {
		fmt.Fprintf(&b, "\n    < transport error: %v", e.err)
	} else {
		fmt.Fprintf(&b, "\n    < %d %s", e.status, e.respBody)
		if e.challenge != "" {
			fmt.Fprintf(&b, "\n    < WWW-Authenticate: %s", e.challenge)
		}
	}
	return b.String()
}

// recorder is an http.RoundTripper that keeps the last few exchanges.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	log  []exchange
}

const keep = 4

func clip(b []byte) string {
	const max = 600
	s := string(b)
	if len(s) > max {
		s = s[:max] + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return s
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchange{method: req.Method, url: req.URL.String()}
	if req.Body != nil && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			raw, _ := io.ReadAll(body)
			ex.reqBody = clip(raw)
		}
	}
	res, err := r.next.RoundTrip(req)
	if err != nil {
		ex.err = err
	} else {
		raw, readErr := io.ReadAll(res.Body)
		res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(raw))
		ex.status = res.StatusCode
		ex.respBody = clip(raw)
		ex.challenge = res.Header.Get("WWW-Authenticate")
		if readErr != nil {
			ex.err = readErr
		}
	}
	r.mu.Lock()
	r.log = append(r.log, ex)
	if len(r.log) > keep {
		r.log = r.log[len(r.log)-keep:]
	}
	r.mu.Unlock()
	return res, err
}

func (r *recorder) last() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.log...)
}

type checker struct {
	rec    *recorder
	passed int
	failed []string
}

func (c *checker) pass(name string) {
	c.passed++
	fmt.Printf("PASS %s\n", name)
}

func (c *checker) fail(name string, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.failed = append(c.failed, name)
	fmt.Printf("FAIL %s: %s\n", name, msg)
	for _, ex := range c.rec.last() {
		fmt.Println(ex)
	}
}

// check records one outcome: ok, or a failure described by format.
func (c *checker) check(name string, ok bool, format string, args ...any) bool {
	if ok {
		c.pass(name)
	} else {
		c.fail(name, format, args...)
	}
	return ok
}

// noErr passes when err is nil.
func (c *checker) noErr(name string, err error) bool {
	if err != nil {
		c.fail(name, "client error: %v", err)
		return false
	}
	c.pass(name)
	return true
}

type order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// readAtWait reads an offset, polling while the broker answers 204: a
// produce is acknowledged once it is durable in the ingress log, a moment
// before the partition log makes it readable.
func readAtWait(client *narad.Client, topic string, partition int, offset int64) (*narad.Message, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := ctxFor(10 * time.Second)
		msg, err := client.ReadAt(ctx, topic, partition, offset)
		cancel()
		if err != nil || msg != nil || time.Now().After(deadline) {
			return msg, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func main() {
	addr := os.Getenv("NARAD_ADDR")
	if addr == "" {
		fmt.Fprintln(os.Stderr, "naradcheck: set NARAD_ADDR, e.g. 127.0.0.1:17950")
		os.Exit(2)
	}
	rec := &recorder{next: http.DefaultTransport}
	user, password := os.Getenv("NARAD_USER"), os.Getenv("NARAD_PASSWORD")
	client, err := newClient(addr, rec, user, password)
	if err != nil {
		fmt.Fprintf(os.Stderr, "naradcheck: narad.New: %v\n", err)
		os.Exit(2)
	}
	defer client.Close()
	c := &checker{rec: rec}

	if user != "" {
		fmt.Printf("(as %s, through narad.WithAuth)\n", user)
		authChecks(c, client, rec, addr, user, password)
	}
	run(c, client, addr)

	fmt.Printf("\n%d passed, %d failed\n", c.passed, len(c.failed))
	if len(c.failed) > 0 {
		fmt.Printf("failed: %s\n", strings.Join(c.failed, "; "))
		os.Exit(1)
	}
}

// newClient makes a client that records its exchanges in rec, and sends
// the credentials when a user is given.
func newClient(addr string, rec *recorder, user, password string, extra ...narad.Option) (*narad.Client, error) {
	opts := []narad.Option{
		narad.WithHTTPClient(&http.Client{Transport: rec}),
		narad.WithTimeout(15 * time.Second),
		narad.WithRetries(2),
	}
	if user != "" {
		opts = append(opts, narad.WithAuth(user, password))
	}
	return narad.New(addr, append(opts, extra...)...)
}

// apiStatus is the HTTP status of the client's *narad.Error in err, 0 when
// there is none.
func apiStatus(err error) int {
	var apiErr *narad.Error
	if errors.As(err, &apiErr) {
		return apiErr.Status
	}
	return 0
}

// authChecks checks, against a node that has users, what the client
// reports for missing and wrong credentials and for a user whose grants do
// not cover the request. admin holds an admin's credentials.
func authChecks(c *checker, admin *narad.Client, rec *recorder, addr, user, password string) {
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())

	// --- no credentials: 401, whatever the route
	anon, err := newClient(addr, rec, "", "")
	if err != nil {
		c.fail("narad.New without credentials", "%v", err)
		return
	}
	defer anon.Close()
	_, err = anon.Topics(ctx)
	c.check("Topics without credentials is ErrUnauthenticated (401)",
		errors.Is(err, narad.ErrUnauthenticated) && apiStatus(err) == http.StatusUnauthorized,
		"err = %v (status %d)", err, apiStatus(err))
	_, err = anon.CreateTopic(ctx, "naradcheck-anon-"+suffix)
	c.check("CreateTopic without credentials is ErrUnauthenticated (401)",
		errors.Is(err, narad.ErrUnauthenticated) && apiStatus(err) == http.StatusUnauthorized,
		"err = %v (status %d)", err, apiStatus(err))
	err = anon.Produce(ctx, "naradcheck-anon-"+suffix, order{ID: "anon"})
	c.check("Produce without credentials is ErrUnauthenticated (401)",
		errors.Is(err, narad.ErrUnauthenticated) && apiStatus(err) == http.StatusUnauthorized,
		"err = %v (status %d)", err, apiStatus(err))
	c.noErr("Ping /readyz without credentials (the probe needs none)", anon.Ping(ctx, addr))

	// --- a wrong password: 401 (429 once the login throttle applies)
	wrong, err := newClient(addr, rec, user, password+"-wrong", narad.WithRetries(1))
	if err != nil {
		c.fail("narad.New with a wrong password", "%v", err)
		return
	}
	defer wrong.Close()
	_, err = wrong.Topics(ctx)
	c.check("Topics with a wrong password is ErrUnauthenticated (401)",
		(errors.Is(err, narad.ErrUnauthenticated) && apiStatus(err) == http.StatusUnauthorized) ||
			errors.Is(err, narad.ErrThrottled),
		"err = %v (status %d)", err, apiStatus(err))

	// --- the admin's credentials work
	_, err = admin.Topics(ctx)
	c.noErr("Topics as the admin", err)

	// --- a user whose only grant is produce
	pUser, pPassword := os.Getenv("NARAD_PRODUCER_USER"), os.Getenv("NARAD_PRODUCER_PASSWORD")
	if pUser == "" {
		fmt.Println("(no NARAD_PRODUCER_USER: the grant checks are skipped)")
		return
	}
	granted := strings.TrimSuffix(os.Getenv("NARAD_PRODUCER_TOPICS"), "*")
	if granted == "" || granted == os.Getenv("NARAD_PRODUCER_TOPICS") {
		c.fail("NARAD_PRODUCER_TOPICS", "want a prefix grant such as naradcheck.auth.*, got %q",
			os.Getenv("NARAD_PRODUCER_TOPICS"))
		return
	}
	producer, err := newClient(addr, rec, pUser, pPassword)
	if err != nil {
		c.fail("narad.New as the producer", "%v", err)
		return
	}
	defer producer.Close()
	inside := granted + suffix                // covered by the produce grant
	outside := "naradcheck-outside-" + suffix // not covered by it
	for _, name := range []string{inside, outside} {
		_, err := admin.CreateTopic(ctx, name, narad.WithPartitionCount(3), narad.WithVisibilityTimeout(5*time.Second))
		if !c.noErr("CreateTopic "+name+" as the admin", err) {
			return
		}
	}
	defer func() {
		for _, name := range []string{inside, outside} {
			c.noErr("DeleteTopic "+name+" as the admin", admin.DeleteTopic(ctx, name))
		}
	}()

	c.noErr("Produce as the producer, inside its grant", producer.Produce(ctx, inside, order{ID: "granted", Total: 1}))
	var b narad.Batch
	_ = b.Add(order{ID: "granted-batch", Total: 2})
	c.noErr("ProduceBatch as the producer, inside its grant", producer.ProduceBatch(ctx, inside, &b))
	forbidden := func(name string, err error) {
		c.check(name+" is ErrForbidden (403)",
			errors.Is(err, narad.ErrForbidden) && apiStatus(err) == http.StatusForbidden,
			"err = %v (status %d)", err, apiStatus(err))
	}
	forbidden("Produce as the producer, outside its grant",
		producer.Produce(ctx, outside, order{ID: "not granted"}))
	rctx, rcancel := ctxFor(15 * time.Second)
	_, err = producer.Receive(rctx, inside, narad.WithWait(time.Second))
	rcancel()
	forbidden("Receive (consume) as the producer", err)
	_, err = producer.ReadAt(ctx, inside, 0, 0)
	forbidden("ReadAt (consume) as the producer", err)
	_, err = producer.CreateTopic(ctx, granted+"new-"+suffix)
	forbidden("CreateTopic as the producer, inside its produce grant", err)
	forbidden("DeleteTopic as the producer", producer.DeleteTopic(ctx, inside))

	// What the producer wrote is there for the admin to read.
	actx, acancel := ctxFor(20 * time.Second)
	defer acancel()
	msg, err := admin.Receive(actx, inside, narad.WithWait(5*time.Second))
	if c.noErr("Receive as the admin what the producer wrote", err) {
		c.noErr("Ack as the admin", msg.Ack(ctx))
	}
}

func run(c *checker, client *narad.Client, addr string) {
	ctx, cancel := ctxFor(2 * time.Minute)
	defer cancel()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	log := "naradcheck-log-" + suffix
	queue := "naradcheck-queue-" + suffix

	// --- health
	c.noErr("Ping /readyz", client.Ping(ctx, addr))

	// --- topics
	created, err := client.CreateTopic(ctx, log,
		narad.WithPartitionCount(3),
		narad.WithVisibilityTimeout(1500*time.Millisecond),
		narad.WithRetention(2*time.Hour))
	if !c.noErr("CreateTopic with visibility_timeout_ms", err) {
		return // nothing below can work without the topic
	}
	c.check("CreateTopic reply: name", created.Name == log, "name = %q, want %q", created.Name, log)
	c.check("CreateTopic reply: partitions", created.Partitions == 3, "partitions = %d, want 3", created.Partitions)
	c.check("CreateTopic reply: visibility timeout", created.VisibilityTimeout == 1500*time.Millisecond,
		"visibility = %s, want 1.5s", created.VisibilityTimeout)
	c.check("CreateTopic reply: retention", created.Retention == 2*time.Hour,
		"retention = %s, want 2h", created.Retention)

	_, err = client.CreateTopic(ctx, log)
	c.check("CreateTopic on an existing topic is ErrExists", errors.Is(err, narad.ErrExists),
		"err = %v, want ErrExists", err)

	ensured, err := client.EnsureTopic(ctx, log, narad.WithPartitionCount(7))
	if c.noErr("EnsureTopic on an existing topic", err) {
		c.check("EnsureTopic returns what is there", ensured.Partitions == 3 &&
			ensured.VisibilityTimeout == 1500*time.Millisecond,
			"partitions = %d, visibility = %s; want 3 and 1.5s", ensured.Partitions, ensured.VisibilityTimeout)
	}

	described, err := client.Topic(ctx, log)
	if c.noErr("Topic", err) {
		c.check("Topic: visibility timeout", described.VisibilityTimeout == 1500*time.Millisecond,
			"visibility = %s, want 1.5s", described.VisibilityTimeout)
		c.check("Topic: three partition stats", len(described.PartitionStats) == 3,
			"partition stats = %d, want 3", len(described.PartitionStats))
		ok := !described.Partial
		for _, s := range described.PartitionStats {
			ok = ok && s.Available() && s.Owner != ""
		}
		c.check("Topic: every partition available with an owner", ok, "partial = %v, stats = %+v",
			described.Partial, described.PartitionStats)
	}

	topics, err := client.Topics(ctx)
	if c.noErr("Topics", err) {
		found := false
		for _, t := range topics {
			found = found || t.Name == log
		}
		c.check("Topics lists the new topic", found, "%s not among %d topics", log, len(topics))
	}

	// --- produce one, read it back by offset
	err = client.Produce(ctx, log, order{ID: "single", Total: 1}, narad.WithPartition(0), narad.WithKey("k-single"))
	if c.noErr("Produce one message (partition 0, key)", err) {
		msg, err := readAtWait(client, log, 0, 0)
		if c.noErr("ReadAt partition 0 offset 0", err) && c.check("ReadAt found the record", msg != nil, "ReadAt returned nothing (204) for 10s") {
			var got order
			err := msg.Into(&got)
			c.check("ReadAt payload round-trips", err == nil && got == order{ID: "single", Total: 1},
				"payload = %s (%+v), err %v", msg.Payload, got, err)
			c.check("ReadAt key round-trips", msg.Key == "k-single", "key = %q, want k-single", msg.Key)
			c.check("ReadAt holds no lease", !msg.Leased(), "receipt = %q", msg.Receipt)
			c.check("ReadAt topic/partition/offset", msg.Topic == log && msg.Partition == 0 && msg.Offset == 0,
				"got %s/%d@%d", msg.Topic, msg.Partition, msg.Offset)
		}
	}

	// --- batch produce, read back by offset, in order
	var batch narad.Batch
	for i := range 5 {
		if err := batch.Add(order{ID: fmt.Sprintf("batch-%d", i), Total: 10 + i}, narad.WithPartition(1)); err != nil {
			c.fail("Batch.Add", "%v", err)
		}
	}
	binaryKey := string([]byte{0x00, 0xff, 0x83})
	if err := batch.Add([]byte{0xde, 0xad, 0xbe, 0xef}, narad.WithPartition(1), narad.WithKey(binaryKey)); err != nil {
		c.fail("Batch.Add binary", "%v", err)
	}
	err = client.ProduceBatch(ctx, log, &batch)
	if c.noErr("ProduceBatch (6 messages, partition 1)", err) {
		if _, err := readAtWait(client, log, 1, 5); err == nil {
			for i := range 5 {
				msg, err := client.ReadAt(ctx, log, 1, int64(i))
				name := fmt.Sprintf("ReadAt batch offset %d", i)
				if err != nil || msg == nil {
					c.fail(name, "msg = %v, err = %v", msg, err)
					continue
				}
				var got order
				err = msg.Into(&got)
				c.check(name, err == nil && got.ID == fmt.Sprintf("batch-%d", i) && got.Total == 10+i,
					"payload = %s, err %v", msg.Payload, err)
			}
			msg, err := client.ReadAt(ctx, log, 1, 5)
			if err == nil && msg != nil {
				raw, berr := msg.Bytes()
				c.check("ReadAt batch binary payload round-trips", berr == nil && bytes.Equal(raw, []byte{0xde, 0xad, 0xbe, 0xef}),
					"payload = %s encoding %q, bytes %x, err %v", msg.Payload, msg.Encoding, raw, berr)
				c.check("ReadAt batch binary key round-trips", msg.Key == binaryKey, "key = %x, want %x", msg.Key, binaryKey)
			} else {
				c.fail("ReadAt batch offset 5", "msg = %v, err = %v", msg, err)
			}
		} else {
			c.fail("ReadAt batch offset 5", "err = %v", err)
		}
		end, err := client.ReadAt(ctx, log, 1, 6)
		c.check("ReadAt past the end is nil", err == nil && end == nil, "msg = %v, err = %v", end, err)
	}

	// --- replay
	var fromTwo []int64
	err = client.ReadFrom(ctx, log, 1, 2, narad.HandlerFunc(func(_ context.Context, m *narad.Message) error {
		fromTwo = append(fromTwo, m.Offset)
		return nil
	}))
	if c.noErr("ReadFrom partition 1 offset 2", err) {
		c.check("ReadFrom reads offsets 2..5", fmt.Sprint(fromTwo) == "[2 3 4 5]", "offsets = %v", fromTwo)
	}
	replayed := map[int]int{}
	leased := 0
	err = client.Replay(ctx, log, narad.HandlerFunc(func(_ context.Context, m *narad.Message) error {
		replayed[m.Partition]++
		if m.Leased() {
			leased++
		}
		return nil
	}))
	if c.noErr("Replay", err) {
		c.check("Replay reads every record", replayed[0] == 1 && replayed[1] == 6 && replayed[2] == 0,
			"per partition = %v, want map[0:1 1:6]", replayed)
		c.check("Replay messages hold no lease", leased == 0, "%d leased", leased)
	}
	if _, err := client.ReadAt(ctx, log+"-missing", 0, 0); !errors.Is(err, narad.ErrNotFound) {
		c.fail("ReadAt on a missing topic is ErrNotFound", "err = %v", err)
	} else {
		c.pass("ReadAt on a missing topic is ErrNotFound")
	}

	queueChecks(c, client, queue)

	// --- delete
	for _, name := range []string{log, queue} {
		c.noErr("DeleteTopic "+name, client.DeleteTopic(ctx, name))
	}
	_, err = client.Topic(ctx, log)
	c.check("Topic after delete is ErrNotFound", errors.Is(err, narad.ErrNotFound), "err = %v", err)
}

// queueChecks exercises the queue surface: Receive, Ack, Extend, Nack and
// a lease that lapses, on a topic whose visibility timeout is short.
func queueChecks(c *checker, client *narad.Client, queue string) {
	ctx, cancel := ctxFor(90 * time.Second)
	defer cancel()
	const visibility = 3 * time.Second

	_, err := client.EnsureTopic(ctx, queue, narad.WithPartitionCount(3), narad.WithVisibilityTimeout(visibility))
	if !c.noErr("EnsureTopic (new queue topic)", err) {
		return
	}
	receive := func(wait time.Duration) (*narad.Message, error) {
		rctx, rcancel := ctxFor(wait + 10*time.Second)
		defer rcancel()
		return client.Receive(rctx, queue, narad.WithWait(wait))
	}
	// nothing waits the whole time for a message that should not come
	receiveNone := func(name string, within time.Duration) {
		rctx, rcancel := ctxFor(within)
		defer rcancel()
		msg, err := client.Receive(rctx, queue, narad.WithWait(within/2))
		c.check(name, msg == nil && errors.Is(err, context.DeadlineExceeded),
			"got %v, err %v; want nothing before the deadline", msg, err)
	}

	// An idle long poll gives nothing back, then a produce wakes it.
	start := time.Now()
	got := make(chan *narad.Message, 1)
	go func() {
		msg, _ := receive(8 * time.Second)
		got <- msg
	}()
	time.Sleep(300 * time.Millisecond)
	if err := client.Produce(ctx, queue, order{ID: "q-1", Total: 1}); !c.noErr("Produce to the queue topic", err) {
		return
	}
	m1 := <-got
	if !c.check("Receive (long poll) gets the message", m1 != nil, "nothing received in %s", time.Since(start)) {
		return
	}
	var o order
	err = m1.Into(&o)
	c.check("Receive payload", err == nil && o.ID == "q-1", "payload = %s, err %v", m1.Payload, err)
	c.check("Receive holds a lease", m1.Leased(), "no receipt_handle")
	c.check("Receive woke on the produce, not at the end of the wait", time.Since(start) < 5*time.Second,
		"took %s", time.Since(start))

	// Extend: each renewal restarts the window from now, so the message
	// outlives its first visibility timeout and then the first renewal.
	// t is seconds since the receive: renew at 2 and 4, look at 6 to 6.6,
	// past the first two expiries (3 and 5) and before the third (7).
	time.Sleep(visibility * 2 / 3)
	c.noErr("Extend", m1.Extend(ctx))
	time.Sleep(visibility * 2 / 3)
	c.noErr("Extend again", m1.Extend(ctx))
	time.Sleep(visibility * 2 / 3)
	receiveNone("extended message is not redelivered", 600*time.Millisecond)
	c.noErr("Ack after extends", m1.Ack(ctx))
	err = m1.Ack(ctx)
	c.check("second Ack of a settled receipt is ErrLeaseLost (410)", errors.Is(err, narad.ErrLeaseLost),
		"err = %v", err)
	receiveNone("acked message is gone", 2500*time.Millisecond)

	// Nack: hand back at once, redelivered with a new receipt.
	if err := client.Produce(ctx, queue, order{ID: "q-2", Total: 2}); !c.noErr("Produce q-2", err) {
		return
	}
	m2, err := receive(5 * time.Second)
	if !c.noErr("Receive q-2", err) {
		return
	}
	nackedAt := time.Now()
	c.noErr("Nack", m2.Nack(ctx))
	m3, err := receive(5 * time.Second)
	if c.noErr("Receive after Nack", err) {
		c.check("Nack redelivers the same record at once",
			m3.Partition == m2.Partition && m3.Offset == m2.Offset && time.Since(nackedAt) < visibility,
			"got %d@%d after %s, want %d@%d within %s", m3.Partition, m3.Offset, time.Since(nackedAt),
			m2.Partition, m2.Offset, visibility)
		c.check("redelivery has a new receipt", m3.Receipt != m2.Receipt, "same receipt %q", m3.Receipt)
		err = m2.Ack(ctx)
		c.check("Ack with the nacked receipt is ErrLeaseLost", errors.Is(err, narad.ErrLeaseLost), "err = %v", err)

		// Lapse: do nothing, and the lease runs out.
		lapsedAt := time.Now()
		m4, err := receive(2 * visibility)
		if c.noErr("Receive after the visibility timeout", err) {
			c.check("unacked message comes back after the visibility timeout",
				m4.Partition == m3.Partition && m4.Offset == m3.Offset && time.Since(lapsedAt) >= visibility/2,
				"got %d@%d after %s", m4.Partition, m4.Offset, time.Since(lapsedAt))
			err = m3.Ack(ctx)
			c.check("Ack with a lapsed receipt is ErrLeaseLost", errors.Is(err, narad.ErrLeaseLost), "err = %v", err)
			c.noErr("Ack the redelivery", m4.Ack(ctx))
		}
	}

	// Consume, the call most programs use: batch poll and batch ack.
	var b narad.Batch
	for i := range 12 {
		_ = b.Add(order{ID: fmt.Sprintf("c-%d", i), Total: i})
	}
	if !c.noErr("ProduceBatch 12 to the queue topic", client.ProduceBatch(ctx, queue, &b)) {
		return
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	var consumeErrs []error
	cctx, stop := context.WithTimeout(ctx, 20*time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Consume(cctx, queue, narad.HandlerFunc(func(_ context.Context, m *narad.Message) error {
			var o order
			if err := m.Into(&o); err != nil {
				return err
			}
			mu.Lock()
			if strings.HasPrefix(o.ID, "c-") {
				seen[o.ID] = true
			} else {
				consumeErrs = append(consumeErrs, fmt.Errorf("unexpected message %s: %s", m, m.Payload))
			}
			if len(seen) == 12 {
				stop()
			}
			mu.Unlock()
			return nil
		}), narad.WithBatch(5), narad.WithWait(2*time.Second),
			narad.WithErrorHandler(func(_ *narad.Message, err error) {
				mu.Lock()
				consumeErrs = append(consumeErrs, err)
				mu.Unlock()
			}))
	}()
	<-done
	stop()
	mu.Lock()
	c.check("Consume WithBatch(5) handles all 12", len(seen) == 12, "handled %d of 12", len(seen))
	c.check("Consume reported no errors", len(consumeErrs) == 0, "errors: %v", consumeErrs)
	mu.Unlock()
	receiveNone("Consume acked everything", 2500*time.Millisecond)
}
