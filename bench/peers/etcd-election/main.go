// The reference election beside distlock's in bench/etcd.cpp: etcd's Go client
// (clientv3/concurrency.Election, Debian's packaged sources, built offline by
// ./dev bench with GO111MODULE=off). The same two roles as the benchmark's own
// workers (bench/failover.hpp), printing the same lines:
//
//	etcd-election ENDPOINT NAME leader|candidate TTL_SECONDS
//
// leader: campaigns, prints "leading REVISION" and keeps the term until killed.
// candidate: prints "campaigning", campaigns, prints "leading REVISION" once
// elected, then resigns.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: etcd-election ENDPOINT NAME leader|candidate TTL_SECONDS")
		os.Exit(2)
	}
	endpoint, name, role := os.Args[1], os.Args[2], os.Args[3]
	ttl, err := strconv.Atoi(os.Args[4])
	if err != nil || ttl < 1 {
		fmt.Fprintln(os.Stderr, "bad TTL")
		os.Exit(2)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer client.Close()
	session, err := concurrency.NewSession(client, concurrency.WithTTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	election := concurrency.NewElection(session, "/bench/elections/"+name)
	if role == "candidate" {
		fmt.Println("campaigning")
	}
	if err := election.Campaign(context.Background(), role); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("leading %d\n", election.Rev())
	if role == "leader" {
		<-session.Done()
		os.Exit(1)
	}
	_ = election.Resign(context.Background())
	_ = session.Close()
}
