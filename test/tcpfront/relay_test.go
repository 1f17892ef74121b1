package tcpfront

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo serves one line back per line read, until the connection ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					if _, err := c.Write(append(s.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestRelayCutStallsAndHealResumes: a cut holds every byte on a
// connection that stays open, and a heal delivers what waited; a
// connection made during the cut waits too.
func TestRelayCutStallsAndHealResumes(t *testing.T) {
	r, err := StartRelay(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	roundTrip := func(c net.Conn, rd *bufio.Reader, msg string, within time.Duration) (string, error) {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		return rd.ReadString('\n')
	}
	if got, err := roundTrip(c, rd, "before", 2*time.Second); err != nil || got != "before\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	r.Cut()
	if got, err := roundTrip(c, rd, "during", 300*time.Millisecond); err == nil {
		t.Fatalf("during the cut an answer came through: %q", got)
	}
	c2, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	rd2 := bufio.NewReader(c2)
	if got, err := roundTrip(c2, rd2, "new", 300*time.Millisecond); err == nil {
		t.Fatalf("a connection made during the cut was answered: %q", got)
	}
	r.Heal()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := rd.ReadString('\n'); err != nil || got != "during\n" {
		t.Fatalf("after the heal, what waited: %q, %v", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := rd2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("after the heal, the new connection: %q, %v", got, err)
	}
	if got, err := roundTrip(c, rd, "after", 2*time.Second); err != nil || got != "after\n" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}
