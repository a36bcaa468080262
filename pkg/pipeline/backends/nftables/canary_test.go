package nftables

import (
	"context"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// A table deleted behind the Proxier's back is noticed by the canary, and
// the recovery sync the syncer answers with, though the State carries no
// change, recreates it exactly.
func TestCanaryRestoresDeletedTable(t *testing.T) {
	ctx := context.Background()
	for _, family := range proxy.Families {
		st := caseState(t, "cluster IP", family)
		fake := newStrictFake(specFor(family).family)
		p := NewWithInterface(family, fakeKernel(fake))
		if missing, err := p.CanaryMissing(ctx); err != nil || missing {
			t.Fatalf("%s: canary before any sync: missing=%v err=%v", family, missing, err)
		}
		mustSync(t, p, st)
		want := sortedDump(fake)
		if missing, err := p.CanaryMissing(ctx); err != nil || missing {
			t.Fatalf("%s: canary on an intact table: missing=%v err=%v", family, missing, err)
		}
		tx := fake.NewTransaction()
		tx.Delete(&knftables.Table{})
		if err := fake.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if missing, err := p.CanaryMissing(ctx); err != nil || !missing {
			t.Fatalf("%s: canary after the table was deleted: missing=%v err=%v", family, missing, err)
		}
		unchanged := withChange(st, anyService(t, st, 1), func(*desired.ServicePort) {})
		mustSyncIn(t, p, unchanged, proxy.RecoverySync)
		if got := sortedDump(fake); got != want {
			t.Errorf("%s: table not restored:\n%s\nwant:\n%s", family, got, want)
		}
	}
}
