package etcdcluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/google/go-cmp/cmp"
)

// Derive changes no decision: planned with what it worked out, and again
// after the request changed under it, every scenario is answered as
// without it, byte for byte. The scenarios are FuzzPlan's, each planned
// once as it comes and once with every member Pod last applied as the
// first answer asked (Metacontroller's steady state, where currentPod
// keeps each Pod as it is), some with spec.pod labels and annotations.
func TestDeriveChangesNoDecision(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := range 1000 {
		data := make([]byte, 4+rng.Intn(40))
		rng.Read(data)
		o := scenario(data)
		if i%3 == 1 {
			o.Cluster.Spec.Pod = &v1beta2.PodPolicy{
				Labels:      map[string]string{"team": "a", LabelApp: "other", LabelServing: "false"},
				Annotations: map[string]string{"note": "b", AnnotationVersion: "9.9.9", v1beta2.Group + "/other": "c"},
			}
		}
		for round := range 2 {
			tag := fmt.Sprintf("scenario %d (%x), round %d", i, data, round)
			want := decisionJSON(t, Plan(o))
			derived := *o
			Derive(&derived)
			if got := decisionJSON(t, Plan(&derived)); got != want {
				t.Fatalf("%s: planned after Derive:\n%s\nwant\n%s", tag, got, want)
			}
			// The same Pods, changed after Derive: planned on themselves.
			for name, pod := range derived.Pods {
				if raw, ok := pod.Annotations[plan.LastAppliedAnnotation]; ok {
					changed := pod.DeepCopy()
					changed.Annotations[plan.LastAppliedAnnotation] = raw[:len(raw)/2]
					derived.Pods = maps.Clone(derived.Pods)
					derived.Pods[name] = changed
					o2 := *o
					o2.Pods = derived.Pods
					if got, want := decisionJSON(t, Plan(&derived)), decisionJSON(t, Plan(&o2)); got != want {
						t.Fatalf("%s: a Pod changed after Derive is planned on Derive's result:\n%s\nwant\n%s", tag, got, want)
					}
					break
				}
			}
			settleAll(t, o, Plan(o))
		}
	}
}

func decisionJSON(t *testing.T, d Decision) string {
	t.Helper()
	type child struct {
		Kind, Name, Type string
		Object           any
	}
	children := make([]child, 0, len(d.Children))
	for _, c := range d.Children {
		children = append(children, child{c.Kind, c.Name, fmt.Sprintf("%T", c.Object), c.Object})
	}
	b, err := json.Marshal(struct {
		Children []child
		Status   v1beta2.ClusterStatus
		Action   any
		Resync   string
		Final    bool
	}{children, d.Status, d.Action, d.ResyncAfter.String(), d.Finalized})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// settleAll gives every observed member Pod its answer in d as its last
// applied configuration, with that answer's labels and annotations.
func settleAll(t *testing.T, o *Observed, d Decision) {
	t.Helper()
	o.Pods = maps.Clone(o.Pods)
	for _, c := range d.Children {
		pod, ok := o.Pods[c.Name]
		if c.Kind != plan.KindPod || !ok {
			continue
		}
		var raw []byte
		var meta metav1.ObjectMeta
		switch obj := c.Object.(type) {
		case *corev1.Pod:
			raw, _ = json.Marshal(struct {
				APIVersion string            `json:"apiVersion"`
				Kind       string            `json:"kind"`
				Metadata   metav1.ObjectMeta `json:"metadata"`
				Spec       any               `json:"spec,omitempty"`
			}{"v1", "Pod", obj.ObjectMeta, obj.Spec})
			meta = obj.ObjectMeta
		case json.RawMessage:
			raw = obj
			var applied struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			if json.Unmarshal(raw, &applied) != nil {
				continue
			}
			meta = applied.Metadata
		default:
			continue
		}
		settled := pod.DeepCopy()
		settled.Labels = maps.Clone(meta.Labels)
		settled.Annotations = maps.Clone(meta.Annotations)
		if settled.Annotations == nil {
			settled.Annotations = map[string]string{}
		}
		settled.Annotations[plan.LastAppliedAnnotation] = string(raw)
		o.Pods[c.Name] = settled
	}
}

// isCurrentMeta says what comparing with currentMeta's maps says, over
// labels and annotations drawn from the keys that matter to it (the
// member's own labels, LabelServing, the hook's annotations, spec.pod's).
func TestIsCurrentMetaAgreesWithCurrentMeta(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	labelKeys := []string{LabelApp, LabelCluster, LabelNode, LabelServing, "team", "tier"}
	labelValues := []string{"etcd", testCluster, name(0), "true", "false", "a", ""}
	annotationKeys := []string{AnnotationPodSpecHash, AnnotationVersion, AnnotationSeedMember, v1beta2.Group + "/other", "note", "other"}
	annotationValues := []string{"", "h", "3.6.16", "b", "c"}
	draw := func(keys, values []string) map[string]string {
		if rng.Intn(8) == 0 {
			return nil
		}
		m := map[string]string{}
		for _, k := range keys {
			if rng.Intn(2) == 0 {
				m[k] = values[rng.Intn(len(values))]
			}
		}
		return m
	}
	yes := 0
	for i := range 50000 {
		o := observed(newCluster(3, "3.6.16"))
		if rng.Intn(2) == 0 {
			o.Cluster.Spec.Pod = &v1beta2.PodPolicy{Labels: draw(labelKeys, labelValues), Annotations: draw(annotationKeys, annotationValues)}
		}
		p := &planner{o: o, spec: o.Cluster.Spec.WithDefaults(), serving: map[string]bool{}}
		pod := readyPod(name(0))
		pod.Labels = draw(labelKeys, labelValues)
		switch rng.Intn(3) {
		case 0:
			p.serving[pod.Name] = true
		case 1:
			p.serving[pod.Name] = false
		}
		labels, annotations := draw(labelKeys, labelValues), draw(annotationKeys, annotationValues)
		if rng.Intn(2) == 0 {
			// Near misses: what currentMeta gives, or close to it.
			labels, annotations = p.currentMeta(pod, annotations)
			if rng.Intn(2) == 0 {
				labels, annotations = maps.Clone(labels), maps.Clone(annotations)
				switch rng.Intn(4) {
				case 0:
					delete(labels, labelKeys[rng.Intn(len(labelKeys))])
				case 1:
					annotations[annotationKeys[rng.Intn(len(annotationKeys))]] = annotationValues[rng.Intn(len(annotationValues))]
				case 2:
					delete(annotations, annotationKeys[rng.Intn(len(annotationKeys))])
				case 3:
					labels[labelKeys[rng.Intn(len(labelKeys))]] = labelValues[rng.Intn(len(labelValues))]
				}
			}
		}
		wantLabels, wantAnnotations := p.currentMeta(pod, annotations)
		want := maps.Equal(wantLabels, labels) && maps.Equal(wantAnnotations, annotations)
		if got := p.isCurrentMeta(pod, labels, annotations); got != want {
			t.Fatalf("case %d: isCurrentMeta %v, currentMeta's maps say %v: labels %v annotations %v policy %+v serving %v",
				i, got, want, labels, annotations, o.Cluster.Spec.Pod, p.serving)
		}
		if want {
			yes++
		}
	}
	if yes < 500 {
		t.Errorf("only %d cases matched: the test draws too few near misses", yes)
	}
}

// The memo of last applied metadata answers as decoding does: for a Pod
// seen before, for another text under the same UID (a hand-edited fixture,
// or the Pod's next configuration), for a Pod without a UID, and across
// the memo filling up and forgetting.
func TestAppliedMemoAgreesWithDecoding(t *testing.T) {
	memo := newAppliedMemo(2)
	texts := []string{
		`{"metadata":{"labels":{"app":"etcd"},"annotations":{"a":"1"}}}`,
		`{"metadata":{"labels":{"app":"etcd","x":"y"},"annotations":{"a":"2"}}}`,
		`{"metadata":{"labels":`,
		`{"kind":"Pod","metadata":{}}`,
	}
	for round := range 3 {
		for i, raw := range texts {
			for _, uid := range []string{"", "uid-1", fmt.Sprintf("uid-%d", i+2)} {
				meta, ok := decodeApplied(raw)
				want := appliedResult{meta, ok}
				got := memo.decode(types.UID(uid), raw)
				if diff := cmp.Diff(want, got, cmp.AllowUnexported(appliedResult{})); diff != "" {
					t.Errorf("round %d, text %d, UID %q: memo disagrees with decoding (-want +got):\n%s", round, i, uid, diff)
				}
			}
		}
	}
	if n := memo.entries.len(); n > memo.entries.max {
		t.Errorf("memo holds %d entries, bound %d", n, memo.entries.max)
	}
}

// The pod-spec hash Derive worked out is the one planning works out, and
// a parent replaced after Derive is hashed afresh.
func TestDerivedPodHashFollowsTheParent(t *testing.T) {
	o := observed(newCluster(3, "3.6.16"))
	Derive(o)
	p := &planner{o: o, spec: o.Cluster.Spec.WithDefaults()}
	if got, want := p.podHash(), podSpecHash(o.Cluster.Spec.WithDefaults()); got != want {
		t.Errorf("derived hash %s, computed %s", got, want)
	}
	changed := *o.Cluster
	changed.Spec.Pod = &v1beta2.PodPolicy{NodeSelector: map[string]string{"disk": "ssd"}}
	o.Cluster = &changed
	p = &planner{o: o, spec: o.Cluster.Spec.WithDefaults()}
	if got, want := p.podHash(), podSpecHash(changed.Spec.WithDefaults()); got != want {
		t.Errorf("after the parent changed: hash %s, want %s (the derived one was %s)", got, want, o.derived.podHash)
	}
}

// The pod-spec hash remembered under a cluster's spec text is the hash of
// the spec that text decodes to: another text under the same UID is
// hashed again, and a request without the text is hashed every time.
func TestPodHashesByText(t *testing.T) {
	memo := newSpecMemo(2)
	observe := func(uid types.UID, text string) *Observed {
		t.Helper()
		c := newCluster(3, "3.6.16")
		c.UID = uid
		c.Spec = v1beta2.ClusterSpec{}
		if err := json.Unmarshal([]byte(text), &c.Spec); err != nil {
			t.Fatal(err)
		}
		return &Observed{Cluster: c, SpecText: []byte(text)}
	}
	small := `{"size":3,"version":"3.6.16"}`
	withCPU := `{"size":3,"version":"3.6.16","pod":{"resources":{"requests":{"cpu":"250m"}}}}`
	cases := []struct {
		name, reason string
		o            *Observed
	}{
		{"first text", "hashed and remembered", observe("a", small)},
		{"same text again", "the remembered hash, which is the spec's", observe("a", small)},
		{"edited spec", "another text under the same UID is hashed again", observe("a", withCPU)},
		{"another cluster", "another UID has its own entry", observe("b", small)},
		{"third cluster", "past the bound the memo starts afresh", observe("c", withCPU)},
		{"no text", "a request without the text is hashed every time", &Observed{Cluster: observe("a", small).Cluster}},
	}
	for _, tc := range cases {
		want := podSpecHash(tc.o.Cluster.Spec.WithDefaults())
		if got := memo.of(tc.o); got != want {
			t.Errorf("%s (%s): hash %s, want %s", tc.name, tc.reason, got, want)
		}
	}
	if podSpecHash(observe("a", small).Cluster.Spec.WithDefaults()) == podSpecHash(observe("a", withCPU).Cluster.Spec.WithDefaults()) {
		t.Fatal("the two specs hash alike: the cases above prove nothing")
	}
	if n := memo.entries.len(); n > 2 {
		t.Errorf("%d entries, want at most the bound of 2", n)
	}
}

// The peer Service's record is decoded once per text and never shared: a
// planner that changes the record it was given changes no other sync's.
func TestServiceRecordsByText(t *testing.T) {
	memo := newRecordMemo(2)
	service := func(uid types.UID, raw string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: uid, Annotations: map[string]string{AnnotationBootstrap: raw}}}
	}
	seeded := `{"seedMember":"a-bcdfg","bootstrapped":true,"clusterID":"1f"}`
	recreated := `{"seedMember":"a-hjklm","recreatedFrom":"a-bcdfg"}`
	restored := `{"seedMember":"a-npqrs","restore":{"request":"r1","source":{"pvc":{"claimName":"c"}},"backupTime":"2026-11-27T01:00:00Z"}}`
	cases := []struct {
		name, reason string
		s            *corev1.Service
	}{
		{"first text", "decoded and remembered", service("a", seeded)},
		{"same text again", "the remembered record", service("a", seeded)},
		{"edited record", "another text under the same UID is decoded again", service("a", recreated)},
		{"with a restore", "a record with pointers is decoded every time", service("a", restored)},
		{"same restore again", "and not remembered", service("a", restored)},
		{"invalid text", "no record, as serviceRecord says", service("b", `{"seedMember":`)},
		{"no annotation", "no record", &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "c"}}},
		{"no UID", "decoded every time", service("", seeded)},
		{"no Service", "no record", nil},
	}
	for _, tc := range cases {
		wantRec, wantRaw := serviceRecord(tc.s)
		gotRec, gotRaw := memo.of(tc.s)
		if diff := cmp.Diff(wantRec, gotRec); diff != "" || gotRaw != wantRaw {
			t.Errorf("%s (%s): text %q, want %q; record (-want +got):\n%s", tc.name, tc.reason, gotRaw, wantRaw, diff)
		}
		if gotRec == nil {
			continue
		}
		// The planner builds on its record.
		gotRec.RevisionSeen, gotRec.SeedMember = 7, "changed"
		if gotRec.Restore != nil {
			gotRec.Restore.Request = "changed"
		}
		if again, _ := memo.of(tc.s); cmp.Equal(again, gotRec) {
			t.Errorf("%s (%s): a record changed by one caller is returned to the next", tc.name, tc.reason)
		}
	}
	if n := memo.entries.len(); n > 2 {
		t.Errorf("%d entries, want at most the bound of 2", n)
	}
}

func TestFirstSeedsByUID(t *testing.T) {
	memo := newSeedMemo(1)
	cluster := func(name string, uid types.UID) *v1beta2.EtcdCluster {
		return &v1beta2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
	}
	cases := []struct {
		name, reason string
		c            *v1beta2.EtcdCluster
	}{
		{"first", "derived and remembered", cluster("a", "u1")},
		{"again", "remembered", cluster("a", "u1")},
		{"renamed", "a fixture that reuses a UID under another name gets its own seed", cluster("b", "u1")},
		{"another UID", "past the bound the memo starts afresh", cluster("a", "u2")},
		{"no UID", "derived every time", cluster("a", "")},
	}
	for _, tc := range cases {
		if got, want := memo.of(tc.c), SeedName(tc.c.Name, string(tc.c.UID)); got != want {
			t.Errorf("%s (%s): seed %s, want %s", tc.name, tc.reason, got, want)
		}
	}
}

// sameRecord is reflect.DeepEqual of two records: every field of the
// record changed alone makes them differ, and a new field fails here
// until sameRecord compares it.
func TestSameRecord(t *testing.T) {
	if n := reflect.TypeFor[v1beta2.BootstrapStatus]().NumField(); n != 7 {
		t.Fatalf("BootstrapStatus has %d fields; sameRecord compares 7", n)
	}
	at := metav1.NewTime(time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC))
	restore := func() *v1beta2.RestoreRecord {
		return &v1beta2.RestoreRecord{Request: "r", Source: v1beta2.ResolvedSource{PVC: &v1beta2.PVCBackupSource{ClaimName: "c"}}, BackupTime: &at}
	}
	base := v1beta2.BootstrapStatus{SeedMember: "a-bcdfg", Bootstrapped: true, ClusterID: "1f", RecreatedFrom: "a-hjklm", RevisionSeen: 1_000_000}
	cases := []struct {
		name string
		edit func(*v1beta2.BootstrapStatus)
	}{
		{"alike", func(*v1beta2.BootstrapStatus) {}},
		{"seed", func(r *v1beta2.BootstrapStatus) { r.SeedMember = "a-other" }},
		{"bootstrapped", func(r *v1beta2.BootstrapStatus) { r.Bootstrapped = false }},
		{"formed", func(r *v1beta2.BootstrapStatus) { r.Formed = true }},
		{"cluster ID", func(r *v1beta2.BootstrapStatus) { r.ClusterID = "2e" }},
		{"recreated from", func(r *v1beta2.BootstrapStatus) { r.RecreatedFrom = "" }},
		{"revision seen", func(r *v1beta2.BootstrapStatus) { r.RevisionSeen = 2_000_000 }},
		{"a restore on one side", func(r *v1beta2.BootstrapStatus) { r.Restore = restore() }},
	}
	for _, tc := range cases {
		a, b := base, base
		tc.edit(&b)
		if got, want := sameRecord(&a, &b), reflect.DeepEqual(a, b); got != want {
			t.Errorf("%s: sameRecord %v, reflect.DeepEqual %v", tc.name, got, want)
		}
	}
	// Restores compared by value, not by pointer.
	a, b := base, base
	a.Restore, b.Restore = restore(), restore()
	if !sameRecord(&a, &b) {
		t.Error("equal restores on both sides: sameRecord says they differ")
	}
	b.Restore.Source.PVC.ClaimName = "other"
	if sameRecord(&a, &b) {
		t.Error("restores from different claims: sameRecord says they are alike")
	}
}
