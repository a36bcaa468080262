package watch

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// watchOpened returns a wait for the next watch of resource on client to
// be open. The fake delivers a change only to the watches open when it is
// made, and an informer counts as synced once it has listed, before it
// watches: a test that changes objects right after the sync can lose the
// change (TestNodeWatchDeletedNode did, about one run in 30). Opening the
// watch here, as the fake's own reactor would, tells when it exists.
func watchOpened(client *fake.Clientset, resource string) func(t *testing.T) {
	opened := make(chan struct{}, 1)
	client.PrependWatchReactor(resource, func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if a, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = a.ListOptions
		}
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		select {
		case opened <- struct{}{}:
		default:
		}
		return true, w, nil
	})
	return func(t *testing.T) {
		t.Helper()
		select {
		case <-opened:
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s watch opened within 10 s", resource)
		}
	}
}
