package auth

import "testing"

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
