package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Normalize reshapes obj the way upstream's round trip through its internal
// config does (v1alpha1 → internal → v1alpha1, see conversion.go upstream),
// so that --write-config-to and /configz print what kube-proxy prints:
//
//   - the internal config has one sync period pair and one masqueradeAll,
//     so only the active mode's section keeps them; the others read zero;
//   - portRange has no internal field any more, so it is dropped.
//
// obj must already have its mode set (ApplyPlatformDefaults).
func Normalize(obj *v1alpha1.KubeProxyConfiguration) {
	sync, minSync := activePeriods(obj)
	masqueradeAll := obj.IPTables.MasqueradeAll
	if proxy.Mode(obj.Mode).UsesNFTablesSection() {
		masqueradeAll = obj.NFTables.MasqueradeAll
	}
	obj.IPTables.SyncPeriod, obj.IPTables.MinSyncPeriod = metav1.Duration{}, metav1.Duration{}
	obj.IPVS.SyncPeriod, obj.IPVS.MinSyncPeriod = metav1.Duration{}, metav1.Duration{}
	obj.NFTables.SyncPeriod, obj.NFTables.MinSyncPeriod = metav1.Duration{}, metav1.Duration{}
	obj.IPTables.MasqueradeAll, obj.NFTables.MasqueradeAll = false, false
	switch mode := proxy.Mode(obj.Mode); {
	case mode == proxy.ModeIPVS:
		obj.IPVS.SyncPeriod, obj.IPVS.MinSyncPeriod = sync, minSync
		obj.IPTables.MasqueradeAll = masqueradeAll
	case mode.UsesNFTablesSection():
		obj.NFTables.SyncPeriod, obj.NFTables.MinSyncPeriod = sync, minSync
		obj.NFTables.MasqueradeAll = masqueradeAll
	default:
		obj.IPTables.SyncPeriod, obj.IPTables.MinSyncPeriod = sync, minSync
		obj.IPTables.MasqueradeAll = masqueradeAll
	}
	obj.PortRange = ""
}

// activePeriods returns the sync periods of the section obj.Mode uses
// (iptables for anything but ipvs and nftables, as upstream; ebpf mode
// reads nftables').
func activePeriods(obj *v1alpha1.KubeProxyConfiguration) (sync, minSync metav1.Duration) {
	switch mode := proxy.Mode(obj.Mode); {
	case mode == proxy.ModeIPVS:
		return obj.IPVS.SyncPeriod, obj.IPVS.MinSyncPeriod
	case mode.UsesNFTablesSection():
		return obj.NFTables.SyncPeriod, obj.NFTables.MinSyncPeriod
	default:
		return obj.IPTables.SyncPeriod, obj.IPTables.MinSyncPeriod
	}
}
