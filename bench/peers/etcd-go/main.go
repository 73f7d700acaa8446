// etcd's Go client (go.etcd.io/etcd/clientv3/concurrency, Debian's packaged sources,
// built offline by ./dev bench with GO111MODULE=off), the reference client beside
// distlock in bench/etcd.cpp. Each mode prints the lines of the benchmark's own
// workers, so that one harness measures both clients in the same run:
//
//	etcd-go elect ENDPOINT NAME leader|candidate TTL_SECONDS
//	    concurrency.Election (bench/failover.hpp). leader: campaigns, prints
//	    "leading REVISION" and keeps the term until killed. candidate: prints
//	    "campaigning", campaigns, prints "leading REVISION" once elected, then resigns.
//	etcd-go pair ENDPOINT COUNT
//	    concurrency.Mutex: Lock + Unlock, each pair on a fresh key, on one session,
//	    after 100 untimed pairs; at most COUNT timed pairs and 20 s. Prints one line,
//	    "us SECONDS US...": the timed pairs' seconds, then each pair's microseconds.
//	etcd-go contend ENDPOINT KEY ROUNDS START_NS
//	    concurrency.Mutex on KEY (bench/handoff.hpp): from START_NS on CLOCK_MONOTONIC
//	    on, ROUNDS critical sections of 1 ms, printed once all are done as
//	    "held ACQUIRED_NS RELEASED_NS UNLOCKED_NS" on CLOCK_MONOTONIC.
//
// The Mutex's session has distlock's default session TTL (10 s).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	"golang.org/x/sys/unix"
)

const usage = `usage: etcd-go elect ENDPOINT NAME leader|candidate TTL_SECONDS
       etcd-go pair ENDPOINT COUNT
       etcd-go contend ENDPOINT KEY ROUNDS START_NS`

// The machine's one monotonic clock, which the benchmark's workers print too (Go's own
// monotonic reading is not exposed as a number).
func monotonicNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		fail(err)
	}
	return ts.Nano()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "etcd-go:", err)
	os.Exit(1)
}

func number(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	return n
}

func connect(endpoint string, ttl int) (*clientv3.Client, *concurrency.Session) {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		fail(err)
	}
	session, err := concurrency.NewSession(client, concurrency.WithTTL(ttl))
	if err != nil {
		fail(err)
	}
	return client, session
}

func elect(endpoint, name, role string, ttl int) {
	client, session := connect(endpoint, ttl)
	defer client.Close()
	election := concurrency.NewElection(session, "/bench/elections/"+name)
	if role == "candidate" {
		fmt.Println("campaigning")
	}
	if err := election.Campaign(context.Background(), role); err != nil {
		fail(err)
	}
	fmt.Printf("leading %d\n", election.Rev())
	if role == "leader" {
		<-session.Done()
		os.Exit(1)
	}
	_ = election.Resign(context.Background())
	_ = session.Close()
}

func pair(endpoint string, count int64) {
	const warmup, limit = 100, 20 * time.Second
	client, session := connect(endpoint, 10)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The pid keeps a round's keys apart from an earlier round's.
	prefix := fmt.Sprintf("/bench/peer-pairs/%d/", os.Getpid())
	once := func(key string) {
		m := concurrency.NewMutex(session, prefix+key)
		if err := m.Lock(ctx); err != nil {
			fail(err)
		}
		if err := m.Unlock(ctx); err != nil {
			fail(err)
		}
	}
	for i := int64(0); i < warmup; i++ {
		once("warm-" + strconv.FormatInt(i, 10))
	}
	us := make([]string, 0, count)
	start := time.Now()
	for i := int64(0); i < count && time.Since(start) < limit; i++ {
		t0 := time.Now()
		once(strconv.FormatInt(i, 10))
		us = append(us, strconv.FormatFloat(float64(time.Since(t0).Nanoseconds())/1000, 'f', 1, 64))
	}
	fmt.Printf("us %f %s\n", time.Since(start).Seconds(), strings.Join(us, " "))
	_ = session.Close()
}

func contend(endpoint, key string, rounds, startNs int64) {
	client, session := connect(endpoint, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := concurrency.NewMutex(session, key)
	// Connected first: the processes contend from the same instant, whatever each
	// took to start.
	if wait := startNs - monotonicNs(); wait > 0 {
		time.Sleep(time.Duration(wait))
	}
	held := make([][3]int64, 0, rounds)
	status := 0
	for i := int64(0); i < rounds; i++ {
		if err := m.Lock(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "etcd-go:", err)
			status = 1
			break
		}
		acquired := monotonicNs()
		time.Sleep(time.Millisecond)
		released := monotonicNs()
		if err := m.Unlock(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "etcd-go:", err)
			status = 1
			break
		}
		held = append(held, [3]int64{acquired, released, monotonicNs()})
	}
	for _, h := range held {
		fmt.Printf("held %d %d %d\n", h[0], h[1], h[2])
	}
	_ = session.Close()
	_ = client.Close()
	os.Exit(status)
}

func main() {
	args := os.Args[1:]
	switch {
	case len(args) == 5 && args[0] == "elect" && (args[3] == "leader" || args[3] == "candidate"):
		ttl := number(args[4])
		if ttl < 1 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		elect(args[1], args[2], args[3], int(ttl))
	case len(args) == 3 && args[0] == "pair":
		pair(args[1], number(args[2]))
	case len(args) == 5 && args[0] == "contend":
		contend(args[1], args[2], number(args[3]), number(args[4]))
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
}
