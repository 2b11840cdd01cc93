package testport

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestFreeIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	lo := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		p := Free(t)
		if lo-span >= 1024 && (p < lo-span || p >= lo) {
			t.Fatalf("port %d outside [%d, %d)", p, lo-span, lo)
		}
		if seen[p] {
			t.Fatalf("port %d given twice while reserved", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d given as free: %v", p, err)
		}
		l.Close()
	}
}

// A reservation is another process's until that process is gone; the test's
// end removes its own.
func TestReservations(t *testing.T) {
	dir := t.TempDir()
	release, ok := reserve(dir, 20001)
	if !ok {
		t.Fatal("reserving a free port failed")
	}
	if _, ok := reserve(dir, 20001); ok {
		t.Fatal("a port this process reserved was reserved again")
	}
	release()
	if _, err := os.Stat(filepath.Join(dir, "20001")); !os.IsNotExist(err) {
		t.Fatalf("the released reservation is still there: %v", err)
	}

	// A reservation of a process that ended is taken over.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "20002"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := reserve(dir, 20002); !ok {
		t.Fatal("the reservation of an ended process was not taken over")
	}
	// One of a live process (the parent of this one) is not.
	if err := os.WriteFile(filepath.Join(dir, "20003"), []byte(strconv.Itoa(os.Getppid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := reserve(dir, 20003); ok {
		t.Fatal("a live process's reservation was taken over")
	}
}
