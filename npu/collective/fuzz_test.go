package collective

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzServerHandshake feeds arbitrary bytes to the listener's side of the
// handshake. Without the secret nothing may get in: every input must be
// refused as a stray (never accepted, never failing Init, never panicking).
func FuzzServerHandshake(f *testing.F) {
	cfg := Config{Rank: 0, Size: 2, Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Secret: testSecret()}
	hs := newHandshaker(&cfg)
	var hello [helloLen]byte
	copy(hello[:], handshakeMagic)
	binary.LittleEndian.PutUint16(hello[6:], protocolVersion)
	hello[8] = byte(connData)
	binary.LittleEndian.PutUint32(hello[12:], 2)
	binary.LittleEndian.PutUint32(hello[16:], 1)
	copy(hello[24:32], hs.topo[:])
	f.Add(hello[:])
	f.Add(append(hello[:], make([]byte, proofLen)...))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		server, client := net.Pipe()
		server.SetDeadline(time.Now().Add(2 * time.Second))
		go io.Copy(io.Discard, client)
		go func() {
			client.Write(data)
			client.Close()
		}()
		rank, _, rej, err := hs.server(server)
		server.Close()
		if err != nil || rej == nil || rank != -1 {
			t.Fatalf("input %q: rank %d, rejection %v, error %v; want a rejection", data, rank, rej, err)
		}
	})
}

// FuzzControlFrame decodes arbitrary control frames: headers round-trip
// exactly, abort notices either fail with ErrProtocol or round-trip.
func FuzzControlFrame(f *testing.F) {
	good := abortNotice{culprit: 2, code: abortTimeout, timeout: int64(time.Second), text: "x"}.encode()
	var h [headerLen]byte
	(&header{kind: kindAbort, nbytes: uint32(len(good))}).put(h[:])
	f.Add(append(h[:], good...))
	f.Add(make([]byte, headerLen+abortFixed))
	f.Add(bytes.Repeat([]byte{0xff}, headerLen+abortFixed+maxAbortText+1))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < headerLen {
			return
		}
		var back [headerLen]byte
		hdr := parseHeader(data)
		hdr.put(back[:])
		if !bytes.Equal(back[:], data[:headerLen]) {
			t.Fatalf("header %x re-encodes as %x", data[:headerLen], back)
		}
		a, err := decodeAbort(data[headerLen:], 4)
		if err != nil {
			return
		}
		b, err := decodeAbort(a.encode(), 4)
		if err != nil || b != a {
			t.Fatalf("notice %+v round-trips to %+v, %v", a, b, err)
		}
	})
}
