package auth

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

func TestAllows(t *testing.T) {
	t.Parallel()
	p := &Principal{Name: "ci", Grants: []Grant{
		{Role: RoleProducer, Namespace: "shop", Queue: "emails"},
		{Role: RoleReader, Namespace: AllNamespaces},
		{Role: RoleAdmin, Namespace: "ops"},
	}}
	for _, c := range []struct {
		role      Role
		ns, queue string
		want      bool
	}{
		{RoleProducer, "shop", "emails", true},
		{RoleProducer, "shop", "payments", false},
		{RoleProducer, "shop", "", false},
		{RoleReader, "anything", "", true},
		{RoleReader, SystemNamespace, "", false},
		{RoleApprover, "ops", "", true},
		{RoleWorker, "ops", "q", true},
		{RoleWorker, "shop", "emails", false},
	} {
		if got := p.Allows(c.role, c.ns, c.queue); got != c.want {
			t.Errorf("Allows(%s, %s, %q) = %v, want %v", c.role, c.ns, c.queue, got, c.want)
		}
	}
	var none *Principal
	if none.Allows(RoleReader, "shop", "") {
		t.Error("a nil principal allowed something")
	}
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	secret, hash, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if !LooksLikeToken(secret) {
		t.Errorf("LooksLikeToken(%q) = false", secret)
	}
	if !bytes.Equal(hash, HashToken(secret)) || len(hash) != sha256.Size {
		t.Errorf("hash = %x, want HashToken(secret), %d bytes", hash, sha256.Size)
	}
	other, _, err := NewToken()
	if err != nil || other == secret {
		t.Errorf("a second NewToken = %q, %v; want another secret", other, err)
	}
	for _, s := range []string{"", "trl_", "abc", secret[:len(secret)-1], "xyz_" + secret[4:], secret[:10] + "!" + secret[11:]} {
		if LooksLikeToken(s) {
			t.Errorf("LooksLikeToken(%q) = true", s)
		}
	}
}
