package deploy_test

// KEDA's Go module (github.com/kedacore/keda/v2) is not a dependency of
// this module: it is large and not known to be served by the module proxy
// used here. These types mirror the keda.sh/v1alpha1 fields that the
// manifests use, named and shaped as in KEDA's apis/keda/v1alpha1 package;
// decoding strictly into them makes any other field (a typo, or a field of
// a newer KEDA this mirror does not know) fail the test.

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scaledObject mirrors keda.sh/v1alpha1 ScaledObject.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              scaledObjectSpec `json:"spec"`
}

type scaledObjectSpec struct {
	ScaleTargetRef   *scaleTarget    `json:"scaleTargetRef"`
	PollingInterval  *int32          `json:"pollingInterval,omitempty"`
	InitialCooldown  *int32          `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod   *int32          `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount *int32          `json:"idleReplicaCount,omitempty"`
	MinReplicaCount  *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount  *int32          `json:"maxReplicaCount,omitempty"`
	Advanced         *advancedConfig `json:"advanced,omitempty"`
	Triggers         []scaleTriggers `json:"triggers"`
	Fallback         *fallback       `json:"fallback,omitempty"`
}

type scaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

type advancedConfig struct {
	HorizontalPodAutoscalerConfig *hpaConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool       `json:"restoreToOriginalReplicaCount,omitempty"`
}

type hpaConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
	Name     string                                         `json:"name,omitempty"`
}

type fallback struct {
	FailureThreshold int32 `json:"failureThreshold"`
	Replicas         int32 `json:"replicas"`
}

type scaleTriggers struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	AuthenticationRef *authRef          `json:"authenticationRef,omitempty"`
	MetricType        string            `json:"metricType,omitempty"`
}

type authRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// triggerAuthentication mirrors keda.sh/v1alpha1 TriggerAuthentication
// (only secretTargetRef and podIdentity).
type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              triggerAuthSpec `json:"spec"`
}

type triggerAuthSpec struct {
	SecretTargetRef []secretTargetRef `json:"secretTargetRef,omitempty"`
	PodIdentity     *podIdentity      `json:"podIdentity,omitempty"`
}

type secretTargetRef struct {
	Parameter string `json:"parameter"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

type podIdentity struct {
	Provider string `json:"provider"`
}
