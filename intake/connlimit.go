package main

import (
	"net"
	"sync"
	"sync/atomic"
)

// Connection bounds of intake's listener; PARITYSYNC_MAX_CONNS and
// PARITYSYNC_MAX_CONNS_PER_IP override them.
const (
	DefaultMaxConns      = 4096
	DefaultMaxConnsPerIP = 128
)

// connLimiter is a listener that holds at most max connections, at most perIP of
// them from one client address: a connection over either bound is closed as soon
// as it is accepted, before a byte of it is read, so one client (or a crowd) of
// slow requests cannot take every connection the server has. Behind a proxy every
// client shares the proxy's address: raise perIP there.
type connLimiter struct {
	net.Listener
	max, perIP int
	// refused counts the connections closed at once, for the log and the tests.
	refused atomic.Int64

	mu    sync.Mutex
	total int
	byIP  map[string]int
}

func newConnLimiter(ln net.Listener, max, perIP int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perIP: perIP, byIP: map[string]int{}}
}

// Accept returns the next connection within the bounds.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(ip); err == nil {
			ip = host
		}
		l.mu.Lock()
		ok := l.total < l.max && l.byIP[ip] < l.perIP
		if ok {
			l.total++
			l.byIP[ip]++
		}
		l.mu.Unlock()
		if !ok {
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

func (l *connLimiter) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// limitedConn gives its place back once, on the first Close.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
