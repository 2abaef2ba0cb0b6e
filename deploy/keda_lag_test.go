package deploy_test

import "testing"

// TestKEDAWithoutLag checks the settings that keep workers up when Valkey
// reports no lag (XINFO GROUPS lag is nil after entries were deleted or
// trimmed past a group's position, Redis/Valkey 7.0+; docs/operate.md
// "When Valkey reports no lag"): a lag trigger never decides alone, since
// each stream it watches has a pendingEntriesCount trigger on the same
// group (XPENDING always answers), the ScaledObject never goes below 2
// replicas (an unreadable lag must not scale the runs' executors to one or
// zero), and a fallback holds replicas when the triggers fail.
func TestKEDAWithoutLag(t *testing.T) {
	m := loadManifests(t)
	so := get[*scaledObject](t, m, "ScaledObject", workerName)
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 2 {
		t.Errorf("minReplicaCount must be at least 2, whatever the lag reads")
	}
	if so.Spec.IdleReplicaCount != nil {
		t.Errorf("idleReplicaCount is set: an inactive lag trigger would scale the workers to %d", *so.Spec.IdleReplicaCount)
	}
	if so.Spec.Fallback == nil || so.Spec.Fallback.Replicas < *so.Spec.MinReplicaCount {
		t.Errorf("no fallback of at least minReplicaCount replicas for when the triggers cannot be read")
	}
	type key struct{ stream, group string }
	lag, pending := map[key]bool{}, map[key]bool{}
	for _, tr := range so.Spec.Triggers {
		k := key{tr.Metadata["stream"], tr.Metadata["consumerGroup"]}
		if tr.Metadata["lagCount"] != "" {
			lag[k] = true
			if tr.Metadata["pendingEntriesCount"] != "" {
				t.Errorf("trigger %s: both lagCount and pendingEntriesCount (KEDA uses only lagCount)", tr.Name)
			}
		}
		if tr.Metadata["pendingEntriesCount"] != "" {
			pending[k] = true
		}
	}
	if len(lag) == 0 {
		t.Fatal("no lagCount trigger")
	}
	for k := range lag {
		if !pending[k] {
			t.Errorf("stream %s group %s: a lagCount trigger without a pendingEntriesCount trigger beside it", k.stream, k.group)
		}
	}
}
